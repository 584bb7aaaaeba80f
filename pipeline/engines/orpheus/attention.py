"""Decode attention that reads each row's own context, not the batch's longest.

The static cache gives every row ``context`` positions; an attention call over ``[0, L)`` for the
whole batch reads L positions of every row, while most rows hold far fewer. This Triton kernel takes
each row's length from a device tensor, so inside one captured graph every row reads only what it
has: one program per (row, KV head), its query heads stacked as the rows of one tile, an online
softmax over blocks of keys (flash-decoding without the split). Used for large batches on CUDA,
where it is bandwidth-bound; small batches and the CPU use ``scaled_dot_product_attention`` with a
length bucket.

An fp8 cache (decoder.KVCache) is read as it is, half the bytes of bf16: each block of keys and
values is converted to the query's dtype after the load, the key scale is folded into the softmax
scale by the caller and the value scale multiplies the output here (compiled in only when it is
not 1). For a cache in the query's dtype the conversion is no operation: that kernel is the bf16
one as it was.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:        # the CPU install has no Triton: the SDPA path is used
    triton = None

MIN_BATCH = 32             # below this the grid is too small to fill the GPU


def available(device) -> bool:
    return triton is not None and str(device).startswith("cuda")


if triton is not None:
    @triton.jit
    def _partial(q_ptr, k_ptr, v_ptr, b, h, lo, hi, sq_b, sq_h, sk_b, sk_h, sk_t, scale,
                 G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr,
                 F16: tl.constexpr):
        """Attention of row b, KV head h over keys [lo, hi): the accumulator [GP, D], the running
        maximum and the sum of exponentials [GP], base 2 (``scale`` includes log2 e)."""
        g = tl.arange(0, GP)
        d = tl.arange(0, D)
        q = tl.load(q_ptr + b * sq_b + h * sq_h + g[:, None] * D + d[None, :],
                    mask=g[:, None] < G, other=0.0)                       # [GP, D]
        if F16:     # an fp8 cache: e4m3 -> fp16 is one instruction, -> bf16 is several
            q = tl.clamp(q.to(tl.float32), -65504.0, 65504.0).to(tl.float16)
        m = tl.full([GP], float("-inf"), tl.float32)
        l_sum = tl.zeros([GP], tl.float32)
        acc = tl.zeros([GP, D], tl.float32)
        base = b * sk_b + h * sk_h
        for start in range(lo, hi, BLOCK):
            t = start + tl.arange(0, BLOCK)
            live = t < hi
            offs = base + t[:, None] * sk_t + d[None, :]
            k = tl.load(k_ptr + offs, mask=live[:, None], other=0.0).to(q.dtype)   # [BLOCK, D]
            s = tl.dot(q, tl.trans(k)) * scale                              # [GP, BLOCK]
            s = tl.where(live[None, :], s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.exp2(s - m_new[:, None])
            alpha = tl.exp2(m - m_new)
            v = tl.load(v_ptr + offs, mask=live[:, None], other=0.0).to(q.dtype)
            l_sum = l_sum * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
        return acc, m, l_sum

    @triton.jit
    def _decode_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lens_ptr, sq_b, sq_h, sk_b, sk_h, sk_t,
                       so_b, so_h, scale, v_scale, G: tl.constexpr, GP: tl.constexpr,
                       D: tl.constexpr, BLOCK: tl.constexpr, V_SCALED: tl.constexpr,
                       F16: tl.constexpr):
        """One program per (row, KV head) over the whole row."""
        b = tl.program_id(0)
        h = tl.program_id(1)
        n = tl.load(lens_ptr + b)
        acc, m, l_sum = _partial(q_ptr, k_ptr, v_ptr, b, h, 0, n, sq_b, sq_h, sk_b, sk_h, sk_t,
                                 scale, G, GP, D, BLOCK, F16)
        out = acc / l_sum[:, None]
        if V_SCALED:
            out = out * v_scale
        g = tl.arange(0, GP)
        d = tl.arange(0, D)
        tl.store(o_ptr + b * so_b + h * so_h + g[:, None] * D + d[None, :],
                 out.to(o_ptr.dtype.element_ty), mask=g[:, None] < G)

    @triton.jit
    def _split_kernel(q_ptr, k_ptr, v_ptr, part_ptr, lse_ptr, lens_ptr, sq_b, sq_h, sk_b, sk_h,
                      sk_t, scale, H: tl.constexpr, S: tl.constexpr, G: tl.constexpr,
                      GP: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr, SPLIT: tl.constexpr,
                      F16: tl.constexpr):
        """Flash-decoding: program (row, KV head, split s) over keys [s * SPLIT, (s+1) * SPLIT) of
        the row; its normalised output [G, D] and log-sum-exp [G] go to part/lse [B, H, S, G(, D)].
        Splits past the row's length do nothing."""
        b = tl.program_id(0)
        h = tl.program_id(1)
        s = tl.program_id(2)
        n = tl.load(lens_ptr + b)
        lo = s * SPLIT
        acc, m, l_sum = _partial(q_ptr, k_ptr, v_ptr, b, h, lo, tl.minimum(lo + SPLIT, n), sq_b,
                                 sq_h, sk_b, sk_h, sk_t, scale, G, GP, D, BLOCK, F16)
        g = tl.arange(0, GP)
        d = tl.arange(0, D)
        keep = g < tl.where(lo < n, G, 0)        # [GP]: nothing past the row's length
        at = ((b * H + h) * S + s) * G + g                                   # [GP]
        tl.store(part_ptr + at[:, None] * D + d[None, :], acc / l_sum[:, None], mask=keep[:, None])
        tl.store(lse_ptr + at, m + tl.log2(l_sum), mask=keep)

    @triton.jit
    def _combine_kernel(part_ptr, lse_ptr, o_ptr, lens_ptr, so_b, so_h, v_scale, H: tl.constexpr,
                        S: tl.constexpr, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
                        SPLIT: tl.constexpr, V_SCALED: tl.constexpr):
        """The row's splits merged by their log-sum-exp weights: program (row, KV head)."""
        b = tl.program_id(0)
        h = tl.program_id(1)
        n = tl.load(lens_ptr + b)
        g = tl.arange(0, GP)
        d = tl.arange(0, D)
        m = tl.full([GP], float("-inf"), tl.float32)
        w = tl.zeros([GP], tl.float32)
        acc = tl.zeros([GP, D], tl.float32)
        for s in range(0, tl.cdiv(n, SPLIT)):
            at = ((b * H + h) * S + s) * G + g
            lse = tl.load(lse_ptr + at, mask=g < G, other=0.0)
            part = tl.load(part_ptr + at[:, None] * D + d[None, :], mask=g[:, None] < G, other=0.0)
            m_new = tl.maximum(m, lse)
            alpha = tl.exp2(m - m_new)
            beta = tl.exp2(lse - m_new)
            w = w * alpha + beta
            acc = acc * alpha[:, None] + part * beta[:, None]
            m = m_new
        out = acc / w[:, None]
        if V_SCALED:
            out = out * v_scale
        tl.store(o_ptr + b * so_b + h * so_h + g[:, None] * D + d[None, :],
                 out.to(o_ptr.dtype.element_ty), mask=g[:, None] < G)


# Launch settings per cache item size and batch size: (keys per block, warps, pipeline stages, keys
# per split or 0 for one program per row and KV head, fp16 dots over an fp8 cache), the fastest in
# ops/orpheus_bench/sweep_attention.py on an H200 (see there); the first entry whose batch bound
# is not below the batch applies.
LAUNCH = {
    2: ((128, (64, 4, 2, 0, False)), (1 << 30, (128, 4, 2, 0, False))),
    1: ((16, (128, 8, 2, 0, True)), (64, (128, 4, 3, 0, True)), (128, (64, 4, 3, 0, True)),
        (1 << 30, (128, 4, 3, 0, True))),
}
LOG2E = 1.4426950408889634


def launch_for(item_size: int, batch: int) -> tuple[int, int, int, int, bool]:
    for bound, launch in LAUNCH.get(item_size, LAUNCH[2]):
        if batch <= bound:
            return launch
    raise AssertionError("the last bound covers every batch")


def decode_attention(q, k_cache, v_cache, lens, scale: float, v_scale: float = 1.0,
                     launch: tuple[int, int, int, int, bool] | None = None):
    """q [B, Hkv, G, D] (contiguous), caches [R, Hkv, T, D] (rows 0..B-1 used; the query's dtype
    or fp8), lens [B] int (positions 0..lens-1 are attended) -> [B, Hkv, G, D]. ``scale``: the
    softmax scale times an fp8 cache's key scale; ``v_scale``: its value scale. ``launch``:
    (block, warps, stages, split, fp16), by default ``launch_for`` the cache's item size and B.

    With a split, each row's keys are cut into pieces of ``split`` positions, one program each,
    and a second kernel merges them (flash-decoding): more programs than rows x KV heads, which
    a batch of 128 rows does not fill the GPU's memory pipes with."""
    b, hkv, g, d = q.shape
    out = torch.empty_like(q)
    block, warps, stages, split, f16 = launch or launch_for(k_cache.element_size(), b)
    f16 = f16 and k_cache.element_size() == 1
    gp = max(16, triton.next_power_of_2(g))
    scale = scale * LOG2E
    if not split:
        _decode_kernel[(b, hkv)](
            q, k_cache, v_cache, out, lens, q.stride(0), q.stride(1), k_cache.stride(0),
            k_cache.stride(1), k_cache.stride(2), out.stride(0), out.stride(1), scale, v_scale,
            G=g, GP=gp, D=d, BLOCK=block, V_SCALED=v_scale != 1.0, F16=f16, num_warps=warps,
            num_stages=stages)
        return out
    s = triton.cdiv(k_cache.shape[2], split)
    part = torch.empty((b, hkv, s, g, d), dtype=torch.float32, device=q.device)
    lse = torch.empty((b, hkv, s, g), dtype=torch.float32, device=q.device)
    _split_kernel[(b, hkv, s)](
        q, k_cache, v_cache, part, lse, lens, q.stride(0), q.stride(1), k_cache.stride(0),
        k_cache.stride(1), k_cache.stride(2), scale, H=hkv, S=s, G=g, GP=gp, D=d, BLOCK=block,
        SPLIT=split, F16=f16, num_warps=warps, num_stages=stages)
    _combine_kernel[(b, hkv)](
        part, lse, out, lens, out.stride(0), out.stride(1), v_scale, H=hkv, S=s, G=g, GP=gp, D=d,
        SPLIT=split, V_SCALED=v_scale != 1.0, num_warps=4)
    return out
