"""The fp8 activation quantization of a decode step's rows (kernels/fp8.py ``quantize_rows``, one
Triton kernel) against its torch reference, device microseconds at the model's shapes (CUDA).
Their agreement is tested in tests/orpheus/kernels/test_fp8_kernels.py.

    python -m ops.bench.kernels quantize-rows
"""

from __future__ import annotations

import argparse
import sys

import torch

from ops.bench.timing import median_device_ms
from pipeline.engines.orpheus.kernels.fp8 import quantize_rows
from pipeline.engines.orpheus.model.quant import quantize_rows_reference


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="1x3072,64x3072,250x8192", help="rows x k, comma-separated")
    args = ap.parse_args(argv)
    for shape in args.shapes.split(","):
        m, k = (int(n) for n in shape.split("x"))
        rows = m + (-m) % 16
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) * 3
        t_triton = median_device_ms(lambda: quantize_rows(x, rows))
        t_torch = median_device_ms(lambda: quantize_rows_reference(x, rows))
        print(f"quantize rows m={m} k={k}: triton {t_triton * 1e3:.1f} us, torch {t_torch * 1e3:.1f} us", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
