"""Launch settings of the decode-attention kernel (attention.py), for each cache dtype: every
(keys per block, warps, stages, fp16 dots) timed at a few batch sizes and row
lengths, best first.

    python3 -m ops.bench.kernels.sweep_attention        # on the GPU
    python3 -m ops.bench.kernels.sweep_attention --dtypes fp8 --cases 128x400 \
        --blocks 32,64 --warps 2,4 --stages 3,4,5        # a narrower or wider sweep

Each setting is timed inside a CUDA graph of 8 calls over 4 caches in turn (as the decoder's
layers are), so neither the host's launch time nor the L2 cache flatters small cases. Prints one
line per (dtype, batch, length) with the current setting's time and the fastest ones,
then per batch size the setting that is fastest summed over its lengths, which is what
``attention.LAUNCH`` should hold, and the fastest without fp16 dots (the same for bf16).
"""

from __future__ import annotations

import itertools
import sys
from collections import defaultdict

import torch

from ops.bench.kernels.checking import HEAD_DIM, HEADS, KV_HEADS
from ops.bench.timing import median_device_ms
from pipeline.engines.orpheus.kernels import attention
from pipeline.engines.orpheus.kernels.fused import to_cache

CASES = ((16, 300), (16, 1000), (64, 600), (128, 300), (128, 600), (128, 1000), (256, 1000), (256, 1800))
CONTEXT = 2048  # positions per cache row, as the engine sizes them
BLOCKS, WARPS, STAGES = (64, 128), (4, 8), (2, 3)


COPIES, CALLS = 4, 8


def graph_us(fn, calls: int = CALLS) -> float:
    """Microseconds per call of ``fn(i)``, i = 0..calls-1, replayed as one CUDA graph."""
    for i in range(COPIES):
        fn(i)  # compiles, outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fn(i % COPIES)
    ms = median_device_ms(graph.replay, reps=10)
    del graph
    return ms * 1e3 / calls


def random_case(name: str, b: int, length: int):
    """Queries [B, Hkv, G, D] bf16, COPIES caches of (K, V) [B, Hkv, CONTEXT + 1, D] ("bf16"
    or "fp8"), each row's length (``length`` or up to 10% less), the bytes of K and V a call
    reads."""
    dev, dtype = "cuda", torch.bfloat16
    q = torch.randn(b, KV_HEADS, HEADS // KV_HEADS, HEAD_DIM, dtype=dtype, device=dev)
    caches = []
    for _ in range(COPIES):
        k, v = (torch.randn(b, KV_HEADS, CONTEXT + 1, HEAD_DIM, dtype=dtype, device=dev) for _ in range(2))
        caches.append((to_cache(k, 1.0), to_cache(v, 1.0)) if name == "fp8" else (k, v))
        del k, v
    lens = torch.randint(length * 9 // 10, length + 1, (b,), device=dev)
    read = 2 * lens.sum().item() * KV_HEADS * HEAD_DIM * caches[0][0].element_size()
    return q, caches, lens, read


def settings(fp8: bool, blocks=BLOCKS, warps_=WARPS, stages_=STAGES):
    for block, warps, stages in itertools.product(blocks, warps_, stages_):
        for f16 in (False, True) if fp8 else (False,):
            yield block, warps, stages, f16


def main(argv=None) -> int:
    import argparse

    ints = lambda text: tuple(int(x) for x in text.split(","))  # noqa: E731
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtypes", default="bf16,fp8")
    ap.add_argument("--cases", default=",".join(f"{b}x{n}" for b, n in CASES), help="ROWSxPOSITIONS,...")
    ap.add_argument("--blocks", type=ints, default=BLOCKS)
    ap.add_argument("--warps", type=ints, default=WARPS)
    ap.add_argument("--stages", type=ints, default=STAGES)
    args = ap.parse_args(argv)
    cases = [tuple(int(x) for x in c.split("x")) for c in args.cases.split(",")]
    if not torch.cuda.is_available() or not attention.available("cuda"):
        print("needs CUDA and Triton")
        return 2
    print("device:", torch.cuda.get_device_name(), flush=True)
    scale = HEAD_DIM**-0.5
    for name in args.dtypes.split(","):
        per_batch: dict[int, dict] = defaultdict(lambda: defaultdict(float))
        for b, length in cases:
            q, caches, lens, read = random_case(name, b, length)
            times = {}
            current = attention.launch_for(caches[0][0].element_size(), b)
            for launch in {current, *settings(name == "fp8", args.blocks, args.warps, args.stages)}:
                try:
                    times[launch] = (
                        graph_us(lambda i: attention.decode_attention(q, *caches[i], lens, scale, launch=launch)) / 1e3
                    )
                except Exception as e:  # noqa: BLE001 - a setting that does not compile is skipped
                    print(f"  {name} {launch}: {type(e).__name__}: {e}", file=sys.stderr)
            for launch, ms in times.items():
                per_batch[b][launch] += ms
            best = sorted(times, key=times.get)[:3]
            print(
                f"{name} B={b} L={length}: current {current} {times[current] * 1e3:.1f} us "
                f"({read / times[current] / 1e6:.0f} GB/s); best "
                + ", ".join(f"{lc} {times[lc] * 1e3:.1f} us ({read / times[lc] / 1e6:.0f} GB/s)" for lc in best),
                flush=True,
            )
            caches = None  # frees the device copies before the next case
        for b, totals in per_batch.items():
            overall = min(totals, key=totals.get)
            plain = min((lc for lc in totals if not lc[3]), key=totals.get)
            current = attention.launch_for(1 if name == "fp8" else 2, b)
            print(
                f"{name} B={b}: fastest over its lengths {overall} ({totals[overall] * 1e3:.0f} us"
                f" in all); without fp16 dots {plain} {totals[plain] * 1e3:.0f} us; current {current} "
                f"{totals[current] * 1e3:.0f} us",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
