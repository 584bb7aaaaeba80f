"""kernels/codec.py's Triton kernels against their torch references (tests/orpheus/
test_codec_kernels.py checks those references against SNAC's own modules), then whole decodes of a
random SNAC, fused against the module's own ops. In the interpreter the tiny SNAC's widths; on the
GPU the 24 kHz model's, where the module's convolutions and the fused pointwise GEMM take TF32
products, so both are also held to an exact fp32 decode. Their times: ``python -m
ops.bench.kernels codec``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

KERNEL_TOL = (1e-5, 1e-6)  # fp32 against fp32: reordered sums
TF32_TOL = (5e-3, 2e-3)  # the pointwise GEMM's TF32 products against torch's (TF32 too)
DECODE_TOL = {"cpu": (1e-4, 1e-5), "cuda": (2e-2, 1e-2)}  # cuda: TF32 convolutions in the module


def assert_close(got, want, tol, what: str) -> None:
    """Max abs error within tol[0] of the reference's largest entry, relative L2 within tol[1]."""
    g, w = got.float(), want.float()
    top = w.abs().max().item() or 1.0
    max_abs, rel = (g - w).abs().max().item(), ((g - w).norm() / w.norm().clamp_min(1e-30)).item()
    assert max_abs <= tol[0] * top and rel <= tol[1], (
        f"{what}: max abs {max_abs:.3e} (max |ref| {top:.2f}), rel L2 {rel:.3e}"
    )


@pytest.mark.parametrize("dilation", [1, 3, 9])
def test_the_residual_unit_kernels_match_their_references(device, dilation):
    """``snake_dw_snake`` at lengths longer and shorter than its taps' reach (the zero padding),
    then ``pointwise_residual``."""
    from pipeline.engines.orpheus.kernels import codec

    big = device == "cuda"
    torch.manual_seed(dilation)
    for c in (512, 64) if big else (16, 8):
        for t in (24, 1000) if big else (5, 40):  # 5: shorter than the taps' reach
            x = torch.randn(2, c, t, device=device) * 3
            a1, a2 = (torch.rand(c, device=device) * 1.7 + 0.3 for _ in range(2))
            w = torch.randn(c * 7, device=device) * 0.3
            wb, pb = torch.randn(c, device=device), torch.randn(c, device=device)
            h = codec.snake_dw_snake(x, a1, w, wb, a2, dilation)
            want = codec.snake_dw_snake_ref(x, a1.view(1, -1, 1), w.view(c, 1, 7), wb, a2.view(1, -1, 1), dilation)
            assert_close(h, want, KERNEL_TOL, f"snake_dw_snake C={c} T={t}")
            pw = torch.randn(c, c, device=device) / c**0.5
            assert_close(
                codec.pointwise_residual(pw, h, pb, x),
                codec.pointwise_residual_ref(pw, h, pb, x),
                TF32_TOL if big else KERNEL_TOL,
                f"pointwise_residual C={c} T={t}",
            )


def test_the_noise_kernel_draws_the_references_normals(device):
    from pipeline.engines.orpheus.kernels import codec

    keys = torch.randint(0, 2**40, (3,), device=device)
    for first, length in ((0, 37), (3 << 20, 2000)):
        assert_close(
            codec.keyed_normal(keys, first, length),
            codec.keyed_normal_ref(keys, first, length),
            KERNEL_TOL,
            f"keyed_normal start={first} T={length}",
        )


def random_snac(tiny: bool):
    """A SNAC with random weights and Snake alphas drawn from U(0.3, 2), the same for each call."""
    from snac import SNAC

    from pipeline.engines.orpheus.tiny import SNAC_24KHZ, TINY_SNAC

    torch.manual_seed(1)
    model = SNAC(**(TINY_SNAC if tiny else SNAC_24KHZ)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("alpha"):
                p.copy_(torch.rand_like(p) * 1.7 + 0.3)
    return model


def test_a_fused_decode_matches_the_modules_own(device):
    from pipeline.engines.orpheus.codec.snac import SnacCodec

    tiny = device != "cuda"
    plain = SnacCodec(random_snac(tiny), device, fuse=False)
    fused = SnacCodec(random_snac(tiny), device, fuse=True)
    assert fused.fused_units == 12 if tiny else fused.fused_units > 0, fused.fallbacks
    rng = np.random.default_rng(0)
    tol = DECODE_TOL[device]
    # the interpreter runs each program of each launch in numpy: one small call there
    for g, w in ((3, 4), (2, 7)) if device == "cuda" else ((2, 2),):
        frames = rng.integers(0, 4096, size=(g, w, 7))
        keys = rng.integers(0, 2**40, size=g)
        module, kernels = (torch.from_numpy(c.decode_windows(frames, keys)) for c in (plain, fused))
        assert_close(kernels, module, tol, f"decode {g} windows x {w} frames")
        if device == "cuda":
            tf32 = torch.backends.cudnn.allow_tf32
            torch.backends.cudnn.allow_tf32 = False
            try:
                exact = torch.from_numpy(plain.decode_windows(frames, keys))
            finally:
                torch.backends.cudnn.allow_tf32 = tf32
            assert_close(module, exact, tol, "the module (TF32 convolutions) against exact fp32")
            assert_close(kernels, exact, tol, "fused against exact fp32")


# Half-precision activations against fp32 (docs/orpheus.md#the-codec): bf16 36-40 dB measured,
# fp16 (three more bits of mantissa) held to the bar the "auto" dtype's check sets at load.
HALF_SNR_DB = {"bfloat16": 30.0, "float16": 45.0}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_half_precision_decode_stays_near_the_fp32_one(device, dtype):
    """``dtype=`` float16 or bfloat16 (SYNTH_CODEC_DTYPE) decodes the same codes to the same audio
    within its rounding, through the fused kernels."""
    from pipeline.engines.orpheus.codec.snac import SnacCodec

    tiny = device != "cuda"
    fp32 = SnacCodec(random_snac(tiny), device, fuse=True, dtype="float32")
    half = SnacCodec(random_snac(tiny), device, fuse=True, dtype=dtype)
    assert half.fused_units == fp32.fused_units > 0, half.fallbacks
    assert half.dtype == dtype and next(half.model.decoder.parameters()).dtype == getattr(torch, dtype)
    rng = np.random.default_rng(2)
    frames = rng.integers(0, 4096, size=(2, 3, 7))
    keys = rng.integers(0, 2**40, size=2)
    want, got = fp32.decode_windows(frames, keys), half.decode_windows(frames, keys)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert np.abs(want).max() > 0.01  # audio, not silence, to compare
    snr_db = 10 * np.log10(np.sum(want.astype(np.float64) ** 2) / np.sum((got - want).astype(np.float64) ** 2))
    assert np.isfinite(snr_db) and snr_db >= HALF_SNR_DB[dtype], snr_db  # finite: it ran in 16 bits


def test_an_unknown_codec_dtype_is_refused_by_name():
    from pipeline.engines.orpheus.codec.snac import SnacCodec

    with pytest.raises(ValueError, match="float8.*auto, float32, float16, bfloat16"):
        SnacCodec(random_snac(True), "cpu", dtype="float8")
