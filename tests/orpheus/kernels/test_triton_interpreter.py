"""Every Triton kernel against its torch reference, in Triton's interpreter on the CPU (skipped
where Triton is not installed): the checks of ops/bench/kernels/check_*.py, small and in fp32,
untimed. On a GPU the same checks run at Orpheus-3B shapes (test_on_cuda.py)."""

from __future__ import annotations

import pytest

from tests.orpheus.kernels.checks import interpreted


@pytest.mark.slow
def test_the_decode_steps_kernels_match_the_references():
    """fused.py's norm, RoPE-with-cache-write and silu kernels, then a 2-layer decoder's fused
    step against the unfused one (check_fused.py)."""
    interpreted("check_fused", "--batches", "1", "5", "--dtype", "float32", "--no-time", timeout=600)


@pytest.mark.slow
def test_the_fused_draw_gives_the_torch_draws_tokens():
    """kernels/sample.py's one-kernel draw against RowSampler's torch draw: the same tokens over
    peaked and flat logits for each sampling setting, and the same tokens from the decode loop
    (check_sampler.py; the GPU run adds the times)."""
    out = interpreted("check_sampler", timeout=600)
    assert out.count(" ok\n") == 4 and "MISMATCH" not in out, out
    assert "decode loop with the fused draw: tokens equal" in out, out


@pytest.mark.slow
def test_the_kernels_over_an_fp8_cache_match_the_references():
    """The interpreter loads e4m3 exactly, so the attention kernel is checked on random data; its
    fp32 -> e4m3 cast loses the carry of a rounding that overflows the mantissa (1.96 -> 1.0), so
    rope_store's fp8 write is checked on data exact in e4m3 (check_kv8.py says how); the GPU check
    covers random data."""
    out = interpreted("check_kv8")
    for check in ("fp8 kernel = kernel on fp8->float32", "rope_store fp8 k cache (grid)",
                  "logits fp8 vs float32 cache B=2 (per-row kernel", "fp16 dots = float32 dots"):
        assert check in out, out


def test_the_fp8_weight_only_kernel_matches_float32():
    """``linear_w8a16`` (the fp8 GEMM for a decode step's few rows): within the output's rounding
    of float32 over the same e4m3 weights, masked and unmasked tiles, bf16 and fp16; and
    Float8Linear sends few rows to it (check_fp8.py; the GPU run checks the model's shapes)."""
    out = interpreted("check_fp8", timeout=600)
    assert out.count(" ok\n") == 6 and "MISMATCH" not in out, out
    assert "the weight-only kernel's output True" in out


@pytest.mark.slow
def test_the_codec_kernels_match_their_references():
    """Each codec kernel on fresh random inputs (padding included), then whole decodes of the tiny
    SNAC, fused against the module's own ops (check_codec.py)."""
    out = interpreted("check_codec", "--tiny")
    assert "12 residual units swapped" in out
    assert "all errors within tolerance" in out


@pytest.mark.slow
def test_the_prefill_kernels_match_the_torch_path():
    """rope_store with each token's cache row and prefill_attention over the cache, then a 2-layer
    decoder's prefill and mixed step, logits and cache (check_prefill_attention.py)."""
    out = interpreted("check_prefill_attention", timeout=600)
    assert "prefill_attention fp8 cache s=0.5,2.0" in out
    assert "mixed prompt logits" in out
