"""An experiment on the decode-attention kernel over an fp8 cache (attention.py), which reads
2.2-2.6 TB/s at 128 rows against 3.5-4.0 for the same kernel over bf16 (session 5's sweep; session 9's
profile: 1.17 of a 3.58 ms step). Hypothesis: the cost is in feeding converted fp8 tiles to the
tensor cores (the P.V product needs V transposed, which the hardware's transposing load does only
for 16-bit elements), not in the reads. With 3 query heads per KV head the dots are tiny, so this
variant does them on the CUDA cores in fp32 (q padded to 4 rows, not 16), or only P.V there
(``QK_DOT``: q.k on the tensor cores, which needs no transpose).

    python3 -m ops.orpheus_bench.attention_variants      # on the GPU

Prints, per case (cache dtype, rows, positions a row), each variant's error against the engine's
kernel and its time per call inside a CUDA graph (as sweep_attention.py), best first. Not used by
the engine.
"""

from __future__ import annotations

import itertools
import sys

import torch

from ops.orpheus_bench.check_fused import HEAD_DIM
from ops.orpheus_bench.sweep_attention import graph_us, random_case
from pipeline.engines.orpheus import attention

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None

CASES = (("fp8", 16, 300), ("fp8", 128, 400), ("fp8", 128, 1000), ("fp8", 384, 1000),
         ("bf16", 128, 400))


if triton is not None:
    @triton.jit
    def _fma_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lens_ptr, sq_b, sq_h, sk_b, sk_h, sk_t,
                    so_b, so_h, scale, G: tl.constexpr, GP: tl.constexpr, D: tl.constexpr,
                    BLOCK: tl.constexpr, QK_DOT: tl.constexpr):
        b = tl.program_id(0)
        h = tl.program_id(1)
        n = tl.load(lens_ptr + b)
        g = tl.arange(0, GP)
        d = tl.arange(0, D)
        q = tl.load(q_ptr + b * sq_b + h * sq_h + g[:, None] * D + d[None, :],
                    mask=g[:, None] < G, other=0.0)                       # [GP, D]
        if QK_DOT:
            q = tl.clamp(q.to(tl.float32), -65504.0, 65504.0).to(tl.float16)
        else:
            q = q.to(tl.float32)
        m = tl.full([GP], float("-inf"), tl.float32)
        l_sum = tl.zeros([GP], tl.float32)
        acc = tl.zeros([GP, D], tl.float32)
        base = b * sk_b + h * sk_h
        for start in range(0, n, BLOCK):
            t = start + tl.arange(0, BLOCK)
            live = t < n
            offs = base + t[:, None] * sk_t + d[None, :]
            if QK_DOT:
                k = tl.load(k_ptr + offs, mask=live[:, None], other=0.0).to(tl.float16)
                s = tl.dot(q, tl.trans(k)) * scale                          # [GP, BLOCK]
            else:
                k = tl.load(k_ptr + offs, mask=live[:, None], other=0.0).to(tl.float32)
                s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale   # [GP, BLOCK]
            s = tl.where(live[None, :], s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.exp2(s - m_new[:, None])
            alpha = tl.exp2(m - m_new)
            v = tl.load(v_ptr + offs, mask=live[:, None], other=0.0).to(tl.float32)
            l_sum = l_sum * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
            m = m_new
        out = acc / l_sum[:, None]
        tl.store(o_ptr + b * so_b + h * so_h + g[:, None] * D + d[None, :],
                 out.to(o_ptr.dtype.element_ty), mask=g[:, None] < G)


def fma_attention(q, k_cache, v_cache, lens, scale: float, block: int, warps: int, stages: int,
                  qk_dot: bool):
    b, hkv, g, d = q.shape
    out = torch.empty_like(q)
    gp = 16 if qk_dot else max(2, triton.next_power_of_2(g))
    _fma_kernel[(b, hkv)](
        q, k_cache, v_cache, out, lens, q.stride(0), q.stride(1), k_cache.stride(0),
        k_cache.stride(1), k_cache.stride(2), out.stride(0), out.stride(1),
        scale * attention.LOG2E, G=g, GP=gp, D=d, BLOCK=block, QK_DOT=qk_dot,
        num_warps=warps, num_stages=stages)
    return out


def main() -> int:
    if not torch.cuda.is_available() or triton is None:
        print("needs CUDA and Triton")
        return 2
    print("device:", torch.cuda.get_device_name(), flush=True)
    scale = HEAD_DIM ** -0.5
    variants = [(blk, w, st, qk) for qk in (False, True) for blk, w, st in
                itertools.product((16, 32, 64), (4, 8), (2, 3))]
    for name, b, length in CASES:
        torch.manual_seed(0)
        q, caches, lens, read = random_case(name, b, length)
        ref = attention.decode_attention(q, *caches[0], lens, scale).float()
        times = {"engine": graph_us(lambda i: attention.decode_attention(q, *caches[i], lens,
                                                                        scale))}
        errors = {"engine": 0.0}
        for var in variants:
            try:
                got = fma_attention(q, *caches[0], lens, scale, *var).float()
                errors[var] = ((got - ref).norm() / ref.norm()).item()
                times[var] = graph_us(lambda i: fma_attention(q, *caches[i], lens, scale, *var))
            except Exception as e:  # noqa: BLE001 - a variant that does not compile is skipped
                print(f"  {name} {var}: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
        best = sorted(times, key=times.get)[:5]
        print(f"{name} B={b} L={length}: engine {times['engine']:.1f} us "
              f"({read / times['engine'] / 1e3:.0f} GB/s); best: " + ", ".join(
                  f"{v} {times[v]:.1f} us ({read / times[v] / 1e3:.0f} GB/s, rel err "
                  f"{errors[v]:.1e})" for v in best), flush=True)
        del caches
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
