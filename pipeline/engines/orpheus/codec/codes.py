"""LM tokens -> SNAC codes: validation per frame position and the mapping onto SNAC's three levels.

A frame is 7 tokens in the order L0, L1, L2, L2, L1, L2, L2 (ANCHORS.md; canopyai decoder.py). Token
``t`` at position ``p`` holds code ``t - AUDIO_TOKEN_BASE - p * 4096``, valid in [0, 4096). A token out
of its position's range (or any non-audio token after audio began) spoils its frame: the frame is
dropped, counted, and never reaches the decoder, so a bad id cannot crash the codec.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipeline.constants import SNAC_TOKENS_PER_FRAME
from pipeline.engines.orpheus.vocab import (
    AUDIO_TOKEN_BASE,
    CONTROL_TOKENS,
    END_OF_SPEECH,
    SNAC_CODEBOOK_SIZE,
)

L1_POSITIONS = (1, 4)
L2_POSITIONS = (2, 3, 5, 6)


@dataclass
class FrameAssembler:
    """Per-request state: turns the generated token stream into validated frames of 7 codes."""

    frames: list[np.ndarray] = field(default_factory=list)  # each [7] int64 codes
    invalid_tokens: int = 0
    dropped_frames: int = 0
    ended: bool = False  # END_OF_SPEECH seen
    _partial: list[int] = field(default_factory=list)
    _spoiled: bool = False

    @property
    def audio_tokens(self) -> int:
        return len(self.frames) * SNAC_TOKENS_PER_FRAME + len(self._partial)

    def feed(self, token: int) -> None:
        partial = self._partial
        code = token - AUDIO_TOKEN_BASE - len(partial) * SNAC_CODEBOOK_SIZE
        # End-of-speech and the control tokens sit below the audio codes, so a code in its
        # position's range (the common case, tested first) is none of them.
        if self.ended or not 0 <= code < SNAC_CODEBOOK_SIZE:
            if self.ended:
                return
            if token == END_OF_SPEECH:
                self.ended = True
                return
            if token in CONTROL_TOKENS and not self.frames and not partial:
                return  # the model's own START_OF_AI / START_OF_SPEECH before audio: expected
            self.invalid_tokens += 1
            self._spoiled = True
            code = 0
        partial.append(code)
        if len(partial) == SNAC_TOKENS_PER_FRAME:
            if self._spoiled:
                self.dropped_frames += 1
            else:
                self.frames.append(np.asarray(partial, dtype=np.int64))
            self._partial, self._spoiled = [], False

    def feed_many(self, tokens) -> None:
        for token in tokens:
            self.feed(int(token))


def frames_to_levels(frames: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[..., n, 7] codes -> SNAC levels ([..., n], [..., 2n], [..., 4n])."""
    lead = frames.shape[:-2]
    l0 = frames[..., 0]
    l1 = frames[..., list(L1_POSITIONS)].reshape(*lead, -1)
    l2 = frames[..., list(L2_POSITIONS)].reshape(*lead, -1)
    return l0, l1, l2


def tokens_to_frames(tokens) -> FrameAssembler:
    """Assemble a whole token sequence at once (the non-streamed path and the tests)."""
    assembler = FrameAssembler()
    assembler.feed_many(tokens)
    return assembler
