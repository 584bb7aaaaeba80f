"""Launch settings of the decode-attention kernel (attention.py), for each cache dtype: every
(keys per block, warps, stages) timed at a few batch sizes and row lengths, best first.

    python3 -m ops.orpheus_bench.sweep_attention        # on the GPU

Prints one line per (dtype, batch, length) with the default's time and the fastest settings, and
the setting that is fastest summed over the cases, which is what ``attention.LAUNCH`` should hold.
"""

from __future__ import annotations

import itertools
import sys
from collections import defaultdict

import torch

from ops.orpheus_bench.check_fused import HEAD_DIM, HEADS, KV_HEADS, median_ms
from pipeline.engines.orpheus import attention
from pipeline.engines.orpheus.fused import to_cache

CASES = ((16, 300), (128, 600), (256, 1000), (256, 1800))
BLOCKS, WARPS, STAGES = (64, 128, 256), (4, 8), (1, 2, 3)


def main() -> int:
    if not torch.cuda.is_available() or not attention.available("cuda"):
        print("needs CUDA and Triton")
        return 2
    dev, dtype = "cuda", torch.bfloat16
    print("device:", torch.cuda.get_device_name(), flush=True)
    g, scale = HEADS // KV_HEADS, HEAD_DIM ** -0.5
    for name in ("bf16", "fp8"):
        totals = defaultdict(float)
        for b, length in CASES:
            q = torch.randn(b, KV_HEADS, g, HEAD_DIM, dtype=dtype, device=dev)
            k, v = (torch.randn(b, KV_HEADS, length + 1, HEAD_DIM, dtype=dtype, device=dev)
                    for _ in range(2))
            if name == "fp8":
                k, v = to_cache(k, 1.0), to_cache(v, 1.0)
            lens = torch.randint(length * 9 // 10, length + 1, (b,), device=dev)
            read = 2 * lens.sum().item() * KV_HEADS * HEAD_DIM * k.element_size()
            times = {}
            for launch in itertools.product(BLOCKS, WARPS, STAGES):
                try:
                    times[launch] = median_ms(
                        lambda: attention.decode_attention(q, k, v, lens, scale, launch=launch))
                except Exception as e:  # noqa: BLE001 - a setting that does not compile is skipped
                    print(f"  {name} {launch}: {type(e).__name__}", file=sys.stderr)
            for launch, ms in times.items():
                totals[launch] += ms
            default = attention.LAUNCH[k.element_size()]
            best = sorted(times, key=times.get)[:3]
            print(f"{name} B={b} L={length}: default {default} {times[default] * 1e3:.1f} us "
                  f"({read / times[default] / 1e6:.0f} GB/s); best " +
                  ", ".join(f"{lc} {times[lc] * 1e3:.1f} us ({read / times[lc] / 1e6:.0f} GB/s)"
                            for lc in best), flush=True)
        overall = min(totals, key=totals.get)
        print(f"{name}: fastest over the cases {overall} ({totals[overall] * 1e3:.0f} us in all; "
              f"default {totals[attention.LAUNCH[1 if name == 'fp8' else 2]] * 1e3:.0f} us)",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
