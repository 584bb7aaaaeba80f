"""The decode-attention kernel over an fp8 cache (attention.py) against other formulations of it,
each timed in a CUDA graph of 8 calls over 4 caches (as ``sweep-attention`` times), with each one's
error against fp32 attention over the same (dequantized) cache:

- mode 0: the scores as K q^T (the keys as the dot's first operand, no transposed load), fp16 dots;
- mode 1: the query quantized to e4m3 (a scale per query head) for an fp8 q K^T, p V in fp16;
- mode 2: both dots in fp8 (p in e4m3 too), as fp8 attention kernels elsewhere run.

    python -m ops.bench.kernels attention-variants [--cases 256x400,512x800]

Each variant at a few launch settings (keys per block, warps, stages). Prints per case the engine
kernel's time and GB/s of K and V read, then each variant's, its speed against the engine's and its
error (max abs over the reference's largest, relative L2).
"""

from __future__ import annotations

import argparse
import itertools

import torch

from ops.bench.kernels.checking import HEAD_DIM
from ops.bench.kernels.sweep_attention import graph_us, random_case
from pipeline.engines.orpheus.kernels import attention

try:
    import triton
    import triton.language as tl
except ImportError:  # the CPU install has no Triton
    triton = None

CASES = "64x400,256x400,512x400,256x800,512x800,448x600"
LAUNCHES = ((64, 2, 3), (64, 4, 3), (128, 4, 2), (32, 2, 4), (64, 2, 4))
CHECKED_ROWS = 32  # rows compared with the fp32 reference (a loop in torch)

if triton is not None:

    @triton.jit
    def _var_kernel(
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
        G: tl.constexpr,
        GP: tl.constexpr,
        D: tl.constexpr,
        BLOCK: tl.constexpr,
        MODE: tl.constexpr,
    ):
        """Program (row b, KV head h), as attention._decode_kernel; MODE as the module says."""
        b = tl.program_id(0)
        h = tl.program_id(1)
        n = tl.load(lens_ptr + b)
        g = tl.arange(0, GP)
        d = tl.arange(0, D)
        base = b.to(tl.int64) * sk_b + h * sk_h
        k_row, v_row = k_ptr + base, v_ptr + base
        acc = tl.zeros([GP, D], tl.float32)
        if MODE == 0:
            qT = tl.load(q_ptr + b * sq_b + h * sq_h + g[None, :] * D + d[:, None], mask=g[None, :] < G, other=0.0)
            qT = tl.clamp(qT.to(tl.float32), -65504.0, 65504.0).to(tl.float16)  # [D, GP]
            m = tl.full([GP], float("-inf"), tl.float32)
            l_sum = tl.zeros([GP], tl.float32)
            for start in range(0, n, BLOCK):
                t = start + tl.arange(0, BLOCK)
                live = t < n
                offs = t[:, None] * sk_t + d[None, :]
                k = tl.load(k_row + offs, mask=live[:, None], other=0.0).to(tl.float16)
                sT = tl.dot(k, qT) * scale  # [BLOCK, GP]
                sT = tl.where(live[:, None], sT, float("-inf"))
                m_new = tl.maximum(m, tl.max(sT, 0))
                pT = tl.exp2(sT - m_new[None, :])
                alpha = tl.exp2(m - m_new)
                v = tl.load(v_row + offs, mask=live[:, None], other=0.0).to(tl.float16)
                l_sum = l_sum * alpha + tl.sum(pT, 0)
                acc = acc * alpha[:, None] + tl.dot(tl.trans(pT.to(tl.float16)), v)
                m = m_new
        else:
            q = tl.load(q_ptr + b * sq_b + h * sq_h + g[:, None] * D + d[None, :], mask=g[:, None] < G, other=0.0).to(
                tl.float32
            )
            qs = tl.maximum(tl.max(tl.abs(q), 1), 1e-20) / 448.0
            q8 = (q / qs[:, None]).to(tl.float8e4nv)
            sc = qs * scale
            m = tl.full([GP], float("-inf"), tl.float32)
            l_sum = tl.zeros([GP], tl.float32)
            for start in range(0, n, BLOCK):
                t = start + tl.arange(0, BLOCK)
                live = t < n
                offs = t[:, None] * sk_t + d[None, :]
                k = tl.load(k_row + offs, mask=live[:, None], other=0.0)
                s = tl.dot(q8, tl.trans(k)) * sc[:, None]
                s = tl.where(live[None, :], s, float("-inf"))
                m_new = tl.maximum(m, tl.max(s, 1))
                p = tl.exp2(s - m_new[:, None])
                alpha = tl.exp2(m - m_new)
                v = tl.load(v_row + offs, mask=live[:, None], other=0.0)
                l_sum = l_sum * alpha + tl.sum(p, 1)
                if MODE == 1:
                    acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v.to(tl.float16))
                else:
                    acc = acc * alpha[:, None] + tl.dot(p.to(tl.float8e4nv), v)
                m = m_new
        out = acc / l_sum[:, None]
        tl.store(
            o_ptr + b * so_b + h * so_h + g[:, None] * D + d[None, :],
            out.to(o_ptr.dtype.element_ty),
            mask=g[:, None] < G,
        )

    def variant(q, kc, vc, lens, scale, mode, block, warps, stages, out=None):
        b, hkv, g, d = q.shape
        out = torch.empty_like(q) if out is None else out
        _var_kernel[(b, hkv)](
            q,
            kc,
            vc,
            out,
            lens,
            q.stride(0),
            q.stride(1),
            kc.stride(0),
            kc.stride(1),
            kc.stride(2),
            out.stride(0),
            out.stride(1),
            scale * attention.LOG2E,
            G=g,
            GP=16,
            D=d,
            BLOCK=block,
            MODE=mode,
            num_warps=warps,
            num_stages=stages,
        )
        return out


def reference(q, kc, vc, lens, scale):
    """fp32 attention of q [B, Hkv, G, D] over the dequantized cache, row by row."""
    outs = []
    for i in range(q.shape[0]):
        n = int(lens[i])
        k, v = kc[i, :, :n].float(), vc[i, :, :n].float()  # [Hkv, n, D]
        s = torch.einsum("hgd,hnd->hgn", q[i].float(), k) * scale
        outs.append(torch.einsum("hgn,hnd->hgd", s.softmax(-1), v))
    return torch.stack(outs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=CASES, help="ROWSxPOSITIONS,...")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available() or not attention.available("cuda"):
        print("needs CUDA and Triton")
        return 2
    print("device:", torch.cuda.get_device_name(), flush=True)
    scale = HEAD_DIM**-0.5
    for case in args.cases.split(","):
        b, length = (int(x) for x in case.split("x"))
        q, caches, lens, read = random_case("fp8", b, length)
        ref = reference(q[:CHECKED_ROWS], *caches[0], lens[:CHECKED_ROWS], scale)

        def err(out):
            o = out[:CHECKED_ROWS].float()
            return (o - ref).abs().max().item() / ref.abs().max().item(), ((o - ref).norm() / ref.norm()).item()

        base_ms = graph_us(lambda i: attention.decode_attention(q, *caches[i], lens, scale)) / 1e3
        e = err(attention.decode_attention(q, *caches[0], lens, scale))
        print(
            f"B={b} L={length}: engine {base_ms * 1e3:.1f} us ({read / base_ms / 1e6:.0f} GB/s) "
            f"err max {e[0]:.2e} rel {e[1]:.2e}",
            flush=True,
        )
        for mode, launch in itertools.product((0, 1, 2), LAUNCHES):
            try:
                ms = graph_us(lambda i: variant(q, *caches[i], lens, scale, mode, *launch)) / 1e3
                e = err(variant(q, *caches[0], lens, scale, mode, *launch))
            except Exception as ex:  # noqa: BLE001 - a setting that does not compile is reported
                print(f"   mode {mode} {launch}: {type(ex).__name__}: {str(ex)[:200]}", flush=True)
                continue
            print(
                f"   mode {mode} {launch}: {ms * 1e3:.1f} us ({read / ms / 1e6:.0f} GB/s) x{base_ms / ms:.2f} "
                f"err max {e[0]:.2e} rel {e[1]:.2e}",
                flush=True,
            )
        caches = None  # frees the device copies before the next case
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
