"""Streaming decode with an overlapping window, as Orpheus' decoders do, with an early first chunk
and a flush.

Frame ``j`` is rendered from a window of ``WINDOW_FRAMES`` frames starting at
``window_start(j, n)``: one frame of left context and two of right context where they exist (canopyai
decodes the last 4 frames and keeps the second). The first window [0, 4) renders frames 0 and 1, so
the first chunk leaves after 4 frames (28 tokens, 341 ms of audio generated, 171 ms delivered); later
frames are ready one per new frame and are sent in steady chunks. At the end the last frames use the
last full window. Streaming and the one-shot ``decode_frames`` share ``window_start``, and a window's
audio depends only on its codes and key (codec.py), so the streamed chunks concatenate to exactly the
one-shot audio.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from pipeline.constants import SNAC_SAMPLES_PER_FRAME
from pipeline.engines.orpheus.codes import FrameAssembler
from pipeline.engines.orpheus.rng import mix_keys

WINDOW_FRAMES = 4          # frames per codec window
LEFT_CONTEXT_FRAMES = 1    # frames of context before the rendered frame
STEADY_CHUNK_FRAMES = 4    # frames per chunk after the first (341 ms of audio)


def window_start(j: int, n: int) -> int:
    """The first frame of the window that renders frame ``j`` of a stream of ``n`` known frames."""
    return min(max(j - LEFT_CONTEXT_FRAMES, 0), max(n - WINDOW_FRAMES, 0))


@dataclass
class StreamState:
    """One request's position in the stream: frames arrive, chunks of audio leave."""

    seed: int
    assembler: FrameAssembler = field(default_factory=FrameAssembler)
    emitted: int = 0        # frames already sent
    chunks: int = 0

    def ready_frames(self, finished: bool) -> range:
        n = len(self.assembler.frames)
        if finished:
            return range(self.emitted, n)
        last = n - WINDOW_FRAMES + LEFT_CONTEXT_FRAMES  # frames whose full window exists
        if n < WINDOW_FRAMES:
            last = -1
        ready = range(self.emitted, max(last + 1, self.emitted))
        wanted = 1 if self.chunks == 0 else STEADY_CHUNK_FRAMES
        return ready if len(ready) >= wanted else range(self.emitted, self.emitted)

    def window_key(self, start: int) -> int:
        return mix_keys(self.seed, start)


def decode_ready(codec, streams: dict, finished: set) -> dict:
    """Render every ready frame of every stream in as few codec calls as there are window lengths.

    ``streams`` maps key -> StreamState; keys in ``finished`` are flushed. Returns key -> audio for
    streams that produced a chunk, and advances their ``emitted``/``chunks``.
    """
    plan: dict[int, dict] = defaultdict(dict)        # window length -> {(key, start): frames}
    wanted: dict = {}                                # key -> [(j, window length, start)]
    for key, st in streams.items():
        ready = st.ready_frames(key in finished)
        if not ready:
            continue
        n = len(st.assembler.frames)
        for j in ready:
            s = window_start(j, n)
            w = min(WINDOW_FRAMES, n)
            plan[w][(key, s)] = None
            wanted.setdefault(key, []).append((j, w, s))
    rendered = {}
    for w, windows in plan.items():
        ids = list(windows)
        frames = np.stack([np.stack(streams[k].assembler.frames[s : s + w]) for k, s in ids])
        keys = np.array([streams[k].window_key(s) for k, s in ids], dtype=np.int64)
        audio = codec.decode_windows(frames, keys)    # [G, w * 2048]
        rendered.update({ident: audio[i] for i, ident in enumerate(ids)})
    out = {}
    for key, frames in wanted.items():
        pieces = [_frame_slice(rendered[(key, s)], j - s) for j, _w, s in frames]
        out[key] = np.concatenate(pieces)
        streams[key].emitted = frames[-1][0] + 1
        streams[key].chunks += 1
    return out


def _frame_slice(window_audio: np.ndarray, offset: int) -> np.ndarray:
    return window_audio[offset * SNAC_SAMPLES_PER_FRAME : (offset + 1) * SNAC_SAMPLES_PER_FRAME]


def decode_frames(codec, frames: list[np.ndarray], seed: int) -> np.ndarray:
    """The one-shot (non-streamed) decode of a whole stream: same windows, one call per length."""
    st = StreamState(seed=seed, assembler=FrameAssembler(frames=list(frames)))
    if not frames:
        return np.zeros(0, dtype=np.float32)
    return decode_ready(codec, {0: st}, finished={0})[0]
