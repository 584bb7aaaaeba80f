"""kernels/codec.py: its torch references against SNAC's own modules (CPU), and its Triton kernels
against the references, whole decodes included (kernels/test_codec_triton.py, in Triton's interpreter)."""

from __future__ import annotations

import pytest
import torch

from pipeline.engines.orpheus import rng

from pipeline.engines.orpheus.codec.snac import fold_weight_norms
from pipeline.engines.orpheus.kernels import codec as codec_kernels


def snac_unit(channels: int, dilation: int, seed: int):
    """A SNAC residual unit with random weights and random Snake alphas, its weight norms folded."""
    from snac.layers import ResidualUnit

    torch.manual_seed(seed)
    unit = ResidualUnit(channels, dilation=dilation, groups=channels).eval()
    with torch.no_grad():
        for name, p in unit.named_parameters():
            if name.endswith("alpha"):
                p.copy_(torch.rand_like(p) * 1.7 + 0.3)
    fold_weight_norms(unit)
    return unit


@pytest.mark.parametrize("dilation", [1, 3, 9])
def test_the_fused_residual_unit_computes_what_snacs_module_computes(dilation):
    """The two-kernel form's arithmetic (in torch ops): Snake, the dilated depthwise convolution,
    Snake, then the pointwise convolution with the bias and the residual added, for lengths longer
    and shorter than the taps' reach (27 samples at dilation 9)."""
    unit = snac_unit(12, dilation, seed=dilation)
    fused = codec_kernels.FusedResidualUnit(unit, use_triton=False)
    with torch.inference_mode():
        for length in (5, 300):
            x = torch.randn(3, 12, length) * 2
            torch.testing.assert_close(fused(x), unit(x), rtol=1e-5, atol=1e-5)


def test_keyed_normal_ref_is_the_noise_blocks_draw():
    keys = torch.tensor([0, 7, 2**40 + 5])
    t = torch.arange(50) + (2 << 20)
    want = rng.normal(keys.view(-1, 1, 1), t.view(1, 1, -1))
    assert torch.equal(codec_kernels.keyed_normal_ref(keys, 2 << 20, 50), want)


def test_fuse_codec_swaps_the_decoders_residual_units_only():
    from snac import SNAC

    from pipeline.engines.orpheus.tiny import TINY_SNAC

    model = SNAC(**TINY_SNAC).eval()
    fold_weight_norms(model)
    assert codec_kernels.fuse_codec(model.decoder, use_triton=False) == 12  # 4 blocks x 3
    kinds = {type(m).__name__ for m in model.decoder.modules()}
    assert "FusedResidualUnit" in kinds and "ResidualUnit" not in kinds
    assert any(type(m).__name__ == "ResidualUnit" for m in model.encoder.modules())
