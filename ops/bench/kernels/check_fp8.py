"""The fp8 kernels against plain torch: the one-kernel activation quantization (CUDA) and the
weight-only GEMM for few rows (``linear_w8a16``; on the CPU under ``TRITON_INTERPRET=1``, small).

    python -m ops.bench.kernels.check_fp8 [--device cpu]    # exit status 1 if any disagree
"""

from __future__ import annotations

import argparse
import sys

import torch

from ops.bench.timing import median_device_ms
from pipeline.engines.orpheus.kernels import FP8_MAX
from pipeline.engines.orpheus.kernels.fp8 import linear_w8a16, quantize_rows
from pipeline.engines.orpheus.model.quant import quantize_rows_reference

# The weight-only GEMM's relative L2 error against float32 over the same e4m3 weight is the
# output's rounding: about 1.6e-3 to bf16 (the fp16 dots take bf16 activations exactly). Triton's
# interpreter truncates to bf16 instead of rounding (2x the error, seen: 3.0-3.7e-3); fp16 outputs
# are exact to fp16 there.
W8A16_TOLERANCE = {"cuda": 4e-3, "interpreter": 8e-3, "fp16": 1e-3}


def check_w8a16(device: str) -> bool:
    """``linear_w8a16`` against float32 over the dequantized weight, at several row counts, with
    the table's settings and with explicit ones (uneven shapes take the masked loads)."""
    ok = True
    big = device.startswith("cuda")
    if big:     # the model's shapes; an uneven K split; bf16 dots
        cases = [(m, 5120, 3072, None) for m in (1, 16, 33, 64, 128)] + [
            (40, 3072, 8192, None), (16, 3072, 3000, (16, 64, 128, 4, 3, True, 4)),
            (16, 4096, 3072, (16, 32, 256, 4, 3, False, 1))]
    else:       # small, masked tiles, uneven K splits; fp16 activations
        cases = [(3, 64, 96, (16, 32, 32, 4, 2, True, 1)), (20, 48, 80, (16, 16, 32, 4, 2, True, 3)),
                 (33, 64, 64, (32, 32, 32, 4, 2, True, 2)), (5, 32, 64, None), (7, 32, 64, "fp16")]
    gen = torch.Generator().manual_seed(0)
    for m, n, k, launch in cases:
        fp16 = launch == "fp16"
        launch = None if fp16 else launch
        x = (torch.randn(m, k, generator=gen) * 2).to(device, torch.float16 if fp16 else torch.bfloat16)
        w = torch.randn(n, k, generator=gen).to(device) * 0.02
        scale = w.abs().amax(1).clamp(min=1e-12) / FP8_MAX
        w8 = (w / scale[:, None]).to(torch.float8_e4m3fn)
        ref = x.float() @ (w8.float() * scale[:, None]).T
        out = linear_w8a16(x, w8, scale, launch)
        err = float((out.float() - ref).norm() / ref.norm())
        tolerance = W8A16_TOLERANCE["fp16" if fp16 else "cuda" if big else "interpreter"]
        good = out.dtype == x.dtype and out.shape == ref.shape and err < tolerance
        ok &= good
        print(f"w8a16 {x.dtype} m={m} n={n} k={k} {launch or 'table'}: rel L2 {err:.1e} "
              f"{'ok' if good else 'MISMATCH'}", flush=True)
    return ok


def check_routing(device: str) -> bool:
    """Float8Linear (the ``_scaled_mm`` kind) sends few rows to the weight-only kernel by default
    and uses ``_scaled_mm`` with ``small_rows=False`` (SYNTH_ORPHEUS_DISABLE=fp8_small_rows); the
    weight-only output is that kernel's, and within tolerance of the module's dequantized path."""
    from pipeline.engines.orpheus.model.quant import _float8_linear_class

    opted_out = _float8_linear_class()(torch.zeros(1, 1, dtype=torch.float8_e4m3fn), torch.ones(1),
                                       None, torch.bfloat16, use_scaled_mm=True, small_rows=False).small_rows
    cls = _float8_linear_class()
    gen = torch.Generator().manual_seed(1)
    linear = torch.nn.Linear(64, 32, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(32, 64, generator=gen) * 0.05)
    fast = cls.quantize(linear.to(torch.bfloat16), use_scaled_mm=True).to(device)
    slow = cls(fast.weight, fast.scale, None, fast.out_dtype, use_scaled_mm=False)
    x = torch.randn(2, 3, 64, generator=gen).to(device, torch.bfloat16)
    out = fast(x)
    same = torch.equal(out, linear_w8a16(x.reshape(-1, 64), fast.weight, fast.scale).view(2, 3, 32))
    ref = slow(x).float()
    err = float((out.float() - ref).norm() / ref.norm())
    good = opted_out is None and fast.small_rows is not None and same and err < 2e-2
    print(f"Float8Linear, 6 rows, by default (scaled_mm when asked: {opted_out is None}): the "
          f"weight-only kernel's output {same}, rel L2 to the dequantized "
          f"path {err:.1e} {'ok' if good else 'MISMATCH'}", flush=True)
    return good


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    ok = check_w8a16(args.device)
    ok &= check_routing(args.device)
    if not args.device.startswith("cuda"):
        return 0 if ok else 1
    for m, k in ((1, 3072), (64, 3072), (250, 8192)):
        rows = m + (-m) % 16
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) * 3
        q, s = quantize_rows(x, rows)
        rq, rs = quantize_rows_reference(x, rows)
        scale_err = ((s - rs).abs() / rs).max().item()
        value_err = (q.float() * s - rq.float() * rs).abs().max().item() / x.abs().max().item()
        exact = (q.view(torch.uint8) == rq.view(torch.uint8)).float().mean().item()
        t_tri, t_ref = median_device_ms(lambda: quantize_rows(x, rows)), median_device_ms(lambda: quantize_rows_reference(x, rows))
        good = scale_err < 1e-6 and value_err < 0.07 and exact > 0.99
        ok &= good
        print(f"fp8 rows m={m} k={k}: scale rel err {scale_err:.1e}, value err {value_err:.1e} of max, "
              f"{exact:.4f} bytes equal; triton {t_tri * 1e3:.1f} us, torch {t_ref * 1e3:.1f} us "
              f"{'ok' if good else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
