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
    def _decode_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lens_ptr, sq_b, sq_h, sk_b, sk_h, sk_t,
                       so_b, so_h, scale, v_scale, G: tl.constexpr, GP: tl.constexpr,
                       D: tl.constexpr, BLOCK: tl.constexpr, V_SCALED: tl.constexpr):
        b = tl.program_id(0)
        h = tl.program_id(1)
        n = tl.load(lens_ptr + b)
        g = tl.arange(0, GP)
        d = tl.arange(0, D)
        q = tl.load(q_ptr + b * sq_b + h * sq_h + g[:, None] * D + d[None, :],
                    mask=g[:, None] < G, other=0.0)                       # [GP, D]
        m = tl.full([GP], float("-inf"), tl.float32)
        l_sum = tl.zeros([GP], tl.float32)
        acc = tl.zeros([GP, D], tl.float32)
        base = b * sk_b + h * sk_h
        for start in range(0, n, BLOCK):
            t = start + tl.arange(0, BLOCK)
            live = t < n
            offs = base + t[:, None] * sk_t + d[None, :]
            k = tl.load(k_ptr + offs, mask=live[:, None], other=0.0).to(q.dtype)   # [BLOCK, D]
            s = tl.dot(q, tl.trans(k)) * scale                              # [GP, BLOCK]
            s = tl.where(live[None, :], s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m - m_new)
            v = tl.load(v_ptr + offs, mask=live[:, None], other=0.0).to(q.dtype)
            l_sum = l_sum * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
        out = acc / l_sum[:, None]
        if V_SCALED:
            out = out * v_scale
        tl.store(o_ptr + b * so_b + h * so_h + g[:, None] * D + d[None, :],
                 out.to(o_ptr.dtype.element_ty), mask=g[:, None] < G)


# Launch settings per cache item size: (keys per block, warps, pipeline stages), the fastest summed
# over B=16..256 and rows of 300..1800 tokens in ops/orpheus_bench/sweep_attention.py on an H200:
# bf16 950 us against 994 for (64, 4, 2); fp8 853 us against 888 for (128, 4, 3). The fp8 kernel
# reads half the bytes but reaches about 2 TB/s where bf16 reaches 3.4-3.9: it is bound by the
# conversion and the dots, not the loads, so it is only about 10% faster.
LAUNCH = {2: (128, 4, 2), 1: (64, 4, 3)}


def decode_attention(q, k_cache, v_cache, lens, scale: float, v_scale: float = 1.0,
                     launch: tuple[int, int, int] | None = None):
    """q [B, Hkv, G, D] (contiguous), caches [R, Hkv, T, D] (rows 0..B-1 used; the query's dtype
    or fp8), lens [B] int (positions 0..lens-1 are attended) -> [B, Hkv, G, D]. ``scale``: the
    softmax scale times an fp8 cache's key scale; ``v_scale``: its value scale. ``launch``:
    (block, warps, stages), by default ``LAUNCH`` for the cache's item size."""
    b, hkv, g, d = q.shape
    out = torch.empty_like(q)
    block, warps, stages = launch or LAUNCH.get(k_cache.element_size(), LAUNCH[2])
    _decode_kernel[(b, hkv)](
        q, k_cache, v_cache, out, lens, q.stride(0), q.stride(1), k_cache.stride(0),
        k_cache.stride(1), k_cache.stride(2), out.stride(0), out.stride(1), scale, v_scale,
        G=g, GP=max(16, triton.next_power_of_2(g)), D=d, BLOCK=block, V_SCALED=v_scale != 1.0,
        num_warps=warps, num_stages=stages)
    return out
