"""Every Triton kernel against its torch reference, in Triton's interpreter on the CPU (skipped
where Triton is not installed or there is a GPU, where the same tests run in-process at
Orpheus-3B shapes)."""

from __future__ import annotations

from tests.orpheus.kernels.checks import run_in_the_interpreter

# The kernel tests of this folder, run by a pytest started with TRITON_INTERPRET=1 (conftest.py
# says why they cannot run in this one); on a GPU they run in this process instead.
KERNEL_TESTS = (
    "test_fp8_kernels.py",
    "test_sampler_kernel.py",
    "test_fused_kernels.py",
    "test_codec_triton.py",
    "test_kv8_kernels.py",
    "test_prefill_kernels.py",
)


def test_the_kernel_tests_pass_in_tritons_interpreter():
    """One pytest for them all: each start costs seconds of imports."""
    run_in_the_interpreter(*KERNEL_TESTS)
