"""The windowed decoder: early first chunk, steady chunks, flush, and equality with a one-shot decode
(the same windows and noise keys; only the codec's batch size differs, so fp32 rounding is allowed)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.constants import SNAC_SAMPLES_PER_FRAME
from pipeline.engines.orpheus.streaming import (
    STEADY_CHUNK_FRAMES,
    WINDOW_FRAMES,
    StreamState,
    decode_frames,
    decode_ready,
)


def random_frames(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 4096, size=7) for _ in range(n)]


def stream(codec, frames, seed=7):
    """Feed frames one at a time as generation would; return the chunks in order."""
    st = StreamState(seed=seed)
    chunks = []
    for i, f in enumerate(frames):
        st.assembler.frames.append(f)
        out = decode_ready(codec, {"k": st}, finished=set())
        if "k" in out:
            chunks.append((i + 1, out["k"]))
    out = decode_ready(codec, {"k": st}, finished={"k"})
    if "k" in out:
        chunks.append((len(frames), out["k"]))
    return chunks


@pytest.mark.parametrize("n", [1, 3, 4, 5, 13, 30])
def test_streamed_chunks_concatenate_to_the_one_shot_decode(tiny, n):
    frames = random_frames(n, seed=n)
    chunks = stream(tiny.codec, frames)
    streamed = np.concatenate([c for _, c in chunks])
    assert streamed.shape == (n * SNAC_SAMPLES_PER_FRAME,)        # the last frames are flushed
    # Same windows, same keys: equal up to fp32 rounding of convolutions run at other batch sizes.
    np.testing.assert_allclose(streamed, decode_frames(tiny.codec, frames, seed=7), rtol=0, atol=1e-6)


def test_first_chunk_after_one_window_then_steady_chunks(tiny):
    chunks = stream(tiny.codec, random_frames(30))
    frames_seen, first = chunks[0]
    assert frames_seen == WINDOW_FRAMES                            # 28 tokens
    assert len(first) == 2 * SNAC_SAMPLES_PER_FRAME                # frames 0 and 1
    steady = [len(c) // SNAC_SAMPLES_PER_FRAME for _, c in chunks[1:-1]]
    assert steady and all(s == STEADY_CHUNK_FRAMES for s in steady)


def test_codec_noise_is_keyed_not_global(tiny):
    frames = random_frames(6)
    a = decode_frames(tiny.codec, frames, seed=1)
    b = decode_frames(tiny.codec, frames, seed=1)
    c = decode_frames(tiny.codec, frames, seed=2)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert tiny.codec.keyed_noise_blocks == 4                      # one per decoder block
