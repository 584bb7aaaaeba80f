"""The fp8 weight GEMMs of a decode step at small batch: W8A16 launch settings against
``_scaled_mm`` (with its activation quantization) and bf16, timed inside CUDA graphs.

    python -m ops.bench.kernels.sweep_fp8 [--rows 1 16 32 64 128 192]

Shapes are Orpheus-3B's four projections (q/k/v and gate/up fused). Each case is a CUDA graph of 8
calls over 4 copies of the weight (so a weight is never in L2 from the call before, as in the
decoder's layers), replayed 10 times; the time is per call. Prints, per rows: each kernel's time
per shape and the sum over the four shapes (one layer), the best W8A16 settings per shape, and the
best single setting for all four (what ``kernels.fp8.W8A16_LAUNCH`` holds).
"""

from __future__ import annotations

import argparse
import itertools
import sys

import torch
import torch.nn.functional as F

from ops.bench.timing import mean_device_ms
from pipeline.engines.orpheus.kernels import FP8_MAX
from pipeline.engines.orpheus.kernels.fp8 import linear_w8a16, quantize_rows
from pipeline.engines.orpheus.model.quant import SCALED_MM_ALIGN

SHAPES = {"qkv": (5120, 3072), "o": (3072, 3072), "gate_up": (16384, 3072), "down": (3072, 8192)}
COPIES, CALLS, REPLAYS = 4, 8, 10


def graph_us(fn) -> float:
    """Microseconds per call of ``fn(i)`` (i: which weight copy), in a graph of CALLS calls."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(COPIES):
            fn(i)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for c in range(CALLS):
            fn(c % COPIES)
    return mean_device_ms(graph.replay, REPLAYS) * 1000 / CALLS


def block_ms(m: int) -> list[int]:
    p = 16
    while p < m and p < 128:
        p *= 2
    return sorted({p, max(16, p // 2)}) if m > 32 else [p]


def configs(m: int):
    for bm, bn, bk, stages, split in itertools.product(block_ms(m), (32, 64, 128), (128, 256), (3, 4), (0, 1, 2, 4, 8)):
        if (bm * bk * 2 + bn * bk) * stages > 200_000:  # past the shared memory
            continue
        yield bm, bn, bk, 4, stages, True, split


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 16, 32, 64])
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    dev = "cuda"
    weights = {}
    for name, (n, k) in SHAPES.items():
        w16 = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(COPIES)]
        scales = [w.float().abs().amax(1).clamp(min=1e-12) / FP8_MAX for w in w16]
        w8 = [(w.float() / s[:, None]).to(torch.float8_e4m3fn) for w, s in zip(w16, scales)]
        weights[name] = (w16, w8, scales)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    for m in args.rows:
        rows = m + (-m) % SCALED_MM_ALIGN
        xs = {name: torch.randn(m, k, device=dev, dtype=torch.bfloat16) for name, (_n, k) in SHAPES.items()}
        base = {"bf16": {}, "scaled_mm": {}}
        times: dict[tuple, dict[str, float]] = {}
        for name in SHAPES:
            w16, w8, scales = weights[name]
            x = xs[name]
            base["bf16"][name] = graph_us(lambda i: F.linear(x, w16[i]))

            def scaled(i):
                xq, xs_ = quantize_rows(x, rows)
                return torch._scaled_mm(
                    xq, w8[i].t(), scale_a=xs_, scale_b=scales[i].view(1, -1), out_dtype=torch.bfloat16
                )

            base["scaled_mm"][name] = graph_us(scaled)
            for cfg in configs(m):
                try:
                    t = graph_us(lambda i: linear_w8a16(x, w8[i], scales[i], cfg))
                except Exception as e:  # noqa: BLE001 - a setting past a resource limit: skip it
                    if "OutOfResources" not in type(e).__name__ and "resources" not in str(e):
                        print(f"  m={m} {name} {cfg}: {type(e).__name__}: {str(e)[:120]}", flush=True)
                    continue
                times.setdefault(cfg, {})[name] = t
        complete = {cfg: t for cfg, t in times.items() if len(t) == len(SHAPES)}
        best_all = min(complete, key=lambda c: sum(complete[c].values()))
        # the same weights in the bf16-dot variant of the best setting
        bf = best_all[:5] + (False,) + best_all[6:]
        bf_t = {}
        for name in SHAPES:
            _w16, w8, scales = weights[name]
            x = xs[name]
            bf_t[name] = graph_us(lambda i: linear_w8a16(x, w8[i], scales[i], bf))
        print(f"rows {m}: us per call (one layer = the sum)", flush=True)
        for label, t in (
            ("bf16 F.linear", base["bf16"]),
            ("scaled_mm + quant", base["scaled_mm"]),
            (f"w8a16 {best_all}", complete[best_all]),
            (f"w8a16 {bf}", bf_t),
        ):
            cells = " ".join(f"{name}={t[name]:.1f}" for name in SHAPES)
            print(f"  {label:<42} {cells}  layer={sum(t.values()):.1f}", flush=True)
        for name, (n, k) in SHAPES.items():
            cfg = min(times, key=lambda c: times[c].get(name, float("inf")))
            t = times[cfg][name]
            print(f"  best for {name}: {cfg} {t:.1f} us, {n * k / t / 1e3:.0f} GB/s of fp8 weight", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
