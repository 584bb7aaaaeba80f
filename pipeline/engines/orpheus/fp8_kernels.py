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

FP8_MAX = 448.0
BLOCK = 1024


@triton.jit
def _quant_rows_kernel(x_ptr, q_ptr, s_ptr, m, k, stride_x, stride_q, fp8_max,
                       BLOCK: tl.constexpr):
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
        tl.store(q_ptr + row * stride_q + k0 + offs, (x / scale).to(tl.float8e4nv),
                 mask=k0 + offs < k)
    tl.store(s_ptr + row, scale)


def quantize_rows(x: torch.Tensor, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x [m, k] (any float dtype, unit stride in k) -> (e4m3 [rows, k], fp32 scales [rows, 1]),
    rows >= m; the rows past m are zeros."""
    if x.stride(1) != 1:
        x = x.contiguous()
    m, k = x.shape
    q = torch.empty((rows, k), dtype=torch.float8_e4m3fn, device=x.device)
    s = torch.empty((rows, 1), dtype=torch.float32, device=x.device)
    _quant_rows_kernel[(rows,)](x, q, s, m, k, x.stride(0), q.stride(0), FP8_MAX, BLOCK=BLOCK,
                                num_warps=4)
    return q, s
