"""``RowSampler``'s draw as one Triton kernel: a program per row.

In torch the per-row draw (model/sampling.py) is about 67 kernels: gathers, the penalty, the masks,
a segmented sort and a scan for top-p, and the counter hash of the Gumbel noise in int64 pieces.
In the decode graph they are a measurable part of every step, and the eager draw of a prompt's
first token (``ModelRunner._begin``) launches each of them from the host.
This kernel reads the row's candidates once and does the rest in registers.

Top-p without a sort: a candidate is kept when the probability of the candidates strictly more
likely than it is at most ``top_p``. That is the sort's rule (``cumsum - p <= top_p``) for
distinct probabilities. Kept candidates are those at or above a threshold, found by bisection on
the bits of the (non-negative) float32 probabilities, 32 masked sums. Among equal probabilities at
the threshold the sort keeps some in its order and this keeps all. Sums run in another order,
so probabilities differ in the last bits, which can move a candidate at the border: the draw may
differ from the torch one in such rare cases, never in its dependence on the job's seed and step
alone.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pipeline.engines.orpheus import rng

_MASK32 = tl.constexpr(rng.MASK32)
_MUL_A = tl.constexpr(rng._MUL_A)
_MUL_B = tl.constexpr(rng._MUL_B)
_GOLDEN = tl.constexpr(rng._GOLDEN)
_STEP = tl.constexpr(rng.STEP_MUL)
_FRAME = tl.constexpr(7)


@triton.jit
def _hash32(x):
    x = x ^ (x >> 16)
    x = (x * _MUL_A) & _MASK32
    x = x ^ (x >> 15)
    x = (x * _MUL_B) & _MASK32
    return x ^ (x >> 16)


@triton.jit
def _top_p(x, top_p):
    """``x`` with every score outside the nucleus of mass ``top_p`` set to -inf."""
    e = tl.exp(x - tl.max(x, axis=0))  # -inf -> 0
    p = e / tl.sum(e, axis=0)
    # the smallest v (as float32 bits) with mass(p > v) <= top_p; keep p >= v
    low = tl.zeros([], dtype=tl.int32)
    high = tl.zeros([], dtype=tl.int32) + 0x3F800000  # 1.0
    for _ in range(31):
        mid = low + (high - low) // 2
        v = mid.to(tl.float32, bitcast=True)
        above = tl.sum(tl.where(p > v, p, 0.0), axis=0)
        fits = above <= top_p
        high = tl.where(fits, mid, high)
        low = tl.where(fits, low, mid + 1)
    return tl.where(p >= high.to(tl.float32, bitcast=True), x, float("-inf"))


@triton.jit
def _sample_kernel(
    logits_ptr,
    seen_ptr,
    steps_ptr,
    keys_ptr,
    table_ptr,
    valid_ptr,
    out_ptr,
    s_logits,
    s_seen,
    penalty,
    temperature,
    top_p,
    eos,
    lo,
    C: tl.constexpr,
    BLOCK: tl.constexpr,
    GREEDY: tl.constexpr,
    PENALTY: tl.constexpr,
    TOP_P: tl.constexpr,
    NO_EOS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    step = tl.load(steps_ptr + row)
    key = tl.load(keys_ptr + row)
    i = tl.arange(0, BLOCK)
    live = i < C
    at = (step % _FRAME) * C + i
    cand = tl.load(table_ptr + at, mask=live, other=0)  # ids from ``lo``
    keep = tl.load(valid_ptr + at, mask=live, other=0) != 0
    x = tl.load(logits_ptr + row * s_logits + cand, mask=live, other=0.0)
    if PENALTY:
        seen = tl.load(seen_ptr + row * s_seen + cand, mask=live, other=0) != 0
        x = tl.where(seen, tl.where(x > 0, x / penalty, x * penalty), x)
    if NO_EOS:
        keep = keep & (cand != eos)
    x = tl.where(keep & live, x, float("-inf"))
    if GREEDY:
        pick = tl.argmax(x, axis=0)
    else:
        x = x / temperature
        if TOP_P:
            x = _top_p(x, top_p)
        k = (key + step * _STEP) & _MASK32
        h = _hash32(k & _MASK32)
        u = _hash32((h + (cand + lo) * _GOLDEN) & _MASK32)
        uni = ((u >> 9).to(tl.float32) + 0.5) * (1.0 / 8388608.0)
        pick = tl.argmax(x - tl.log(-tl.log(uni)), axis=0)
    token = tl.sum(tl.where(i == pick, cand, 0), axis=0)
    tl.store(out_ptr + row, token + lo)


def fused_draw(params, table, valid, lo: int, eos: int, logits, seen, steps, keys) -> torch.Tensor:
    """``RowSampler.__call__``'s tokens [B] (see there) from one kernel; no top-k. ``params``: the
    ``SamplingParams`` (model/sampling.py, which imports this module)."""
    if params.top_k > 0:
        raise ValueError("the fused draw has no top-k")
    b, c = logits.shape[0], table.shape[1]
    out = torch.empty(b, dtype=torch.int64, device=logits.device)
    block = triton.next_power_of_2(c)
    _sample_kernel[(b,)](
        logits,
        seen,
        steps,
        keys,
        table,
        valid,
        out,
        logits.stride(0),
        seen.stride(0),
        params.repetition_penalty,
        max(params.temperature, 1e-6),
        params.top_p,
        eos,
        lo,
        C=c,
        BLOCK=block,
        GREEDY=params.greedy,
        PENALTY=params.repetition_penalty != 1.0,
        TOP_P=params.top_p < 1.0,
        NO_EOS=params.ignore_eos,
        num_warps=16 if block >= 8192 else 4,
    )
    return out
