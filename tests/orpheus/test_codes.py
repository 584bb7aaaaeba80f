"""Token ids -> SNAC levels: the layout, validation, and the counts of what was dropped."""

from __future__ import annotations

import numpy as np

from pipeline.engines.orpheus.codec.codes import FrameAssembler, frames_to_levels, tokens_to_frames
from pipeline.engines.orpheus.vocab import (
    AUDIO_TOKEN_BASE,
    END_OF_SPEECH,
    START_OF_AI,
    START_OF_SPEECH,
    audio_range,
)


def frame_tokens(codes):
    return [audio_range(p)[0] + c for p, c in enumerate(codes)]


def test_layout_matches_orpheus_ids():
    # <custom_token_10> is the first audio id; position p owns 4096 ids from 128266 + p * 4096.
    assert AUDIO_TOKEN_BASE == 128256 + 10
    assert audio_range(6) == (128266 + 6 * 4096, 128266 + 7 * 4096)


def test_frames_map_onto_three_levels():
    a = tokens_to_frames(frame_tokens([1, 2, 3, 4, 5, 6, 7]) + frame_tokens([11, 12, 13, 14, 15, 16, 17]))
    l0, l1, l2 = frames_to_levels(np.stack(a.frames))
    assert l0.tolist() == [1, 11]
    assert l1.tolist() == [2, 5, 12, 15]  # positions 1 and 4
    assert l2.tolist() == [3, 4, 6, 7, 13, 14, 16, 17]  # positions 2, 3, 5, 6


def test_out_of_range_and_misplaced_ids_drop_their_frame_and_are_counted():
    good = frame_tokens([0, 1, 2, 3, 4, 5, 4095])
    misplaced = frame_tokens([9] * 7)
    misplaced[3] = audio_range(0)[0] + 9  # a position-0 id at position 3
    out_of_range = frame_tokens([9] * 7)
    out_of_range[5] = 42  # a text id inside the audio stream
    a = tokens_to_frames(good + misplaced + out_of_range + good)
    assert len(a.frames) == 2 and a.dropped_frames == 2 and a.invalid_tokens == 2
    assert all(((f >= 0) & (f < 4096)).all() for f in a.frames)


def test_control_tokens_before_audio_are_skipped_and_eos_ends():
    a = FrameAssembler()
    a.feed_many([START_OF_AI, START_OF_SPEECH, *frame_tokens([5] * 7), END_OF_SPEECH, *frame_tokens([6] * 7)])
    assert len(a.frames) == 1 and a.ended and a.invalid_tokens == 0


def test_partial_last_frame_is_not_decoded():
    a = tokens_to_frames(frame_tokens([1] * 7) + frame_tokens([2] * 7)[:4])
    assert len(a.frames) == 1 and a.audio_tokens == 11


def test_a_control_token_after_audio_began_spoils_its_frame():
    a = tokens_to_frames(
        frame_tokens([1] * 7)
        + frame_tokens([2] * 3)
        + [START_OF_SPEECH]
        + frame_tokens([2] * 7)[4:]
        + frame_tokens([3] * 7)
    )
    assert [f[0] for f in a.frames] == [1, 3] and a.invalid_tokens == 1 and a.dropped_frames == 1
