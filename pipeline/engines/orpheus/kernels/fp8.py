"""Per-token fp8 quantization of activations in one kernel, for ``Float8Linear`` on CUDA.

``torch._scaled_mm`` wants its activations in e4m3 with one scale per row. In plain torch that is
six kernels per linear layer (abs, amax, clamp, divide, divide, cast) plus a pad to a multiple of
16 rows; in a decode step at small batch those launches cost more than the weight bytes fp8 saves.
This Triton kernel reads each row twice (max, then scale and cast; the row is in cache the second
time) and writes the padded e4m3 matrix and the scales at once. Padding rows come out as zeros.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pipeline.engines.orpheus.kernels import FP8_MAX

BLOCK = 1024


@triton.jit
def _quant_rows_kernel(x_ptr, q_ptr, s_ptr, m, k, stride_x, stride_q, fp8_max, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    live = row < m
    amax = tl.zeros([BLOCK], tl.float32)
    for k0 in range(0, k, BLOCK):
        mask = live & (k0 + offs < k)
        x = tl.load(x_ptr + row * stride_x + k0 + offs, mask=mask, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(x))
    scale = tl.maximum(tl.max(amax, 0), 1e-12) / fp8_max
    for k0 in range(0, k, BLOCK):
        mask = live & (k0 + offs < k)
        x = tl.load(x_ptr + row * stride_x + k0 + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(q_ptr + row * stride_q + k0 + offs, (x / scale).to(tl.float8e4nv), mask=k0 + offs < k)
    tl.store(s_ptr + row, scale)


def quantize_rows(x: torch.Tensor, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x [m, k] (any float dtype, unit stride in k) -> (e4m3 [rows, k], fp32 scales [rows, 1]),
    rows >= m; the rows past m are zeros."""
    if x.stride(1) != 1:
        x = x.contiguous()
    m, k = x.shape
    q = torch.empty((rows, k), dtype=torch.float8_e4m3fn, device=x.device)
    s = torch.empty((rows, 1), dtype=torch.float32, device=x.device)
    _quant_rows_kernel[(rows,)](x, q, s, m, k, x.stride(0), q.stride(0), FP8_MAX, BLOCK=BLOCK, num_warps=4)
    return q, s


# Weight-only fp8 (W8A16) for small batches ------------------------------------------------------
#
# At the batch of a decode step (M = 1..128 rows) a GEMM is a stream over its weight: the fp8
# weight is half of bf16's bytes, but ``_scaled_mm`` there pads M to a 128-row tile and needs the
# activations quantized first (one more kernel per projection). This kernel reads the e4m3 weight,
# converts it in registers and multiplies with the activations as they are (no activation
# quantization, so it is also closer to bf16 than ``_scaled_mm``), then applies the per-channel
# scale. Programs with the same columns are launched next to each other (M is the grid's fast
# axis), so a weight tile read for the first rows is still in L2 for the next.
#
# Without a split over K the narrow projections launch too few programs to fill the device, so
# only the widest (gate/up) streamed its weight near the memory's bandwidth, and from 32 rows on
# the kernel lost to both ``_scaled_mm`` and bf16. Hence the K split (split=0 below): with it the
# kernel beats both up to 32 rows, where Float8Linear uses it (model/quant.py; figures in
# docs/performance.md; ``SYNTH_ORPHEUS_DISABLE=fp8_small_rows`` turns it off).

# Launch settings by rows: rows <= bound -> (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages, f16, split).
# f16: the dot in fp16 (the activations clamped to fp16's range, 10 mantissa bits to bf16's 7),
# else in the activations' dtype; split: parts of K (linear_w8a16; 0: two programs per
# multiprocessor). The best single setting for all four projection shapes in a sweep.
W8A16_LAUNCH = (
    (16, (16, 128, 128, 4, 3, True, 0)),
    (32, (32, 128, 128, 4, 3, True, 0)),
)


def w8a16_launch(m: int):
    """The launch settings for ``m`` rows, or None where ``_scaled_mm`` is the faster kernel."""
    for bound, launch in W8A16_LAUNCH:
        if m <= bound:
            return launch
    return None


F16_MAX = tl.constexpr(65504.0)


@triton.jit
def _w8a16_kernel(
    x_ptr,
    w_ptr,
    s_ptr,
    y_ptr,
    m,
    n,
    k,
    k_span,
    sx,
    sw,
    sy,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    EVEN_NK: tl.constexpr,
    F16: tl.constexpr,
    SPLIT: tl.constexpr,
):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    ps = tl.program_id(2)  # which part of K (SPLIT > 1: partial sums, added after)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    k_lo = ps * k_span
    k_hi = tl.minimum(k_lo + k_span, k)
    x_ptrs = x_ptr + rm[:, None].to(tl.int64) * sx + k_lo + rk[None, :]
    w_ptrs = w_ptr + rn[:, None].to(tl.int64) * sw + k_lo + rk[None, :]
    live_m = rm[:, None] < m
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BK):
        if EVEN_NK:
            x = tl.load(x_ptrs, mask=live_m, other=0.0)
            w = tl.load(w_ptrs)
        else:
            in_k = k0 + rk[None, :] < k_hi
            x = tl.load(x_ptrs, mask=live_m & in_k, other=0.0)
            w = tl.load(w_ptrs, mask=(rn[:, None] < n) & in_k, other=0.0)
        if F16:  # e4m3 -> fp16 is one instruction (exact); x clamped to fp16's range
            x = tl.minimum(tl.maximum(x.to(tl.float32), -F16_MAX), F16_MAX).to(tl.float16)
            acc += tl.dot(x, tl.trans(w.to(tl.float16)))
        else:
            acc += tl.dot(x, tl.trans(w.to(x_ptr.dtype.element_ty)))
        x_ptrs += BK
        w_ptrs += BK
    s = tl.load(s_ptr + rn, mask=rn < n, other=0.0)
    y = acc * s[None, :]
    live = live_m & (rn[None, :] < n)
    if SPLIT > 1:  # fp32 partials [SPLIT, m, n]
        at = (ps * m + rm[:, None]).to(tl.int64) * n + rn[None, :]
        tl.store(y_ptr + at, y, mask=live)
    else:
        y_ptrs = y_ptr + rm[:, None].to(tl.int64) * sy + rn[None, :]
        tl.store(y_ptrs, y.to(y_ptr.dtype.element_ty), mask=live)


@triton.jit
def _split_sum_kernel(p_ptr, y_ptr, total, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = i < total
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for part in tl.static_range(SPLIT):
        acc += tl.load(p_ptr + part * total + i, mask=live, other=0.0)
    tl.store(y_ptr + i, acc.to(y_ptr.dtype.element_ty), mask=live)


SPLIT_SUM_BLOCK = 1024
_SMS: dict = {}


def _multiprocessors(device) -> int:
    if device not in _SMS:
        _SMS[device] = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1
    return _SMS[device]


def linear_w8a16(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, launch=None):
    """``x @ (weight * scale[:, None]).T`` with the weight read as e4m3: x [m, k] (bf16 or fp16,
    unit stride in k), weight [n, k] e4m3, scale [n] fp32 -> [m, n] in x's dtype. ``launch``:
    (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages, f16, split); by default ``w8a16_launch(m)`` (or the
    largest rows' settings past the table). ``split`` > 1 splits K over that many programs a tile
    (more programs for the narrow projections), whose fp32 partial sums a second kernel adds; 0
    picks it so that there are two programs per multiprocessor."""
    if x.stride(1) != 1:
        x = x.contiguous()
    m, k = x.shape
    n = weight.shape[0]
    bm, bn, bk, warps, stages, f16, split = launch or w8a16_launch(m) or W8A16_LAUNCH[-1][1]
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    if split == 0:  # auto: enough programs for two on every multiprocessor
        split = max(1, min(triton.cdiv(2 * _multiprocessors(x.device), tiles), k // (2 * bk)))
    span = triton.cdiv(triton.cdiv(k, split), bk) * bk  # K per split, whole blocks
    split = triton.cdiv(k, span)
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    out = y if split == 1 else torch.empty((split, m, n), dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn), split)
    _w8a16_kernel[grid](
        x,
        weight,
        scale,
        out,
        m,
        n,
        k,
        span,
        x.stride(0),
        weight.stride(0),
        y.stride(0),
        BM=bm,
        BN=bn,
        BK=bk,
        EVEN_NK=(n % bn == 0 and k % span == 0),
        F16=f16,
        SPLIT=split,
        num_warps=warps,
        num_stages=stages,
    )
    if split > 1:
        total = m * n
        _split_sum_kernel[(triton.cdiv(total, SPLIT_SUM_BLOCK),)](
            out, y, total, SPLIT=split, BLOCK=SPLIT_SUM_BLOCK, num_warps=4
        )
    return y
