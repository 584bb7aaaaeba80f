"""The engine's Triton kernels, each beside the torch reference it replaces and is tested against.

attention (decode and prefill attention over each row's own context), fused (norms with their
residual adds, RoPE with the cache write, silu * up), fp8 (activation quantization and the
weight-only GEMM for few rows), sample (a step's draw in one kernel), codec (SNAC's residual units
and its keyed noise). Importing this package imports no torch; a kernel module that needs Triton
imports it itself.
"""

# The largest finite float8_e4m3fn: fp8 weights, activations and KV-cache entries saturate here.
FP8_MAX = 448.0
