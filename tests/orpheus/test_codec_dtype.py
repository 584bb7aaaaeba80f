"""The codec's "auto" dtype: fp16 where the checkpoint passes a check at load, fp32 otherwise
(codec/snac.py ``SnacCodec._to_half_if_it_holds``). On CUDA "auto" runs the check at load; here
the check runs on the CPU, with the module's own ops, on the tiny SNAC."""

from __future__ import annotations

import numpy as np
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
