"""Attention over the static KV cache as Triton kernels: a decode step's one token a row, and a
prefill's prompt chunks (``prefill_attention``, below).

The static cache gives every row ``context`` positions; an attention call over ``[0, L)`` for the
whole batch reads L positions of every row, while most rows hold far fewer. ``decode_attention``
takes each row's length from a device tensor, so inside one captured graph every row reads only
what it has: one program per (row, KV head), its query heads stacked as the rows of one tile, an
online softmax over blocks of keys (flash-decoding without the split). It runs at every batch on
CUDA: timed in the decode graph it beat SDPA's flash kernel, with the mask and fills SDPA needs,
even at the smallest batches and shortest rows, where reading only each row's own context matters
least (docs/performance.md). Without Triton (the CPU) the decoder runs SDPA.

An fp8 cache (kv_cache.KVCache) is read as it is, half the bytes of bf16: each block of keys and
values is converted after the load, to fp16 (the query too, and the dots run in fp16: faster
than converting to bf16, and the rounding is finer), the key scale is folded into the
softmax scale by the caller and the value scale multiplies the output here (compiled in only when
it is not 1). A cache in the query's dtype is read with no conversion.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # the CPU install has no Triton: the SDPA path is used
    triton = None


def available(device) -> bool:
    return triton is not None and str(device).startswith("cuda")


if triton is not None:

    @triton.jit
    def _attend(
        q,
        k_row,
        v_row,
        d,
        end,
        qpos,
        sk_t,
        scale,
        v_scale,
        ROWS: tl.constexpr,
        D: tl.constexpr,
        BLOCK: tl.constexpr,
        CAUSAL: tl.constexpr,
        V_SCALED: tl.constexpr,
    ):
        """softmax(q K^T) V of the query rows ``q`` [ROWS, D] over keys [0, end) of one cache row
        (keys from ``k_row``, values from ``v_row``, ``sk_t`` apart), online and in base 2
        (``scale`` includes log2 e); ``CAUSAL``: query row i sees keys up to ``qpos[i]``.
        Returns [ROWS, D] in float32, times ``v_scale`` where ``V_SCALED``."""
        m = tl.full([ROWS], float("-inf"), tl.float32)
        l_sum = tl.zeros([ROWS], tl.float32)
        acc = tl.zeros([ROWS, D], tl.float32)
        for start in range(0, end, BLOCK):
            t = start + tl.arange(0, BLOCK)
            live = t < end
            offs = t[:, None] * sk_t + d[None, :]
            k = tl.load(k_row + offs, mask=live[:, None], other=0.0).to(q.dtype)  # [BLOCK, D]
            s = tl.dot(q, tl.trans(k)) * scale  # [ROWS, BLOCK]
            seen = live[None, :]
            if CAUSAL:
                seen = seen & (t[None, :] <= qpos[:, None])
            s = tl.where(seen, s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.exp2(s - m_new[:, None])
            alpha = tl.exp2(m - m_new)
            v = tl.load(v_row + offs, mask=live[:, None], other=0.0).to(q.dtype)
            l_sum = l_sum * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
        out = acc / l_sum[:, None]
        if V_SCALED:
            out = out * v_scale
        return out

    @triton.jit
    def _decode_kernel(
        q_ptr,
        k_ptr,
        v_ptr,
        o_ptr,
        lens_ptr,
        sq_b,
        sq_h,
        sk_b,
        sk_h,
        sk_t,
        so_b,
        so_h,
        scale,
        v_scale,
        G: tl.constexpr,
        GP: tl.constexpr,
        D: tl.constexpr,
        BLOCK: tl.constexpr,
        V_SCALED: tl.constexpr,
        F16: tl.constexpr,
    ):
        """Program (row b, KV head h): softmax in base 2 (``scale`` includes log2 e)."""
        b = tl.program_id(0)
        h = tl.program_id(1)
        n = tl.load(lens_ptr + b)
        g = tl.arange(0, GP)
        d = tl.arange(0, D)
        q = tl.load(
            q_ptr + b * sq_b + h * sq_h + g[:, None] * D + d[None, :], mask=g[:, None] < G, other=0.0
        )  # [GP, D]
        if F16:  # fp16 dots: an e4m3 pair converts to fp16 in one instruction, to bf16 in several
            q = tl.clamp(q.to(tl.float32), -65504.0, 65504.0).to(tl.float16)
        # the row's start in 64 bits (a layer's cache passes 2^31 entries at 512 rows of 4,096),
        # folded into the pointers once, so the loop's offsets stay 32-bit
        base = b.to(tl.int64) * sk_b + h * sk_h
        k_row, v_row = k_ptr + base, v_ptr + base
        out = _attend(q, k_row, v_row, d, n, n, sk_t, scale, v_scale, GP, D, BLOCK, False, V_SCALED)
        tl.store(
            o_ptr + b * so_b + h * so_h + g[:, None] * D + d[None, :],
            out.to(o_ptr.dtype.element_ty),
            mask=g[:, None] < G,
        )


# Launch settings per cache item size and batch size: (keys per block, warps, pipeline stages, fp16
# dots over an fp8 cache), the fastest of a sweep timed in CUDA graphs; the first entry whose
# batch bound is not below the batch applies. Over bf16 the kernel reads near the memory's peak
# bandwidth from moderate batches up, so flash-decoding's split over the keys, which adds a
# reduction, was slower in every case swept. Over fp8 the kernel is bound by its instructions
# (the conversions) at low occupancy, not by the reads: with 4 warps the register count limits
# the blocks an SM holds, so 2 warps (and fp16 dots) run faster from 64 rows up; 17-63 rows were
# not swept, and take the 2-warp setting too.
LAUNCH = {
    2: ((16, (128, 4, 3, False)), (64, (64, 4, 2, False)), (128, (64, 4, 3, False)), (1 << 30, (128, 4, 2, False))),
    1: ((16, (128, 8, 3, True)), (1 << 30, (64, 2, 3, True))),
}
LOG2E = 1.4426950408889634


def launch_for(item_size: int, batch: int) -> tuple[int, int, int, bool]:
    for bound, launch in LAUNCH.get(item_size, LAUNCH[2]):
        if batch <= bound:
            return launch
    raise AssertionError("the last bound covers every batch")


def decode_attention(
    q,
    k_cache,
    v_cache,
    lens,
    scale: float,
    v_scale: float = 1.0,
    launch: tuple[int, int, int, bool] | None = None,
    out=None,
):
    """q [B, Hkv, G, D] (contiguous), caches [R, Hkv, T, D] (rows 0..B-1 used; the query's dtype
    or fp8), lens [B] int (positions 0..lens-1 are attended) -> [B, Hkv, G, D]. ``scale``: the
    softmax scale times an fp8 cache's key scale; ``v_scale``: its value scale. ``launch``:
    (block, warps, stages, fp16 dots), by default ``launch_for`` the cache's item size and B.
    ``out``: where to write (q's shape and strides); by default a new tensor."""
    b, hkv, g, d = q.shape
    out = torch.empty_like(q) if out is None else out
    block, warps, stages, f16 = launch or launch_for(k_cache.element_size(), b)
    _decode_kernel[(b, hkv)](
        q,
        k_cache,
        v_cache,
        out,
        lens,
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        out.stride(0),
        out.stride(1),
        scale * LOG2E,
        v_scale,
        G=g,
        GP=max(16, triton.next_power_of_2(g)),
        D=d,
        BLOCK=block,
        V_SCALED=v_scale != 1.0,
        F16=f16 and k_cache.element_size() == 1,
        num_warps=warps,
        num_stages=stages,
    )
    return out


# Prefill attention ------------------------------------------------------------------------------
#
# A prompt chunk's causal attention, read straight from the cache (its own keys and values are
# written there first, by fused.rope_store with each token's row), for every chunk of a prefill in
# one launch. It replaces, per layer, the torch path's rotations, indexed cache writes and reads,
# the conversion of an fp8 cache, K and V repeated to the query heads and SDPA over a mask: two
# dozen small kernels, which in a 128-token prefill cost more than its GEMMs.
#
# Program (chunk n, block of tokens, KV head h): the tile's rows are its tokens' query heads of h,
# token-major (row r: token r // G, head h * G + r % G), so the G heads share every key read.
# Keys [0, start + tokens so far) of the chunk's cache row, each row masked to its own position.
PREFILL_ROWS = 64  # query rows a program (tokens x G, padded to a power of 2)
PREFILL_BLOCK = 64  # keys a block


if triton is not None:
    # Not specialized on the values of S and of the per-chunk tensors' strides and addresses: they
    # vary with each eager prefill's shape, and a new specialization is a JIT compile, up to
    # seconds, on the loop thread while streams wait.
    @triton.jit(do_not_specialize=["rows_ptr", "start_ptr", "lens_ptr", "s_rows", "s_start", "s_lens", "S"])
    def _prefill_kernel(
        q_ptr,
        k_ptr,
        v_ptr,
        o_ptr,
        rows_ptr,
        start_ptr,
        lens_ptr,
        s_rows,
        s_start,
        s_lens,
        S,
        sq_t,
        sk_r,
        sk_h,
        sk_t,
        so_t,
        scale,
        v_scale,
        G: tl.constexpr,
        TPB: tl.constexpr,
        RT: tl.constexpr,
        D: tl.constexpr,
        BLOCK: tl.constexpr,
        V_SCALED: tl.constexpr,
        F16: tl.constexpr,
    ):
        """Softmax in base 2 (``scale`` includes log2 e), as _decode_kernel."""
        n = tl.program_id(0)
        mb = tl.program_id(1)
        h = tl.program_id(2)
        row = tl.load(rows_ptr + n * s_rows).to(tl.int64)
        first = tl.load(start_ptr + n * s_start)
        length = tl.load(lens_ptr + n * s_lens)
        r = tl.arange(0, RT)
        tok = mb * TPB + r // G  # token in the chunk
        head = h * G + r % G
        live_q = (r < TPB * G) & (tok < S)
        qpos = first + tok
        d = tl.arange(0, D)
        at = (n * S + tok).to(tl.int64)[:, None] * sq_t + head[:, None] * D + d[None, :]
        q = tl.load(q_ptr + at, mask=live_q[:, None], other=0.0)  # [RT, D]
        if F16:
            q = tl.clamp(q.to(tl.float32), -65504.0, 65504.0).to(tl.float16)
        # keys up to this block's last valid token (padding tokens attend to those too: their
        # outputs are never read), and at least key 0, which keeps every row's softmax finite
        # (a graph's padding chunk has length 0)
        end = tl.maximum(first + tl.minimum(length, (mb + 1) * TPB), 1)
        base = row * sk_r + h * sk_h  # 64-bit, as the decode's
        k_row, v_row = k_ptr + base, v_ptr + base
        out = _attend(q, k_row, v_row, d, end, qpos, sk_t, scale, v_scale, RT, D, BLOCK, True, V_SCALED)
        o_at = (n * S + tok).to(tl.int64)[:, None] * so_t + head[:, None] * D + d[None, :]
        tl.store(o_ptr + o_at, out.to(o_ptr.dtype.element_ty), mask=live_q[:, None])


def prefill_attention(q, k_cache, v_cache, rows, start, lens, scale: float, v_scale: float = 1.0, out=None):
    """Causal attention of prompt chunks over the cache: q [N * S, Hq, D] (chunk n's token i at
    row n * S + i, rotated, unit stride along D, heads packed), caches [R, Hkv, T, D] (the
    query's dtype or fp8) already holding each chunk's keys and values at positions
    [start, start + lens) of cache row ``rows[n]``; rows, start, lens [N] int (any stride: the
    graphs pass columns of one packed input). Token i of chunk
    n attends to positions [0, start[n] + i]; tokens past lens[n] (padding) give unused rows.
    ``scale``: the softmax scale times an fp8 cache's key scale; ``v_scale``: its value scale.
    Returns ``out`` (or a new tensor) [N * S, Hq, D]."""
    t, hq, d = q.shape
    n = rows.shape[0]
    s = t // n
    hkv = k_cache.shape[1]
    g = hq // hkv
    assert q.stride(-1) == 1 and q.stride(-2) == d and s * n == t and g <= PREFILL_ROWS
    assert d & (d - 1) == 0 and k_cache.stride() == v_cache.stride() and k_cache.stride(-1) == 1
    out = torch.empty_like(q) if out is None else out
    assert out.shape == q.shape and out.stride()[1:] == (d, 1)
    tpb = PREFILL_ROWS // g
    _prefill_kernel[(n, triton.cdiv(s, tpb), hkv)](
        q,
        k_cache,
        v_cache,
        out,
        rows,
        start,
        lens,
        rows.stride(0),
        start.stride(0),
        lens.stride(0),
        s,
        q.stride(0),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        out.stride(0),
        scale * LOG2E,
        v_scale,
        G=g,
        TPB=tpb,
        RT=PREFILL_ROWS,
        D=d,
        BLOCK=PREFILL_BLOCK,
        V_SCALED=v_scale != 1.0,
        F16=k_cache.element_size() == 1,
        num_warps=4,
        num_stages=2,
    )
    return out
