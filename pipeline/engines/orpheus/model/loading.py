"""Load an Orpheus checkpoint (tokenizer, config, safetensors weights) and its SNAC codec.

``model`` and ``codec`` are local folders or hub ids; with ``HF_HUB_OFFLINE=1`` hub ids resolve from the
local cache only. When no codec is named and the model folder has a ``snac/`` subfolder (make-tiny
writes one), that codec is used; otherwise hubertsiuzdak/snac_24khz.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from pathlib import Path

from pipeline.engines.orpheus.codec.snac import DEFAULT_CODEC, SnacCodec, load_codec
from pipeline.engines.orpheus.config import Switches
from pipeline.engines.orpheus.model import device as devices
from pipeline.engines.orpheus.model.quant import QuantReport, quantize
from pipeline.engines.orpheus.prompt import check_prompt_start
from pipeline.engines.orpheus.vocab import VOCAB_SIZE
from pipeline.errors import EngineUnavailableError

log = logging.getLogger(__name__)

DEFAULT_MODEL = "canopylabs/orpheus-3b-0.1-ft"


@dataclass(frozen=True)
class ServingHints:
    """What a checkpoint asks of the engine where it differs from a released Orpheus checkpoint,
    read from its config.json's ``synth_serving``. ``synth models make-tiny`` writes them for its
    random weights and byte-level tokenizer (tiny.py ``RANDOM_SERVING``); a released checkpoint has
    none, and the engine serves it as production needs. Each None: the engine's own."""

    # A job's token budget is the text's expected speech length times this (engine.BUDGET_SLACK).
    budget_slack: float | None = None
    # A job that reaches its budget: "error" (runaway generation, the engine's) or "keep" its audio.
    budget_policy: str | None = None
    # The prompt lengths of the prefill graphs and mixed steps (serving/graphs.py LENGTHS).
    prefill_lengths: tuple[int, ...] | None = None

    @classmethod
    def from_config(cls, raw: Mapping | None) -> ServingHints:
        """From a checkpoint config's ``synth_serving`` (None: no hints); refuses what it does not
        know, so a misspelt hint never passes for an absent one."""
        raw = dict(raw or {})
        unknown = sorted(set(raw) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown synth_serving hint {', '.join(unknown)}")
        if raw.get("prefill_lengths") is not None:
            raw["prefill_lengths"] = tuple(sorted(int(n) for n in raw["prefill_lengths"]))
        return cls(**raw)


@dataclass
class LoadedModel:
    source: str
    tokenizer: Any  # transformers' tokenizer of the checkpoint
    model: Any  # transformers LlamaForCausalLM (decoder layers maybe quantized)
    codec: SnacCodec
    choice: devices.DeviceChoice
    quant: QuantReport
    random_weights: bool  # the checkpoint says its weights are random (make-tiny)
    serving: ServingHints = field(default_factory=ServingHints)  # what it asks of the engine

    @property
    def device(self) -> str:
        return self.choice.device

    @property
    def fallbacks(self) -> list[str]:
        """What fell back while loading, and why: the dtype, the quantization, the codec's kernels."""
        asked = [r for r in (self.choice.fallback, self.quant.fallback) if r]
        return asked + list(getattr(self.codec, "fallbacks", ()))


def codec_source(model_source: str, codec: str | None) -> tuple[str, str]:
    """The codec to load, and where that choice came from (for a load error to name)."""
    if codec:
        return codec, "SYNTH_CODEC"
    local = Path(model_source) / "snac"
    if (local / "config.json").is_file():
        return str(local), "the model folder's snac/"
    if Path(model_source).is_dir():
        return DEFAULT_CODEC, f"the default when SYNTH_CODEC is not set and {model_source} has no snac/ folder"
    return DEFAULT_CODEC, "the default when SYNTH_CODEC is not set"


def load_lm(source: str, dtype_name: str, device: str):
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise EngineUnavailableError("the Orpheus engine needs transformers") from e
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        check_prompt_start(tokenizer, source)  # before the weights: a wrong one fails fast
        model = AutoModelForCausalLM.from_pretrained(source, dtype=devices.torch_dtype(dtype_name))
    except (OSError, ValueError) as e:
        raise EngineUnavailableError(load_failure(source, e)) from e
    if model.config.vocab_size < VOCAB_SIZE:
        raise EngineUnavailableError(
            f"{source!r} has {model.config.vocab_size} token ids; Orpheus audio needs {VOCAB_SIZE}"
        )
    return tokenizer, model.eval().to(device)


def load_failure(source: str, error: Exception) -> str:
    """Why ``source`` did not load, in one line, and what to set instead. transformers' own words
    (no hub access, a missing file) never name the setting, and the default is a hub id that a
    machine without hub access cannot load."""
    which = "the default when SYNTH_MODEL is not set" if source == DEFAULT_MODEL else "SYNTH_MODEL"
    reason = " ".join(str(error).split()).rstrip(".")
    return (
        f"cannot load the Orpheus model {source!r} ({which}): {reason}; set SYNTH_MODEL to a local "
        "checkpoint folder or a hub id (`synth models make-tiny DIR` makes a tiny random one for a CPU try)"
    )


def load(
    model: str | None,
    codec: str | None,
    dtype: str,
    quantization: str,
    device: str,
    switches: Switches = Switches(),
    codec_dtype: str = "auto",
) -> LoadedModel:
    """Everything the engine needs, on one device, quantized as asked (or as the device allows);
    ``switches``: the fp8 small-rows kernel and the fused codec kernels, where they can run;
    ``codec_dtype``: the codec's activations (codec/snac.py SnacCodec)."""
    choice = devices.choose(device, dtype)
    source = model or DEFAULT_MODEL
    tokenizer, lm = load_lm(source, choice.dtype_name, choice.device)
    report = quantize(
        lm, quantization, choice.device, devices.torch_dtype(choice.dtype_name), small_rows=switches.fp8_small_rows
    )
    codec_name, codec_origin = codec_source(source, codec)
    snac = load_codec(
        codec_name,
        choice.device,
        fuse=None if switches.codec_fused else False,
        origin=codec_origin,
        dtype=codec_dtype,
    )
    random_weights = bool(getattr(lm.config, "synth_random_weights", False))
    try:
        serving = ServingHints.from_config(getattr(lm.config, "synth_serving", None))
    except (TypeError, ValueError) as e:
        raise EngineUnavailableError(f"{source!r}: config.json's synth_serving: {e}") from e
    log.info(
        "Orpheus %s on %s (%s, %s, quant %s)", source, choice.name, choice.device, choice.dtype_name, report.applied
    )
    return LoadedModel(source, tokenizer, lm, snac, choice, report, random_weights, serving)
