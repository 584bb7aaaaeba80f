"""The KV cache: keys and values of every layer, one preallocated row per sequence."""

from __future__ import annotations

import torch

from pipeline.engines.orpheus.model.device import KV_DTYPES


class KVCache:
    """Keys and values for ``rows`` sequences of up to ``context`` tokens, for every layer.

    Position ``context`` is a scratch slot: rows that are not decoding write there, and it is
    never attended to, so the captured step needs no branch for idle rows.

    ``kv_dtype``: None or "model" stores the model dtype ``dtype``; "fp8" stores e4m3
    (``torch.float8_e4m3fn``), half the bytes of bf16, so a step's attention reads half as much and
    twice the rows fit. An fp8 entry is ``x / scale`` saturated to +-448 and rounded to e4m3, with
    one fixed scale per cache (``k_scale``, ``v_scale``: 1.0 by default, vLLM's uncalibrated
    default; the engine sets them from the checkpoint, kv_scales.py); reads convert back to the
    model dtype and fold the scales into the attention (the key scale into the softmax scale, the
    value scale into the output). Non-fp8 caches take none.

    Why a fixed scale of 1 is sound for Llama's K and V: they are projections of RMS-normed hidden
    states (keys then rotated, which keeps each pair's norm), typically of order 1 to 10 with a
    few key channels in the tens: inside e4m3's range (448) and above its smallest normal (2^-6),
    where rounding to nearest costs at most 2^-4 of an entry, unbiased, and averaging down over
    the 128-wide q.k products and the softmax-weighted sum of values. What it risks: K or V
    outliers past 448 are clipped there (saturated, not NaN), which is why the engine measures the
    checkpoint's range at load and scales a cache whose entries come near it (kv_scales.py), and
    entries under 2^-6 are subnormal (steps of 2^-9). ``python -m ops.bench.kernels kv8
    --model`` prints a checkpoint's largest |K| and |V| over a longer run.
    """

    def __init__(
        self,
        layers: int,
        rows: int,
        kv_heads: int,
        context: int,
        head_dim: int,
        dtype,
        device,
        kv_dtype: str | None = None,
        k_scale: float = 1.0,
        v_scale: float = 1.0,
    ):
        store = kv_storage_dtype(kv_dtype, dtype)
        self.fp8 = store == torch.float8_e4m3fn
        if not self.fp8 and (k_scale, v_scale) != (1.0, 1.0):
            raise ValueError("k_scale and v_scale apply to an fp8 KV cache only")
        shape = (layers, rows, kv_heads, context + 1, head_dim)  # [L, R, Hkv, T+1, D]
        self.k = torch.zeros(shape, dtype=store, device=device)
        self.v = torch.zeros(shape, dtype=store, device=device)
        self.k_scale, self.v_scale = float(k_scale), float(v_scale)
        self.context = context
        self.scratch = context

    @staticmethod
    def bytes_per_row(layers: int, kv_heads: int, context: int, head_dim: int, itemsize: int) -> int:
        """``itemsize``: of what the cache stores (``kv_storage_dtype(...).itemsize``)."""
        return 2 * layers * kv_heads * (context + 1) * head_dim * itemsize

    def move(self, src: int, dst: int, length: int) -> None:
        """Copy a sequence's first ``length`` positions from row ``src`` to row ``dst``."""
        self.k[:, dst, :, :length] = self.k[:, src, :, :length]
        self.v[:, dst, :, :length] = self.v[:, src, :, :length]


def kv_storage_dtype(kv_dtype: str | None, dtype):
    """The torch dtype a cache stores for a ``kv_dtype`` setting (KVCache)."""
    if kv_dtype in (None, "model"):
        return dtype
    if kv_dtype == "fp8":
        return torch.float8_e4m3fn
    if kv_dtype == "auto":
        raise ValueError('kv_dtype "auto" depends on the device: resolve it first (device.resolve_kv_dtype)')
    raise ValueError(f"unknown KV cache dtype {kv_dtype!r}; choose one of {KV_DTYPES}")
