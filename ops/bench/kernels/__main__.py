"""python -m ops.bench.kernels NAME [ARGS...]: one of the kernel benchmarks (NAME --help for its
arguments). Each is also ``python -m ops.bench.kernels.<module>``."""

from __future__ import annotations

import importlib
import sys

BENCHES = {
    "micro": "the decode graph per (batch, length) and the codec per window batch (CUDA)",
    "sweep-attention": "launch settings of the decode-attention kernel, per cache dtype (CUDA)",
    "sweep-fp8": "fp8 weight GEMM launch settings against _scaled_mm and bf16 (CUDA)",
    "fp8-batch-gemms": "a layer's GEMMs at batch sizes: bf16 against fp8 weights and their parts (CUDA)",
    "attention-variants": "the decode-attention kernel over fp8 against other formulations (CUDA)",
    "host-overhead": "the loop thread's host time per step (CPU)",
    "contention": "the loop thread under contention for the GIL (CPU)",
    "fused-ops": "fused.py's kernels and the 28-layer decode step, fused against torch (CUDA)",
    "codec": "a SNAC codec call per lane and shape, fused against the module's ops (CUDA)",
    "kv8": "the fp8 KV cache's error against bf16 and its attention's speed (CUDA)",
    "prefill-attention": "a prefill and a mixed step, the prefill's Triton path against torch (CUDA)",
    "quantize-rows": "the fp8 activation quantization, Triton against torch (CUDA)",
    "sampler": "the fused draw against the torch draw, per sampling setting (CUDA)",
    "prefill-graphs": "the prefill graphs against the eager prefill, with their boot cost (CUDA)",
    "mixed-steps": "mixed steps against the same plan run apart (CUDA)",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in BENCHES:
        print(__doc__.strip() + "\n")
        for name, what in BENCHES.items():
            print(f"  {name:<24} {what}")
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(f"ops.bench.kernels.{argv[0].replace('-', '_')}")
    sys.argv = [f"python -m ops.bench.kernels {argv[0]}", *argv[1:]]
    return module.main(argv[1:]) or 0


if __name__ == "__main__":
    raise SystemExit(main())
