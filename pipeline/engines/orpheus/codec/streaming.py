"""Streaming decode: a stream's frames are cut on a fixed grid of chunks, and each chunk is rendered
from one codec window with context on both sides.

Chunk 0 is frames ``[0, FIRST_CHUNK_FRAMES)``; after it, chunks of ``chunk_frames`` frames (4 for
realtime streams: 341 ms of audio; 16 for batch work, where latency does not matter and bigger
windows waste less). Chunk ``[a, b)`` is rendered from the window ``[a - 1, b + 2)`` (one frame of
left context, two of right, as canopyai's decoder uses), clipped to the stream, and leaves as soon
as frame ``b + 1`` exists. The first chunk therefore leaves after 4 frames (28 tokens). When the
stream ends, the rest is rendered with what there is, from a window that reaches back as far as a
full chunk's window is long (``c + 3`` frames, where the stream has them): the last chunk gets more
left context, and decodes in a window length the codec has CUDA graphs for (graphs.py) instead of
an eager call of its own odd length, whose every kernel is launched from the host. A window's
audio depends only on its codes and its key (snac.py), and the grid and windows depend only on the
frames, never on when the decode ran, so the streamed chunks concatenate to exactly the one-shot
``decode_frames``.

A window of ``c + 3`` frames renders ``c`` frames: 1.19x the frames for batch chunks, 1.75x for
realtime ones (one window per frame would be 4x).

Realtime streams (``ramp``) start smaller and grow: the first chunk is 1 frame (out after 3 frames,
21 tokens), then chunk sizes ``1 + b // 4`` up to 4, where ``b`` is the frames already sent. Why:
chunk k, ending at frame ``b_k``, leaves when frame ``b_k + 2`` exists; by then the listener has
played from the first chunk on. Generating at real-time factor ``s`` (time per frame over a frame's
duration), chunk k is on time while ``c_k <= b_0 + b_(k-1) * (1/s - 1)``; at s = 0.8 that is
``1 + b/4``. A fixed 4-frame grid after a 2-frame first chunk runs dry at chunk 1 for any s > 0.5.

A realtime stream may also take less right context for its first chunk (``first_right``: 1 frame
instead of 2), so it leaves after 14 tokens instead of 21. The price: the end of that first frame is
rendered without the codes two frames ahead, which SNAC's decoder convolutions reach, so its last
samples differ a little from a decode that had them. Playback then starts a frame earlier, so the
stream has one frame less in hand: with the ramp above, the second chunk would need frame 4 by the
time frame 1 has played, which takes 0.5x real time or faster. So such a stream keeps 1 frame of
right context for its chunks up to frame ``LOW_RIGHT_FRAMES`` (4), and from there takes 2 frames
with chunks one frame smaller than the ramp's (``b // 4``, at least 1): chunk ``[a, a + c)`` with
right context ``r`` is on time while ``(a + c + r - 2) * s <= a``, which holds at s = 0.8 for
every chunk. The first 4 frames' ends differ a little, as the first one's does.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from pipeline.constants import SNAC_SAMPLES_PER_FRAME
from pipeline.engines.orpheus.codec.codes import FrameAssembler
from pipeline.engines.orpheus.rng import mix_keys

FIRST_CHUNK_FRAMES = 2  # the first chunk: 171 ms of audio, out after 4 frames (28 tokens)
LEFT_CONTEXT_FRAMES = 1
RIGHT_CONTEXT_FRAMES = 2
REALTIME_CHUNK_FRAMES = 4  # 341 ms of audio per chunk
BATCH_CHUNK_FRAMES = 16
RAMP_FIRST_FRAMES = 1  # realtime: the first chunk, out after 3 frames (21 tokens)
RAMP_DIVISOR = 4  # realtime: chunk size 1 + (frames sent) // 4, up to chunk_frames
LOW_RIGHT_FRAMES = 4  # first_right < 2: chunks starting before this frame keep that context


@dataclass
class StreamState:
    """One request's position in the stream: frames arrive, chunks of audio leave."""

    seed: int
    chunk_frames: int = REALTIME_CHUNK_FRAMES
    assembler: FrameAssembler = field(default_factory=FrameAssembler)
    emitted: int = 0  # frames already sent (always a chunk boundary)
    chunks: int = 0
    ramp: bool = False  # realtime: small first chunks, growing (see the module's text)
    first_right: int = RIGHT_CONTEXT_FRAMES  # right context of the first chunk

    @property
    def first_ready_frames(self) -> int:
        """Frames that must exist before the first chunk can leave."""
        return self._chunk_end(0) + self.first_right

    def _chunk_end(self, start: int) -> int:
        if self.ramp:
            if start == 0:
                return RAMP_FIRST_FRAMES
            size = 1 + start // RAMP_DIVISOR
            if self._low_start() and start >= LOW_RIGHT_FRAMES:  # a frame less in hand
                size = max(1, size - 1)
            return start + min(self.chunk_frames, size)
        return FIRST_CHUNK_FRAMES if start == 0 else start + self.chunk_frames

    def _low_start(self) -> bool:
        """A realtime stream whose first chunk took less right context (see the module's text)."""
        return self.ramp and self.first_right < RIGHT_CONTEXT_FRAMES

    def _right(self, start: int) -> int:
        """Frames of right context of the chunk that starts at frame ``start``."""
        if start == 0 or (self._low_start() and start < LOW_RIGHT_FRAMES):
            return self.first_right
        return RIGHT_CONTEXT_FRAMES

    def ready_chunks(self, finished: bool) -> list[tuple[int, int, int, int]]:
        """(first frame, end frame, window start, window end) of every chunk that can leave."""
        n = len(self.assembler.frames)
        out, a = [], self.emitted
        while a < n:
            b = self._chunk_end(a)
            right = self._right(a)
            if b + right <= n:
                out.append((a, b, max(a - LEFT_CONTEXT_FRAMES, 0), b + right))
            elif finished:
                b = min(b, n)
                out.append((a, b, self._final_start(a, n), n))
            else:
                break
            a = b
        return out

    def _final_start(self, a: int, n: int) -> int:
        """Where the window of a flushed chunk from frame ``a`` starts: as far left as makes it a
        full chunk's window (more left context, and a window length the codec has graphs for)."""
        full = self.chunk_frames + LEFT_CONTEXT_FRAMES + RIGHT_CONTEXT_FRAMES
        return max(0, min(a - LEFT_CONTEXT_FRAMES, n - full))

    def window_key(self, start: int) -> int:
        return mix_keys(self.seed, start)


def decode_ready(codec, streams: dict, finished: set, urgent: bool = False, stats=None) -> dict:
    """Render every ready chunk of every stream, in one codec call per window length.

    ``streams`` maps key -> StreamState; keys in ``finished`` are flushed. Returns key -> audio for
    streams that produced audio, and advances their ``emitted``/``chunks``. ``urgent``: the codec's
    realtime lane (its high-priority stream and graphs). ``stats`` (thread.LaneStats):
    counts the calls, windows and window frames.
    """
    plan: dict[int, list] = defaultdict(list)  # window length -> [(key, chunk)]
    for key, st in streams.items():
        for chunk in st.ready_chunks(key in finished):
            plan[chunk[3] - chunk[2]].append((key, chunk))
    pieces: dict = defaultdict(list)
    for w, items in plan.items():
        frames = np.stack([np.stack(streams[k].assembler.frames[s:e]) for k, (_a, _b, s, e) in items])
        keys = np.array([streams[k].window_key(s) for k, (_a, _b, s, _e) in items], dtype=np.int64)
        audio = codec.decode_windows(frames, keys, urgent)  # [G, w * 2048]
        if stats is not None:
            stats.calls += 1
            stats.windows += len(items)
            stats.frames += len(items) * w
        for i, (key, (a, b, s, _e)) in enumerate(items):
            pieces[key].append((a, audio[i, (a - s) * SNAC_SAMPLES_PER_FRAME : (b - s) * SNAC_SAMPLES_PER_FRAME]))
    out = {}
    for key, parts in pieces.items():
        parts.sort(key=lambda p: p[0])
        out[key] = np.concatenate([p for _a, p in parts])
        st = streams[key]
        st.emitted = parts[-1][0] + len(parts[-1][1]) // SNAC_SAMPLES_PER_FRAME
        st.chunks += len(parts)
    return out


def decode_frames(
    codec,
    frames: list[np.ndarray],
    seed: int,
    chunk_frames: int = REALTIME_CHUNK_FRAMES,
    ramp: bool = False,
    first_right: int = RIGHT_CONTEXT_FRAMES,
) -> np.ndarray:
    """The one-shot (non-streamed) decode of a whole stream: the same chunks and windows."""
    st = StreamState(
        seed=seed,
        chunk_frames=chunk_frames,
        assembler=FrameAssembler(frames=list(frames)),
        ramp=ramp,
        first_right=first_right,
    )
    if not frames:
        return np.zeros(0, dtype=np.float32)
    return decode_ready(codec, {0: st}, finished={0})[0]
