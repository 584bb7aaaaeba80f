"""Quantized modes load through the real loader, run, and stay within stated bounds of fp32 logits.

Bounds (relative L2 error of the logits over a prompt, tiny model with Llama's init): int8 (LLM.int8)
3%, fp8 (e4m3, per-channel scales) 6%, nf4 20%. Measured: about 0.6%, 2.5% and 9%.
"""

from __future__ import annotations

import pytest

from pipeline.engines.orpheus.prompt import prompt_ids


BOUNDS = {"int8": 0.03, "fp8": 0.06, "nf4": 0.20}


@pytest.fixture(scope="module")
def reference_logits(tiny):
    import torch

    ids = torch.tensor([prompt_ids(tiny.tokenizer, "Quantized weights, full precision logits?", "zoe")])
    with torch.inference_mode():
        return ids, tiny.model(ids).logits.float()


@pytest.mark.parametrize("mode", sorted(BOUNDS))
def test_quantized_logits_stay_within_bound(tiny_dir, reference_logits, mode):
    import torch

    from pipeline.engines.orpheus.model.loading import load

    if mode != "fp8":
        pytest.importorskip("bitsandbytes")
    q = load(str(tiny_dir), None, "float32", mode, "cpu")
    assert q.quant.applied == mode, q.quant.fallback
    ids, ref = reference_logits
    with torch.inference_mode():
        out = q.model(ids).logits.float()
    err = ((out - ref).norm() / ref.norm()).item()
    assert err < BOUNDS[mode], f"{mode}: relative logits error {err:.4f}"


def test_unknown_mode_is_refused(tiny):
    from pipeline.engines.orpheus.model.quant import quantize
    from pipeline.errors import EngineUnavailableError

    with pytest.raises(EngineUnavailableError):
        quantize(tiny.model, "int3", "cpu", tiny.model.dtype)


def test_float8_linear_sends_few_rows_to_the_weight_only_kernel_unless_switched_off():
    pytest.importorskip("triton")
    import torch

    from pipeline.engines.orpheus.model.quant import _float8_linear_class, fuse_float8

    cls = _float8_linear_class()
    weight, scale = torch.zeros(4, 8, dtype=torch.float8_e4m3fn), torch.ones(4)
    on = cls(weight, scale, None, torch.bfloat16, use_scaled_mm=True)
    off = cls(weight, scale, None, torch.bfloat16, use_scaled_mm=True, small_rows=False)
    assert on.small_rows is not None and off.small_rows is None
    # q/k/v fused into one module keep the choice
    assert fuse_float8([off, cls(weight, scale, None, torch.bfloat16, True, False)]).small_rows is None
    assert fuse_float8([on, cls(weight, scale, None, torch.bfloat16, True)]).small_rows is not None
