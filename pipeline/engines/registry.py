"""Name -> engine class, imported lazily so the core needs no engine package installed, and a
producer that only checks a voice (`synth submit`, the API) loads no engine code and no numpy."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from pipeline.errors import EngineUnavailableError

if TYPE_CHECKING:
    from pipeline.engines.base import Engine
    from pipeline.settings import EngineSettings

ENGINES = {
    "piper": ("pipeline.engines.piper.engine", "PiperEngine", "piper"),
    "orpheus": ("pipeline.engines.orpheus.engine", "OrpheusEngine", "orpheus"),
}


def load_engine(settings: EngineSettings) -> Engine:
    """The engine the settings name: in a process of its own or in this one (``separate_process``)."""
    if separate_process(settings):
        from pipeline.engines.hosted import HostedEngine

        return HostedEngine(settings, load_inline)
    return load_inline(settings)


def load_inline(settings: EngineSettings) -> Engine:
    """The engine, in this process."""
    try:
        module_name, class_name, extra = ENGINES[settings.engine]
    except KeyError:
        raise EngineUnavailableError(
            f"unknown engine {settings.engine!r}; choose one of {', '.join(sorted(ENGINES))}"
        ) from None
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise EngineUnavailableError(
            f"engine {settings.engine!r} needs its extra: pip install 'synth[{extra}]' ({e})"
        ) from e
    return getattr(module, class_name).from_settings(settings)


def separate_process(settings: EngineSettings) -> bool:
    """Whether the engine gets a process of its own (SYNTH_ENGINE_PROCESS; see Settings)."""
    if settings.process != "auto":
        return settings.process == "separate"
    if settings.engine != "orpheus" or settings.device == "cpu":
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


# Voices each engine serves when SYNTH_VOICES is not set; known without loading the engine, so a
# producer can refuse an unknown voice before it writes anything.
DEFAULT_VOICES = {
    "piper": ("joe",),
    "orpheus": ("tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe"),
}


def engine_voices(settings: EngineSettings) -> tuple[str, ...]:
    if settings.voices:
        return tuple(settings.voices)
    if settings.engine == "piper" and settings.model:
        from pathlib import Path

        return (Path(settings.model).stem,)
    return DEFAULT_VOICES.get(settings.engine, ())


def engine_phonemes(settings: EngineSettings) -> frozenset[str] | None:
    """The IPA symbols the engine's voices say, for checking a lexicon's phoneme entries without
    loading the engine; None for an engine that takes no phonemes (Orpheus reads text only)."""
    if settings.engine != "piper":
        return None
    from pathlib import Path

    from pipeline.engines.piper.voices import phoneme_symbols, voice_model_path

    if settings.model:
        return phoneme_symbols([Path(settings.model)])
    try:
        return phoneme_symbols([voice_model_path(v) for v in engine_voices(settings)])
    except (OSError, KeyError) as e:
        raise EngineUnavailableError(f"the Piper voices' phoneme lists could not be read: {e}") from e
