"""The Orpheus engine's pieces measured apart: device timings of the decode graph and the codec
(micro), launch-setting sweeps of the attention and fp8 GEMM kernels, the loop's host time and its
contention for the GIL, and each Triton kernel, graph and mixed step against what it replaces, on
CUDA. Run ``python -m ops.bench.kernels`` for the list; that they compute the same is tested in
tests/orpheus/kernels/."""
