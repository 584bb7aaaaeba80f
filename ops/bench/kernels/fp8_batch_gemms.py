"""A decoder layer's four GEMMs at batch sizes, bf16 against fp8 weights: the engine's fp8 module
(the activations' per-row quantization, then ``_scaled_mm``), the quantization alone, and
``_scaled_mm`` alone with and without fast accumulation, each timed in a CUDA graph of 8 calls over
4 copies of the weights (so no weight is in L2 from the call before).

    python -m ops.bench.kernels fp8-batch-gemms [--rows 64 256 366 448 512]

Shapes are Orpheus-3B's four projections (q/k/v and gate/up fused). The weight-only kernel for few
rows is left out (``sweep-fp8`` times it): this is the batch side.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from ops.bench.kernels.checking import HIDDEN, INTERMEDIATE
from ops.bench.kernels.sweep_attention import graph_us
from pipeline.engines.orpheus.model.quant import SCALED_MM_ALIGN, _float8_linear_class

SHAPES = {
    "qkv": (5120, HIDDEN),
    "o": (HIDDEN, HIDDEN),
    "gate_up": (2 * INTERMEDIATE, HIDDEN),
    "down": (HIDDEN, INTERMEDIATE),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[64, 256, 366, 448, 512])
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs CUDA")
        return 2
    print("device:", torch.cuda.get_device_name(), flush=True)
    float8_linear = _float8_linear_class()
    for m in args.rows:
        layer: dict[str, float] = {}
        for name, (n, k) in SHAPES.items():
            lins = [torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            f8s = [float8_linear.quantize(lin, use_scaled_mm=True, small_rows=False) for lin in lins]
            rows = m + (-m) % SCALED_MM_ALIGN
            xq, xs = f8s[0].quantize_rows(x, rows)

            def scaled_mm(i: int, fast: bool):
                w = f8s[i]
                return torch._scaled_mm(
                    xq,
                    w.weight.t(),
                    scale_a=xs,
                    scale_b=w.scale.view(1, -1),
                    out_dtype=torch.bfloat16,
                    use_fast_accum=fast,
                )

            times = {
                "bf16": graph_us(lambda i: F.linear(x, lins[i].weight)),
                "fp8 module": graph_us(lambda i: f8s[i](x)),
                "quantize": graph_us(lambda i: f8s[i].quantize_rows(x, rows)),
                "scaled_mm": graph_us(lambda i: scaled_mm(i, False)),
                "fast accum": graph_us(lambda i: scaled_mm(i, True)),
            }
            for what, us in times.items():
                layer[what] = layer.get(what, 0.0) + us
            print(f"rows={m} {name}: " + ", ".join(f"{a} {us:.1f} us" for a, us in times.items()), flush=True)
        print(f"rows={m} layer: " + ", ".join(f"{a} {us:.1f} us" for a, us in layer.items()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
