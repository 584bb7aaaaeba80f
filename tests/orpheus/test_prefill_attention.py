"""The prefill's Triton kernels (rope_store with each token's cache row, prefill_attention over the
cache) against the torch path, in Triton's interpreter: ops/orpheus_bench/check_prefill_attention.py
at fp32 (kernels alone, then a 2-layer decoder's prefill and mixed step, logits and cache)."""

from __future__ import annotations

from tests.orpheus.triton_checks import interpreted


def test_prefill_kernels_match_the_torch_path_in_the_interpreter():
    out = interpreted("check_prefill_attention", timeout=600)
    assert "prefill_attention fp8 cache s=0.5,2.0" in out
    assert "mixed prompt logits" in out
