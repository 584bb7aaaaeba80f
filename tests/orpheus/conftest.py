"""A tiny Orpheus checkpoint built once per session with ``synth models make-tiny``; CPU, fp32."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("snac")

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the hub


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    from click.testing import CliRunner

    from cli.models import models

    out = tmp_path_factory.mktemp("orpheus") / "tiny"
    result = CliRunner().invoke(models, ["make-tiny", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="session")
def tiny(tiny_dir):
    """The tiny model, tokenizer and codec loaded by the engine's own loader, fp32 on the CPU."""
    from pipeline.engines.orpheus.model.loading import load

    return load(str(tiny_dir), None, "float32", "none", "cpu")


@pytest.fixture(scope="session")
def engine_settings(tiny_dir):
    from pipeline.settings import EngineSettings

    def make(**overrides):
        fields = dict(
            engine="orpheus",
            model=str(tiny_dir),
            codec=None,
            voices=None,
            dtype="float32",
            quantization="none",
            max_batch=4,
            device="cpu",
            threads=2,
        )
        return EngineSettings(**{**fields, **overrides})

    return make
