"""The engine's configuration as frozen objects, built once from Settings and passed down.

Each default is written here, once: Settings (pipeline/settings.py) takes its Orpheus defaults from
these classes, ``OrpheusEngine`` takes an ``OrpheusConfig``, and the loop, the runner and the codec
take the parts they use. Adding a setting touches this file and Settings. Importing it imports no
torch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Literal


@dataclass(frozen=True)
class Switches:
    """The engine's faster paths, each of which can be turned off (``SYNTH_ORPHEUS_DISABLE``) to
    rule it out when something looks wrong on a new GPU, driver or Triton. Each falls back to the
    path it replaces: the same tokens and audio, to rounding. Serving leaves them all on."""

    # A step's tokens drawn by one Triton kernel (kernels/sample.py); off: the torch draw.
    fused_sampler: bool = True
    # Norms with their residual adds, RoPE with the cache write and silu * up as Triton kernels
    # (kernels/fused.py); off: their torch references.
    fused_ops: bool = True
    # A prefill's attention as Triton kernels (kernels/attention.py); off: the torch path
    # (rotations, indexed cache writes and reads, SDPA).
    prefill_attention: bool = True
    # A short prompt's prefill rides in the decode step's pass (serving/runner.py); off: it is
    # prefilled in a pass of its own.
    mixed_steps: bool = True
    # fp8 weights: the weight-only kernel for a decode step's few rows (kernels/fp8.py); off:
    # ``_scaled_mm`` at every batch.
    fp8_small_rows: bool = True
    # SNAC's residual units and noise as Triton kernels (kernels/codec.py); off: the module's ops.
    codec_fused: bool = True
    # The decode steps on a CUDA stream of their own priority (serving/runner.py); off: the
    # default stream.
    stream_priority: bool = True
    # Boot objects frozen out of the cyclic garbage collector (pipeline/gcfreeze.py); off:
    # the collector is left as it is.
    gc_freeze: bool = True

    @classmethod
    def without(cls, names: Iterable[str]) -> Switches:
        """Every path on except ``names``."""
        names = tuple(names)
        unknown = sorted(set(names) - set(SWITCHES))
        if unknown:
            raise ValueError(f"unknown Orpheus switch {', '.join(unknown)}; choose from {', '.join(SWITCHES)}")
        return cls(**dict.fromkeys(names, False))


SWITCHES = tuple(f.name for f in fields(Switches))


@dataclass(frozen=True)
class RealtimeConfig:
    """How realtime streams share the rows and the steps with batch work (serving/admission.py,
    serving/scheduler.py)."""

    # Rows kept free of batch work for realtime arrivals; 0: an eighth of the rows.
    rows: int = 0
    # Rows decoding while realtime streams run; 0: a third of the rows. Batch rows over it pause,
    # keeping their cache.
    max_rows: int = 0
    # While streams run, batch rows decode every Nth step; the steps between decode the streams
    # alone. Every 2nd keeps a stream's tokens coming faster than it plays while batch work keeps
    # most of its pace.
    batch_every: int = 2
    # ... and every Nth while a stream waits for its first chunk: the first audio comes sooner the
    # rarer batch steps are then, and starting streams are few and short-lived, so batch work
    # hardly slows.
    batch_every_starting: int = 32
    # While a stream waits for its first chunk, the streams already playing join every Nth of the
    # realtime-only steps, and the steps between decode the starting streams alone: a lower first
    # audio for less headroom in the playing streams. Every 2nd: every 3rd ran them dry.
    playing_every: int = 2
    # Frames of lookahead for a stream's first chunk: 2 (out after 21 tokens) or 1 (after 14).
    first_lookahead: int = 2
    # A playing stream whose audio runs less than this far ahead of its player joins the steps
    # for starting streams, so it gets every realtime step until it is ahead again; 0: off.
    # Wider keeps more streams ahead when there are more than the rows can pace, for a few ms
    # more of first audio.
    low_lead_ms: int = 300

    def __post_init__(self) -> None:
        if min(self.rows, self.max_rows) < 0:
            raise ValueError("realtime rows and max_rows must be >= 0 (0: derived from the rows)")
        if min(self.batch_every, self.batch_every_starting, self.playing_every) < 1:
            raise ValueError("realtime batch_every, batch_every_starting and playing_every must be >= 1")
        if self.low_lead_ms < 0:
            raise ValueError("realtime low_lead_ms must be >= 0 (0: off)")
        if self.first_lookahead not in (1, 2):
            raise ValueError("realtime first_lookahead must be 1 or 2 frames")


@dataclass(frozen=True)
class OrpheusConfig:
    """Everything the Orpheus engine is configured with, beside the model it loads."""

    # Tokens per KV-cache row (prompt and audio of one text chunk); long texts are split to fit.
    context: int = 2048
    # Capture the decode step and the common codec windows as CUDA graphs at boot; off: eager.
    cuda_graphs: bool = True
    # KV-cache storage: "auto" (fp8 on GPUs of compute capability 8.9 and up, the model dtype
    # elsewhere), "model" or "fp8" (model/device.py resolve_kv_dtype).
    kv_dtype: Literal["auto", "model", "fp8"] = "auto"
    realtime: RealtimeConfig = field(default_factory=RealtimeConfig)
    switches: Switches = field(default_factory=Switches)
