"""The codec's own thread: turns the frames the loop produces into audio chunks for the callers.

The loop thread only appends frames and says when a sequence ended; this thread decodes what is
ready (realtime streams at once on the codec's high-priority CUDA stream, batch streams every
``batch_interval_s`` in calls of at most ``batch_slice`` streams, with the realtime streams looked at
again between them) and hands chunks and final chunks to each caller's queue. So the language
model's step never waits for the codec, the codec sees large batches, and a realtime chunk waits
for at most one slice of batch work.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque

import numpy as np

from pipeline.engines.base import AudioChunk
from pipeline.engines.orpheus.streaming import decode_ready
from pipeline.errors import EngineError

log = logging.getLogger(__name__)

TICK_S = 0.002


class CodecWorker:
    def __init__(self, codec, on_final, batch_interval_s: float = 0.05, batch_slice: int = 32):
        self.codec, self.on_final = codec, on_final
        self.batch_interval_s = batch_interval_s
        self.batch_slice = batch_slice
        self.first_chunks: deque = deque(maxlen=4096)   # realtime streams' FirstChunkMarks
        self._finalized: set[int] = set()   # streams sent their final chunk in this _decode
        # id -> Live, registered by the loop thread; realtime ones apart, so the ticks between
        # batch turns look at them alone, not at every stream in flight.
        self.realtime: dict[int, object] = {}
        self.batch: dict[int, object] = {}
        self.ended: queue.SimpleQueue = queue.SimpleQueue()
        self.calls = 0
        self.busy_s = 0.0
        self._last_batch = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="orpheus-codec", daemon=True)
        self._thread.start()

    def register(self, live) -> None:
        (self.realtime if live.seq.realtime else self.batch)[id(live)] = live

    def finish(self, live) -> None:
        """The sequence ended (its frames are complete): flush it and send its final chunk."""
        self.ended.put(live)

    def drop(self, live) -> None:
        self.realtime.pop(id(live), None)
        self.batch.pop(id(live), None)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            final = []
            try:
                final.append(self.ended.get(timeout=TICK_S))
                while True:
                    final.append(self.ended.get_nowait())
            except queue.Empty:
                pass
            started = time.perf_counter()
            try:
                self._decode(final)
            except Exception as e:  # noqa: BLE001 - the streams in this call fail, loudly
                log.exception("codec decode failed")
                self._fail(final, e)
            self.busy_s += time.perf_counter() - started

    def _decode(self, final: list) -> None:
        self._finalized = set()
        now = time.perf_counter()
        batch_turn = now - self._last_batch >= self.batch_interval_s
        if batch_turn:
            self._last_batch = now
        ended = {id(lv): lv for lv in final}
        # Realtime streams first, in their own codec calls, and their chunks leave before the
        # batch streams' (larger) windows are even started.
        realtime = dict(self.realtime)
        realtime.update({k: lv for k, lv in ended.items() if lv.seq.realtime})
        # Streams still waiting for their first chunk go in the first call: a listener is waiting
        # on them; the others have audio in hand.
        first = {k: lv for k, lv in realtime.items() if lv.marks.first_chunk_at is None}
        self._render(first, ended, urgent=True)
        self._render({k: lv for k, lv in realtime.items() if k not in first}, ended, urgent=True)
        batch = dict(self.batch) if batch_turn else {}
        batch.update({k: lv for k, lv in ended.items() if not lv.seq.realtime})
        batch = list(batch.items())     # each stream once: an ended one gets one final chunk
        for i in range(0, len(batch), self.batch_slice):
            self._render(dict(batch[i:i + self.batch_slice]), ended)
            if self.realtime and i + self.batch_slice < len(batch):
                self._render(dict(self.realtime), ended, urgent=True)

    def _render(self, todo: dict, ended: dict, urgent: bool = False) -> None:
        if not todo:
            return
        audio = decode_ready(self.codec, {k: lv.stream for k, lv in todo.items()}, set(ended),
                             urgent)
        self.calls += bool(audio)
        for k, pcm in audio.items():
            if k not in ended:
                lv = todo[k]
                if lv.marks.first_chunk_at is None:
                    lv.marks.first_chunk_at = time.monotonic()
                    if lv.seq.realtime:
                        self.first_chunks.append(lv.marks)
                lv.sink.put(AudioChunk(lv.key, pcm, False))
        for k, lv in todo.items():
            if k in ended and k not in self._finalized:
                self.drop(lv)
                self._finalized.add(k)
                lv.sink.put(self.on_final(lv, audio.get(k)))

    def _fail(self, final: list, error: Exception) -> None:
        err = EngineError(f"codec failed: {type(error).__name__}: {error}")
        err.__cause__ = error
        for lv in final:
            if id(lv) in self._finalized:
                continue            # its final chunk went out before the failing call
            self.drop(lv)
            lv.sink.put(AudioChunk(lv.key, np.zeros(0, np.float32), True, err))
