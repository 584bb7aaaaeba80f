"""The decode step's elementwise work as few kernels: norm with the residual add, RoPE with the
KV-cache write, and silu(gate) * up.

Each op has a plain-torch reference (the CPU, CI, and any machine without Triton run it) and a
Triton kernel used on CUDA. The references compute what transformers' Llama computes, op for op, so
on the CPU the decoder's logits are the checkpoint's own; the kernels compute in fp32 and round to
the model dtype where the references round (each product, each sum), so they agree with the
references to a rounding difference of the fp32 reductions. ``ops_for(device)`` picks the set.

- ``add_rms_norm(x, delta, w, eps)``: ``x = x + delta`` (skipped when ``delta`` is None), then
  LlamaRMSNorm: ``w * (x_fp32 * rsqrt(mean(x_fp32^2) + eps)).to(x.dtype)``; returns ``(x, h)``.
- ``rope_store(q, k, v, cos, sin, wpos, k_cache, v_cache, k_scale=1.0, v_scale=1.0, rows=None)``:
  token ``i`` (of B) rotates its q and k (rotate_half, cos/sin row ``wpos[i]`` of the tables),
  writes rotated k and v at ``[rows[i], :, wpos[i]]`` of the layer's caches (cache row ``i``
  where ``rows`` is None: the decode step's one token per row; a prefill passes each token's
  row), and returns rotated q. An fp8 cache (kv_cache.KVCache) gets ``to_cache(x, scale)`` of each:
  the scales apply to fp8 caches only.
- ``silu_mul(gate_up)``: ``silu(gate) * up`` from the fused gate/up projection ``[.., 2F]``.
"""

from __future__ import annotations


from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F

from pipeline.engines.orpheus.kernels import FP8_MAX

try:
    import triton
    import triton.language as tl
except ImportError:  # the CPU install has no Triton: the references run
    triton = None


def available(device) -> bool:
    return triton is not None and str(device).startswith("cuda")


# References -------------------------------------------------------------------------------------


def add_rms_norm_ref(x, delta, w, eps: float):
    if delta is not None:
        x = x + delta
    xf = x.float()
    h = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return x, w * h.to(x.dtype)


def rotate(x, cos, sin):
    """Rotary embedding as transformers applies it (rotate_half); cos/sin broadcast to x."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


FP8 = torch.float8_e4m3fn


def to_cache(x, scale: float):
    """``x`` as an fp8 cache stores it: divided by the cache's scale in fp32, saturated to the
    largest finite e4m3 (a plain cast may make NaN past it), rounded to nearest even e4m3."""
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def store_fp8(cache, index, x, scale: float) -> None:
    """``cache[index] = to_cache(x, scale)`` with advanced indexing, through uint8 views: torch has
    lacked fp8 index kernels on CUDA (pytorch#133605) and a byte is a byte."""
    cache.view(torch.uint8)[index] = to_cache(x, scale).view(torch.uint8)


def gather_fp8(cache, index, dtype):
    """``cache[index]`` of an fp8 cache (advanced indexing, through a uint8 view as ``store_fp8``)
    converted to ``dtype``; the scale is not applied (callers fold it into the attention)."""
    return cache.view(torch.uint8)[index].view(FP8).to(dtype)


def rope_store_ref(q, k, v, cos, sin, wpos, k_cache, v_cache, k_scale: float = 1.0, v_scale: float = 1.0, rows=None):
    """q [B, Hq, D], k and v [B, Hkv, D], cos/sin tables [T+1, D], wpos [B], caches
    [R, Hkv, T+1, D], rows [B] or None (0 .. B-1) -> rotated q [B, Hq, D]."""
    c, s = cos[wpos].unsqueeze(1), sin[wpos].unsqueeze(1)  # [B, 1, D]
    if rows is None:
        rows = torch.arange(q.shape[0], device=q.device)
    if k_cache.dtype == FP8:
        at = (rows, slice(None), wpos)
        store_fp8(k_cache, at, rotate(k, c, s), k_scale)
        store_fp8(v_cache, at, v, v_scale)
    else:
        k_cache[rows, :, wpos] = rotate(k, c, s)
        v_cache[rows, :, wpos] = v
    return rotate(q, c, s)


def silu_mul_ref(gate_up):
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


# Triton -----------------------------------------------------------------------------------------

if triton is not None:

    @triton.jit
    def _add_rms_norm_kernel(
        x_ptr,
        d_ptr,
        xo_ptr,
        h_ptr,
        w_ptr,
        sx,
        sd,
        sxo,
        sh,
        eps,
        N: tl.constexpr,
        BLOCK: tl.constexpr,
        HAS_DELTA: tl.constexpr,
    ):
        r = tl.program_id(0).to(tl.int64)  # offsets past 2^31 at large batches
        c = tl.arange(0, BLOCK)
        live = c < N
        x = tl.load(x_ptr + r * sx + c, mask=live, other=0.0)
        if HAS_DELTA:
            d = tl.load(d_ptr + r * sd + c, mask=live, other=0.0)
            x = (x.to(tl.float32) + d.to(tl.float32)).to(x_ptr.dtype.element_ty)
            tl.store(xo_ptr + r * sxo + c, x, mask=live)
        xf = x.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(xf * xf, axis=0) / N + eps)
        n = (xf * rstd).to(x_ptr.dtype.element_ty)
        w = tl.load(w_ptr + c, mask=live, other=0.0)
        h = w.to(tl.float32) * n.to(tl.float32)
        tl.store(h_ptr + r * sh + c, h.to(h_ptr.dtype.element_ty), mask=live)

    @triton.jit
    def _rot_half(x1, x2, c1, c2, s1, s2, ty: tl.constexpr):
        # x*cos + rotate_half(x)*sin, each product and the sum rounded to the model dtype (torch's)
        o1 = (x1 * c1).to(ty).to(tl.float32) - (x2 * s1).to(ty).to(tl.float32)
        o2 = (x2 * c2).to(ty).to(tl.float32) + (x1 * s2).to(ty).to(tl.float32)
        return o1.to(ty), o2.to(ty)

    _FP8_MAX = tl.constexpr(FP8_MAX)

    @triton.jit
    def _to_cache(x, scale, FP8_CACHE: tl.constexpr, ty: tl.constexpr):
        # to_cache for an fp8 cache (x / scale in fp32, saturated, then RTNE to e4m3); else a cast,
        # a no-op where the cache has x's dtype
        if FP8_CACHE:
            x = tl.minimum(tl.maximum(x.to(tl.float32) / scale, -_FP8_MAX), _FP8_MAX)
        return x.to(ty)

    @triton.jit
    def _rope_store_kernel(
        q_ptr,
        k_ptr,
        v_ptr,
        qo_ptr,
        cos_ptr,
        sin_ptr,
        wpos_ptr,
        rows_ptr,
        kc_ptr,
        vc_ptr,
        sq_b,
        sk_b,
        sv_b,
        sqo_b,
        sc_t,
        skc_r,
        skc_h,
        skc_t,
        k_scale,
        v_scale,
        HQ: tl.constexpr,
        D: tl.constexpr,
        HALF: tl.constexpr,
        FP8_CACHE: tl.constexpr,
        ROWS: tl.constexpr,
    ):
        b = tl.program_id(0).to(tl.int64)
        h = tl.program_id(1)  # 0..HQ-1: a query head; then the KV heads
        ty = qo_ptr.dtype.element_ty
        i = tl.arange(0, HALF)
        p = tl.load(wpos_ptr + b)
        c1 = tl.load(cos_ptr + p * sc_t + i).to(tl.float32)
        c2 = tl.load(cos_ptr + p * sc_t + HALF + i).to(tl.float32)
        s1 = tl.load(sin_ptr + p * sc_t + i).to(tl.float32)
        s2 = tl.load(sin_ptr + p * sc_t + HALF + i).to(tl.float32)
        if h < HQ:
            src = q_ptr + b * sq_b + h * D
            x1, x2 = tl.load(src + i).to(tl.float32), tl.load(src + HALF + i).to(tl.float32)
            o1, o2 = _rot_half(x1, x2, c1, c2, s1, s2, ty)
            dst = qo_ptr + b * sqo_b + h * D
            tl.store(dst + i, o1)
            tl.store(dst + HALF + i, o2)
        else:
            j = h - HQ
            src = k_ptr + b * sk_b + j * D
            x1, x2 = tl.load(src + i).to(tl.float32), tl.load(src + HALF + i).to(tl.float32)
            o1, o2 = _rot_half(x1, x2, c1, c2, s1, s2, ty)
            row = b
            if ROWS:
                row = tl.load(rows_ptr + b).to(tl.int64)
            at = row * skc_r + j * skc_h + p * skc_t
            cty = kc_ptr.dtype.element_ty
            tl.store(kc_ptr + at + i, _to_cache(o1, k_scale, FP8_CACHE, cty))
            tl.store(kc_ptr + at + HALF + i, _to_cache(o2, k_scale, FP8_CACHE, cty))
            e = tl.arange(0, D)
            v = tl.load(v_ptr + b * sv_b + j * D + e)
            tl.store(vc_ptr + at + e, _to_cache(v, v_scale, FP8_CACHE, cty))

    @triton.jit
    def _silu_mul_kernel(gu_ptr, o_ptr, s_in, s_out, FF: tl.constexpr, BLOCK: tl.constexpr):
        r = tl.program_id(0).to(tl.int64)
        c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        live = c < FF
        ty = o_ptr.dtype.element_ty
        g = tl.load(gu_ptr + r * s_in + c, mask=live, other=0.0).to(tl.float32)
        u = tl.load(gu_ptr + r * s_in + FF + c, mask=live, other=0.0).to(tl.float32)
        act = (g / (1.0 + tl.exp(-g))).to(ty)
        tl.store(o_ptr + r * s_out + c, (act.to(tl.float32) * u).to(ty), mask=live)


def _rows(t, n: int):
    """``t`` as [M, n] rows with unit stride along n, without a copy where it can."""
    t = t.reshape(-1, n)
    return t if t.stride(-1) == 1 else t.contiguous()


def add_rms_norm_triton(x, delta, w, eps: float):
    n = x.shape[-1]
    if w.dtype != x.dtype or (delta is not None and delta.dtype != x.dtype):
        return add_rms_norm_ref(x, delta, w, eps)
    x2 = _rows(x, n)
    m = x2.shape[0]
    h = torch.empty((m, n), dtype=x.dtype, device=x.device)
    xo, d2 = (x2, x2) if delta is None else (torch.empty_like(h), _rows(delta, n))
    block = triton.next_power_of_2(n)
    _add_rms_norm_kernel[(m,)](
        x2,
        d2,
        xo,
        h,
        w,
        x2.stride(0),
        d2.stride(0),
        xo.stride(0),
        h.stride(0),
        eps,
        N=n,
        BLOCK=block,
        HAS_DELTA=delta is not None,
        num_warps=min(8, max(1, block // 512)),
    )
    shape = x.shape
    return (x if delta is None else xo.view(shape)), h.view(shape)


def rope_store_triton(q, k, v, cos, sin, wpos, k_cache, v_cache, k_scale: float = 1.0, v_scale: float = 1.0, rows=None):
    b, hq, d = q.shape
    hkv = k.shape[1]
    heads_packed = all(t.stride(-1) == 1 and t.stride(-2) == d for t in (q, k, v))
    same_layout = k_cache.stride() == v_cache.stride() and k_cache.stride(-1) == 1
    if d & (d - 1) or not heads_packed or not same_layout or cos.stride(-1) != 1:
        return rope_store_ref(q, k, v, cos, sin, wpos, k_cache, v_cache, k_scale, v_scale, rows)
    rows = None if rows is None else rows.contiguous()
    out = torch.empty((b, hq, d), dtype=q.dtype, device=q.device)
    _rope_store_kernel[(b, hq + hkv)](
        q,
        k,
        v,
        out,
        cos,
        sin,
        wpos,
        wpos if rows is None else rows,
        k_cache,
        v_cache,
        q.stride(0),
        k.stride(0),
        v.stride(0),
        out.stride(0),
        cos.stride(0),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        k_scale,
        v_scale,
        HQ=hq,
        D=d,
        HALF=d // 2,
        FP8_CACHE=k_cache.dtype == FP8,
        ROWS=rows is not None,
        num_warps=1,
    )
    return out


SILU_BLOCK = 1024


def silu_mul_triton(gate_up):
    f = gate_up.shape[-1] // 2
    gu = _rows(gate_up, 2 * f)
    m = gu.shape[0]
    out = torch.empty((m, f), dtype=gate_up.dtype, device=gate_up.device)
    _silu_mul_kernel[(m, triton.cdiv(f, SILU_BLOCK))](
        gu, out, gu.stride(0), out.stride(0), FF=f, BLOCK=SILU_BLOCK, num_warps=4
    )
    return out.view(*gate_up.shape[:-1], f)


class Ops(NamedTuple):
    add_rms_norm: Callable[..., tuple[torch.Tensor, torch.Tensor]]  # (x + delta, its norm)
    rope_store: Callable[..., torch.Tensor]
    silu_mul: Callable[..., torch.Tensor]


REFERENCE = Ops(add_rms_norm_ref, rope_store_ref, silu_mul_ref)
TRITON = None if triton is None else Ops(add_rms_norm_triton, rope_store_triton, silu_mul_triton)


def ops_for(device, kernels: bool = True) -> Ops:
    """Triton on CUDA where it is installed; ``kernels=False`` (``SYNTH_ORPHEUS_DISABLE=fused_ops``)
    the references, to rule the kernels out when something looks wrong on a new GPU or Triton."""
    if not kernels:
        return REFERENCE
    return TRITON if TRITON is not None and available(device) else REFERENCE
