"""The windowed decoder: early first chunk, steady chunks, flush, and equality with a one-shot decode
(the same windows and noise keys; only the codec's batch size differs, so fp32 rounding is allowed)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.constants import SNAC_SAMPLES_PER_FRAME
from pipeline.engines.orpheus.codec.streaming import (
    BATCH_CHUNK_FRAMES,
    FIRST_CHUNK_FRAMES,
    REALTIME_CHUNK_FRAMES,
    RIGHT_CONTEXT_FRAMES,
    StreamState,
    decode_frames,
    decode_ready,
)


def random_frames(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 4096, size=7) for _ in range(n)]


def stream(
    codec, frames, seed=7, chunk_frames=REALTIME_CHUNK_FRAMES, every=1, ramp=False, first_right=RIGHT_CONTEXT_FRAMES
):
    """Feed frames one at a time as generation would, decoding every ``every`` frames; return the
    chunks in order."""
    st = StreamState(seed=seed, chunk_frames=chunk_frames, ramp=ramp, first_right=first_right)
    chunks = []
    for i, f in enumerate(frames):
        st.assembler.frames.append(f)
        if (i + 1) % every:
            continue
        out = decode_ready(codec, {"k": st}, finished=set())
        if "k" in out:
            chunks.append((i + 1, out["k"]))
    out = decode_ready(codec, {"k": st}, finished={"k"})
    if "k" in out:
        chunks.append((len(frames), out["k"]))
    return chunks


@pytest.mark.parametrize("n", [1, 3, 4, 5, 13, 30])
@pytest.mark.parametrize(
    "chunk_frames,every,ramp,first_right",
    [
        (REALTIME_CHUNK_FRAMES, 1, False, 2),
        (REALTIME_CHUNK_FRAMES, 1, True, 2),
        (REALTIME_CHUNK_FRAMES, 1, True, 1),
        (BATCH_CHUNK_FRAMES, 5, False, 2),
    ],
)
def test_streamed_chunks_concatenate_to_the_one_shot_decode(tiny, n, chunk_frames, every, ramp, first_right):
    frames = random_frames(n, seed=n)
    chunks = stream(tiny.codec, frames, chunk_frames=chunk_frames, every=every, ramp=ramp, first_right=first_right)
    streamed = np.concatenate([c for _, c in chunks])
    assert streamed.shape == (n * SNAC_SAMPLES_PER_FRAME,)  # the last frames are flushed
    # Same windows, same keys, whenever the decode ran: equal up to fp32 rounding of
    # convolutions run at other batch sizes.
    one_shot = decode_frames(tiny.codec, frames, seed=7, chunk_frames=chunk_frames, ramp=ramp, first_right=first_right)
    np.testing.assert_allclose(streamed, one_shot, rtol=0, atol=1e-6)


def test_first_chunk_after_one_window_then_steady_chunks(tiny):
    chunks = stream(tiny.codec, random_frames(30))
    frames_seen, first = chunks[0]
    assert frames_seen == FIRST_CHUNK_FRAMES + RIGHT_CONTEXT_FRAMES == 4  # 28 tokens
    assert len(first) == 2 * SNAC_SAMPLES_PER_FRAME  # frames 0 and 1
    steady = [len(c) // SNAC_SAMPLES_PER_FRAME for _, c in chunks[1:-1]]
    assert steady and all(s == REALTIME_CHUNK_FRAMES for s in steady)
    # a chunk leaves as soon as its right context exists
    assert [seen for seen, _ in chunks[1:-1]] == [8, 12, 16, 20, 24, 28]


def test_realtime_ramp_first_chunk_after_three_frames_then_growing(tiny):
    chunks = stream(tiny.codec, random_frames(30), ramp=True)
    frames_seen, first = chunks[0]
    assert frames_seen == 1 + RIGHT_CONTEXT_FRAMES == 3  # 21 tokens
    assert len(first) == SNAC_SAMPLES_PER_FRAME
    sizes = [len(c) // SNAC_SAMPLES_PER_FRAME for _, c in chunks[1:-1]]
    assert sizes == [1, 1, 1, 2, 2, 3, 3, 4, 4, 4]


def late_chunks(ramp: bool, s: float, frames: int = 120, first_right: int = RIGHT_CONTEXT_FRAMES) -> int:
    """Chunks that leave after the listener ran out, generating at real-time factor ``s``: frame
    n exists at time n*s (in frame durations); playback starts when the first chunk leaves."""
    st = StreamState(seed=0, chunk_frames=REALTIME_CHUNK_FRAMES, ramp=ramp, first_right=first_right)
    chunks, a = [], 0
    while a < frames:
        b = st._chunk_end(a)
        chunks.append((a, b, st._right(a)))  # a chunk leaves once frame b + right exists
        a = b
    (_, b0, r0), rest = chunks[0], chunks[1:]
    start = (b0 + r0) * s
    return sum((b + r) * s > start + a + 1e-9 for a, b, r in rest)


def test_the_ramp_plays_without_underruns_up_to_a_real_time_factor_of_0_8():
    assert late_chunks(ramp=True, s=0.8) == 0
    assert late_chunks(ramp=False, s=0.8) > 0  # the fixed grid runs dry at chunk 1
    assert late_chunks(ramp=False, s=0.5) == 0


def test_one_frame_of_first_lookahead_leaves_after_14_tokens_and_plays_on_at_0_8(tiny):
    """The low-latency first chunk: out after 2 frames. The chunks to frame 4 keep 1 frame of
    right context, then 2 with chunks a frame smaller than the ramp's, so a stream generated at
    0.8x real time never runs dry (with 2 frames from the second chunk on, it needed 0.5x)."""
    chunks = stream(tiny.codec, random_frames(30), ramp=True, first_right=1)
    assert chunks[0][0] == 2 and len(chunks[0][1]) == SNAC_SAMPLES_PER_FRAME
    assert [seen for seen, _ in chunks[1:6]] == [3, 4, 5, 7, 8]
    sizes = [len(c) // SNAC_SAMPLES_PER_FRAME for _, c in chunks[1:-1]]
    assert sizes[:9] == [1, 1, 1, 1, 1, 1, 1, 2, 2]
    assert late_chunks(ramp=True, s=0.8, first_right=1) == 0
    assert late_chunks(ramp=True, s=0.85, first_right=1) > 0


def test_folding_the_weight_norms_leaves_the_audio_as_it_was(tiny_dir):
    """The codec computes its weight-normed weights once at load: the audio equals SNAC's own,
    which recomputes them every call."""
    import torch
    from snac import SNAC

    from pipeline.engines.orpheus.codec.snac import SnacCodec

    folded = SnacCodec(SNAC.from_pretrained(str(tiny_dir / "snac")), "cpu")
    assert folded.folded_weight_norms > 0
    assert not any(torch.nn.utils.parametrize.is_parametrized(m) for m in folded.model.modules())
    kept = SnacCodec(SNAC.from_pretrained(str(tiny_dir / "snac")), "cpu", fold=False)
    assert kept.folded_weight_norms == 0
    frames = random_frames(6)
    np.testing.assert_array_equal(decode_frames(folded, frames, seed=3), decode_frames(kept, frames, seed=3))


def test_codec_noise_is_keyed_not_global(tiny):
    frames = random_frames(6)
    a = decode_frames(tiny.codec, frames, seed=1)
    b = decode_frames(tiny.codec, frames, seed=1)
    c = decode_frames(tiny.codec, frames, seed=2)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert tiny.codec.keyed_noise_blocks == 4  # one per decoder block


def test_window_keys_are_the_device_hash_computed_on_the_host():
    """mix_keys runs in plain Python (the codec thread keys every window); its value is the
    device hash's, so keys stay what they were: the torch hash32 of the same words."""
    import random

    import torch

    from pipeline.engines.orpheus import rng

    r = random.Random(3)
    for _ in range(300):
        seed, salt = r.randrange(2**63), r.randrange(2**32)
        words = torch.tensor([(seed & rng.MASK32) ^ ((seed >> 32) & rng.MASK32)])
        x = rng.hash32(words)
        want = rng.hash32((x + salt * rng._GOLDEN) & rng.MASK32)
        assert (
            rng.mix_keys(seed, salt)
            == int(want)
            == rng.hash32_int((rng.hash32_int(int(words)) + salt * rng._GOLDEN) & rng.MASK32)
        )


@pytest.mark.parametrize(
    "n,ramp,want",
    [
        # batch: 40 frames; the chunk [32, 40) renders from [21, 40), a full 19-frame window
        (40, False, [(0, 2, 0, 4), (2, 18, 1, 20), (18, 34, 17, 36), (34, 40, 21, 40)]),
        # batch: too short for a full window, so the window starts at the stream's first frame
        (7, False, [(0, 2, 0, 4), (2, 7, 0, 7)]),
        # realtime: the last chunk reaches back to the realtime chunk's 7-frame window
        (
            12,
            True,
            [
                (0, 1, 0, 3),
                (1, 2, 0, 4),
                (2, 3, 1, 5),
                (3, 4, 2, 6),
                (4, 6, 3, 8),
                (6, 8, 5, 10),
                (8, 11, 5, 12),
                (11, 12, 5, 12),
            ],
        ),
    ],
)
def test_the_last_chunk_renders_from_a_full_window_where_the_stream_has_the_frames(n, ramp, want):
    chunk_frames = REALTIME_CHUNK_FRAMES if ramp else BATCH_CHUNK_FRAMES
    st = StreamState(seed=1, chunk_frames=chunk_frames, ramp=ramp)
    st.assembler.frames.extend(random_frames(n))
    got = st.ready_chunks(finished=True)
    assert got == want
    full = chunk_frames + 3
    assert all(e - s == min(full, n) for _a, _b, s, e in got if e == n)  # the flushed ones


def test_an_eager_decode_of_many_windows_goes_in_calls_of_a_bounded_size(tiny, monkeypatch):
    """A lane's round may hold hundreds of windows with no graph for them (the CPU, a failed
    capture): the module's decode takes them a bounded number at a time, with the same audio."""
    from pipeline.engines.orpheus.codec import snac

    rng = np.random.default_rng(6)
    frames, keys = rng.integers(0, 4096, size=(5, 3, 7)), np.arange(5) * 7
    whole = tiny.codec.decode_windows(frames, keys)
    calls = tiny.codec.eager[False][0]
    monkeypatch.setattr(snac, "EAGER_WINDOWS", 2)
    sliced = tiny.codec.decode_windows(frames, keys)
    assert tiny.codec.eager[False][0] - calls == 3  # 2 + 2 + 1
    np.testing.assert_allclose(sliced, whole, rtol=0, atol=1e-6)
