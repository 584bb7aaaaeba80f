"""Every Triton kernel against its torch reference, in Triton's interpreter on the CPU (skipped
where Triton is not installed): the checks of ops/bench/kernels/check_*.py, small and in fp32,
untimed. On a GPU the same checks run at Orpheus-3B shapes (test_on_cuda.py)."""

from __future__ import annotations

import pytest

from tests.orpheus.kernels.checks import interpreted, tested_in_the_interpreter

# The kernel tests of this folder, run by a pytest started with TRITON_INTERPRET=1 (conftest.py
# says why they cannot run in this one); on a GPU they run in this process instead.
KERNEL_TESTS = ("test_fp8_kernels.py", "test_sampler_kernel.py", "test_fused_kernels.py",
                "test_codec_triton.py", "test_kv8_kernels.py")


def test_the_kernel_tests_pass_in_tritons_interpreter():
    """One pytest for them all: each start costs seconds of imports."""
    tested_in_the_interpreter(*KERNEL_TESTS)


@pytest.mark.slow
def test_the_prefill_kernels_match_the_torch_path():
    """rope_store with each token's cache row and prefill_attention over the cache, then a 2-layer
    decoder's prefill and mixed step, logits and cache (check_prefill_attention.py)."""
    out = interpreted("check_prefill_attention", timeout=600)
    assert "prefill_attention fp8 cache s=0.5,2.0" in out
    assert "mixed prompt logits" in out
