"""The checks that need a GPU, where the interpreter cannot go: the CUDA graphs (prefill, mixed
steps), and launches that must not wait for the device. Each runs
``python -m ops.bench.kernels.<check>`` and asserts that every error is within its tolerance;
skipped where there is no CUDA device. The timings those commands print are for people
(docs/performance.md), not asserted."""

from __future__ import annotations

import pytest

from tests.orpheus.kernels.checks import on_cuda

pytestmark = pytest.mark.slow


def test_the_prefill_graphs_match_the_eager_prefill():
    on_cuda("check_prefill")


@pytest.mark.parametrize("kv8", [False, True], ids=["bf16 cache", "fp8 cache"])
def test_a_mixed_step_matches_its_prefill_and_decode_run_apart(kv8):
    on_cuda("check_mixed", *(["--kv8"] if kv8 else []))


def test_no_kind_of_step_waits_for_the_device_at_launch():
    on_cuda("check_syncs")
