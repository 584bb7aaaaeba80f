"""On a CUDA machine: the one-kernel fp8 activation quantization against plain torch, and its time.

    python -m ops.orpheus_bench.check_fp8       # exit status 1 if the two disagree
"""

from __future__ import annotations

import sys

import torch

from ops.orpheus_bench.check_fused import median_ms
from pipeline.engines.orpheus.fp8_kernels import quantize_rows
from pipeline.engines.orpheus.quant import quantize_rows_reference


def main() -> int:
    ok = True
    for m, k in ((1, 3072), (64, 3072), (250, 8192)):
        rows = m + (-m) % 16
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) * 3
        q, s = quantize_rows(x, rows)
        rq, rs = quantize_rows_reference(x, rows)
        scale_err = ((s - rs).abs() / rs).max().item()
        value_err = (q.float() * s - rq.float() * rs).abs().max().item() / x.abs().max().item()
        exact = (q.view(torch.uint8) == rq.view(torch.uint8)).float().mean().item()
        t_tri, t_ref = median_ms(lambda: quantize_rows(x, rows)), median_ms(lambda: quantize_rows_reference(x, rows))
        good = scale_err < 1e-6 and value_err < 0.07 and exact > 0.99
        ok &= good
        print(f"fp8 rows m={m} k={k}: scale rel err {scale_err:.1e}, value err {value_err:.1e} of max, "
              f"{exact:.4f} bytes equal; triton {t_tri * 1e3:.1f} us, torch {t_ref * 1e3:.1f} us "
              f"{'ok' if good else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
