"""The codec's "auto" dtype: fp16 where the checkpoint passes a check at load, fp32 otherwise
(codec/snac.py ``SnacCodec._to_half_if_it_holds``). On CUDA "auto" runs the check at load; here
the check runs on the CPU, with the module's own ops, on the tiny SNAC."""

from __future__ import annotations

import numpy as np
import pytest
import torch


def tiny_snac(scale_first: float = 1.0):
    """The tiny random SNAC, its decoder's first convolution's weights times ``scale_first``."""
    from snac import SNAC

    from pipeline.engines.orpheus.tiny import TINY_SNAC

    torch.manual_seed(3)
    model = SNAC(**TINY_SNAC).eval()
    if scale_first != 1.0:
        first = next(m for m in model.decoder.modules() if isinstance(m, torch.nn.Conv1d))
        with torch.no_grad():
            first.weight.mul_(scale_first)  # the weight norm is folded at load: this weight stays
            if hasattr(first, "parametrizations"):
                first.parametrizations.weight.original0.mul_(scale_first)
    return model


def fp32_weights(codec) -> dict:
    return {k: v.detach().clone() for k, v in codec.model.state_dict().items()}


def test_a_checkpoint_that_holds_in_fp16_runs_in_fp16():
    from pipeline.engines.orpheus.codec.snac import HALF_HEADROOM, HALF_MIN_SNR_DB, SnacCodec

    codec = SnacCodec(tiny_snac(), "cpu", fuse=False, dtype="float32")
    codec._to_half_if_it_holds()
    check = codec.half_check
    assert codec.dtype == "float16" and not codec.fallbacks
    assert check["snr_db"] >= HALF_MIN_SNR_DB and check["headroom"] >= HALF_HEADROOM, check
    assert check["peak"] > 0.01  # it saw the activations
    assert next(codec.model.decoder.parameters()).dtype == torch.float16
    frames = np.random.default_rng(0).integers(0, 4096, size=(2, 3, 7))
    audio = codec.decode_windows(frames, np.arange(2))
    assert audio.dtype == np.float32 and np.isfinite(audio).all() and np.abs(audio).max() > 0.01


def test_a_checkpoint_whose_activations_near_fp16s_range_stays_fp32_with_its_own_weights():
    """Activations some 2,000x larger: the check refuses fp16, says why, and the weights are the
    checkpoint's fp32 ones again, not their fp16 roundings."""
    from pipeline.engines.orpheus.codec.snac import HALF_HEADROOM, SnacCodec

    codec = SnacCodec(tiny_snac(scale_first=3000.0), "cpu", fuse=False, dtype="float32")
    before = fp32_weights(codec)
    codec._to_half_if_it_holds()
    assert codec.dtype == "float32"
    assert codec.half_check["headroom"] < HALF_HEADROOM, codec.half_check
    assert len(codec.fallbacks) == 1 and "float16" in codec.fallbacks[0] and "largest value" in codec.fallbacks[0]
    after = fp32_weights(codec)
    assert after.keys() == before.keys()
    assert all(after[k].dtype == before[k].dtype and torch.equal(after[k], before[k]) for k in before)


def test_auto_is_fp32_on_the_cpu_without_a_check():
    from pipeline.engines.orpheus.codec.snac import SnacCodec

    codec = SnacCodec(tiny_snac(), "cpu", fuse=False, dtype="auto")
    assert codec.dtype == "float32" and codec.half_check is None and not codec.fallbacks


def test_a_check_that_fails_leaves_fp32_the_exact_weights_and_no_counts():
    """A check that raises (a kernel that will not compile in fp16, say): fp32, the checkpoint's
    own weights, one fallback naming the error, and the lanes' counters as they were."""
    from pipeline.engines.orpheus.codec.snac import SnacCodec

    codec = SnacCodec(tiny_snac(), "cpu", fuse=False, dtype="float32")
    before = fp32_weights(codec)
    real = codec._decode_eagerly
    calls = []

    def decode_then_fail(*args):
        calls.append(1)
        if len(calls) == 2:  # the fp16 pass
            raise RuntimeError("no fp16 kernel here")
        return real(*args)

    codec._decode_eagerly = decode_then_fail
    codec._to_half_if_it_holds()
    assert codec.dtype == "float32" and codec.half_check == {"error": "RuntimeError: no fp16 kernel here"}
    assert len(codec.fallbacks) == 1 and "no fp16 kernel here" in codec.fallbacks[0]
    assert codec.eager == {True: [0, 0], False: [0, 0]} and codec._keys.value is None
    after = fp32_weights(codec)
    assert all(after[k].dtype == before[k].dtype and torch.equal(after[k], before[k]) for k in before)


def test_the_check_sees_the_fused_units_inner_activation():
    """A fused residual unit's inner activation (its depthwise convolution's, between two Snakes)
    is no module's output: the check notes it too, so a checkpoint whose range breaks only there
    stays fp32."""
    from pipeline.engines.orpheus.codec.snac import HALF_HEADROOM, SnacCodec
    from pipeline.engines.orpheus.kernels.codec import FusedResidualUnit

    model = tiny_snac()
    codec = SnacCodec(model, "cpu", fuse=False, dtype="float32")
    from pipeline.engines.orpheus.kernels import codec as codec_kernels

    assert codec_kernels.fuse_codec(codec.model.decoder, use_triton=False) > 0  # the torch path
    unit = next(m for m in codec.model.modules() if isinstance(m, FusedResidualUnit))
    # the depthwise weights x 1e4, the pointwise ones / 1e4: the unit's output barely moves, the
    # inner activation grows past fp16's range
    unit.dw_w.mul_(1e4)
    unit.dw_b.mul_(1e4)
    unit.pw_w.div_(1e4)
    codec._to_half_if_it_holds()
    assert codec.dtype == "float32" and codec.half_check["headroom"] < HALF_HEADROOM, codec.half_check
    assert all(m.peaks is None for m in codec.model.modules() if isinstance(m, FusedResidualUnit))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="auto checks the checkpoint on CUDA only")
def test_auto_on_cuda_runs_fp16_through_the_fused_kernels_and_graphs():
    from pipeline.engines.orpheus.codec.snac import HALF_MIN_SNR_DB, SnacCodec
    from pipeline.engines.orpheus.engine import batch_windows, realtime_windows

    fp32 = SnacCodec(tiny_snac(), "cuda", dtype="float32")
    auto = SnacCodec(tiny_snac(), "cuda", dtype="auto")
    assert auto.dtype == "float16" and auto.fused_units > 0 and auto.fallbacks == [], auto.fallbacks
    assert auto.eager == {True: [0, 0], False: [0, 0]}
    assert next(auto.model.decoder.parameters()).dtype == torch.float16
    for codec in (fp32, auto):
        codec.capture_graphs(realtime_windows(), batch_windows(), codec.fallbacks)
    frames = np.random.default_rng(1).integers(0, 4096, size=(3, batch_windows()[-1], 7))
    want, got = (c.decode_windows(frames, np.arange(3)) for c in (fp32, auto))
    noise = np.sum((got - want).astype(np.float64) ** 2)
    assert noise > 0  # fp16 ran
    assert 10 * np.log10(np.sum(want.astype(np.float64) ** 2) / noise) >= HALF_MIN_SNR_DB
