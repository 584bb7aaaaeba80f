"""kernels/fp8.py against plain torch: the weight-only GEMM for a decode step's few rows
(``linear_w8a16``), Float8Linear's routing of few rows to it, and on CUDA the one-kernel activation
quantization (``quantize_rows``). Its time: ``python -m ops.bench.kernels quantize-rows``."""

from __future__ import annotations

import pytest
import torch

# The weight-only GEMM's relative L2 error against float32 over the same e4m3 weight is the
# output's rounding: about 1.6e-3 to bf16 (the fp16 dots take bf16 activations exactly). Triton's
# interpreter truncates to bf16 instead of rounding (2x the error, seen: 3.0-3.7e-3); fp16 outputs
# are exact to fp16 there.
W8A16_TOLERANCE = {"cuda": 4e-3, "cpu": 8e-3, "fp16": 1e-3}

# (rows, n, k, launch): small, masked tiles and uneven K splits in the interpreter; the model's
# shapes, an uneven K split and bf16 dots on the GPU. "fp16": fp16 activations, the table's launch.
SMALL = [
    (3, 64, 96, (16, 32, 32, 4, 2, True, 1)),
    (20, 48, 80, (16, 16, 32, 4, 2, True, 3)),
    (33, 64, 64, (32, 32, 32, 4, 2, True, 2)),
    (5, 32, 64, None),
    (7, 32, 64, "fp16"),
]
MODEL = [(m, 5120, 3072, None) for m in (1, 16, 33, 64, 128)] + [
    (40, 3072, 8192, None),
    (16, 3072, 3000, (16, 64, 128, 4, 3, True, 4)),
    (16, 4096, 3072, (16, 32, 256, 4, 3, False, 1)),
]


def e4m3_weight(n: int, k: int, gen: torch.Generator):
    from pipeline.engines.orpheus.kernels import FP8_MAX

    w = torch.randn(n, k, generator=gen) * 0.02
    scale = w.abs().amax(1).clamp(min=1e-12) / FP8_MAX
    return (w / scale[:, None]).to(torch.float8_e4m3fn), scale


def test_the_weight_only_gemm_is_float32_over_the_same_e4m3_weight_within_its_rounding(device):
    from pipeline.engines.orpheus.kernels.fp8 import linear_w8a16

    gen = torch.Generator().manual_seed(0)
    for m, n, k, launch in SMALL if device == "cpu" else MODEL:
        fp16 = launch == "fp16"
        launch = None if fp16 else launch
        x = (torch.randn(m, k, generator=gen) * 2).to(device, torch.float16 if fp16 else torch.bfloat16)
        w8, scale = e4m3_weight(n, k, gen)
        w8, scale = w8.to(device), scale.to(device)
        want = x.float() @ (w8.float() * scale[:, None]).T
        got = linear_w8a16(x, w8, scale, launch)
        assert got.dtype == x.dtype and got.shape == want.shape
        err = float((got.float() - want).norm() / want.norm())
        assert err < W8A16_TOLERANCE["fp16" if fp16 else device], (m, n, k, launch, err)


def test_float8linear_sends_few_rows_to_the_weight_only_kernel_unless_told_not_to(device):
    """By default a few rows take ``linear_w8a16``'s output exactly, within tolerance of the
    module's dequantized path; ``small_rows=False`` (SYNTH_ORPHEUS_DISABLE=fp8_small_rows) keeps
    ``_scaled_mm``."""
    from pipeline.engines.orpheus.kernels.fp8 import linear_w8a16
    from pipeline.engines.orpheus.model.quant import _float8_linear_class

    cls = _float8_linear_class()
    opted_out = cls(
        torch.zeros(1, 1, dtype=torch.float8_e4m3fn),
        torch.ones(1),
        None,
        torch.bfloat16,
        use_scaled_mm=True,
        small_rows=False,
    )
    assert opted_out.small_rows is None
    gen = torch.Generator().manual_seed(1)
    linear = torch.nn.Linear(64, 32, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(32, 64, generator=gen) * 0.05)
    fast = cls.quantize(linear.to(torch.bfloat16), use_scaled_mm=True).to(device)
    slow = cls(fast.weight, fast.scale, None, fast.out_dtype, use_scaled_mm=False)
    assert fast.small_rows is not None
    x = torch.randn(2, 3, 64, generator=gen).to(device, torch.bfloat16)
    got = fast(x)
    assert torch.equal(got, linear_w8a16(x.reshape(-1, 64), fast.weight, fast.scale).view(2, 3, 32))
    want = slow(x).float()
    assert float((got.float() - want).norm() / want.norm()) < 2e-2


@pytest.mark.parametrize("m, k", [(1, 3072), (64, 3072), (250, 8192)])
def test_the_activation_quantization_kernel_is_the_torch_reference(device, m, k):
    """Scales within 1e-6, values within 7% of the row's largest (one e4m3 step), and over 99% of
    the bytes equal (a tie may round the other way)."""
    if device != "cuda":
        # the interpreter's fp32 -> e4m3 cast drops the carry of a rounding that overflows the
        # mantissa (test_kv8_kernels.py), so the bytes are compared where the kernel serves
        pytest.skip("compared on the GPU only")
    from pipeline.engines.orpheus.kernels.fp8 import quantize_rows
    from pipeline.engines.orpheus.model.quant import quantize_rows_reference

    rows = m + (-m) % 16
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) * 3
    q, s = quantize_rows(x, rows)
    rq, rs = quantize_rows_reference(x, rows)
    assert ((s - rs).abs() / rs).max().item() < 1e-6
    assert (q.float() * s - rq.float() * rs).abs().max().item() / x.abs().max().item() < 0.07
    assert (q.view(torch.uint8) == rq.view(torch.uint8)).float().mean().item() > 0.99
