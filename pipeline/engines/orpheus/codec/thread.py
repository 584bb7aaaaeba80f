"""The codec's threads: they turn the frames the loop produces into audio chunks for the callers.

The loop thread only appends frames and says when a sequence ended; two lanes, each a thread of
its own, decode what is ready and hand chunks and final chunks to each caller's queue:

- the realtime lane wakes as soon as the loop has fed a step's tokens (``frames_fed``), renders the
  streams still waiting for their first chunk in one call per window length, then the others, on
  the codec's high-priority CUDA stream;
- the batch lane renders batch streams every ``batch_interval_s``, the ended ones with them, all
  in one call per window length (``batch_slice`` streams a call, if given), on the codec's
  normal-priority stream.

So the language model's step never waits for the codec, batch windows come in large calls, and a
realtime chunk never waits on the host for a batch slice to finish: with one thread for both, a
stream's first chunk waited in the codec behind batch slices once many streams ran beside batch
work. Each lane replays its own codec graphs
(snac.py), so the two never share static buffers.

The batch lane takes all its streams in one call, and its ended streams wait for its next round:
a codec call costs about 0.7 ms beside 0.62 ms a 16-frame chunk's window (graphs.py), and a round
finds only a few chunks ready among hundreds of streams. In slices of 32 streams, with each ended
stream flushed in a call of its own, the batch workload on an H200 took 1,149 calls of 4.5 windows;
now 218 of 23.5.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.engines.base import AudioChunk
from pipeline.engines.orpheus.codec.streaming import decode_ready
from pipeline.errors import EngineError

log = logging.getLogger(__name__)

TICK_S = 0.002
SLOW_ROUND_S = 0.03  # a round longer than this is kept in LaneStats.slow_rounds


@dataclass
class LaneStats:
    calls: int = 0  # codec calls that rendered audio
    windows: int = 0  # windows rendered
    frames: int = 0  # frames of those windows (context included)
    busy_s: float = 0.0  # wall time in rendering (the device's time included)
    # the slow rounds, newest last: (time.monotonic at the start, seconds, windows rendered)
    slow_rounds: deque = field(default_factory=lambda: deque(maxlen=256))


class _Lane:
    """One thread's streams (id -> InFlight), its ended streams and its counters."""

    def __init__(self, name: str, urgent: bool):
        self.name, self.urgent = name, urgent
        self.streams: dict[int, Any] = {}  # serving/loop.py's InFlight (that module imports this one)
        self.ended: queue.SimpleQueue = queue.SimpleQueue()
        self.stats = LaneStats()
        self.finalized: set[int] = set()  # streams sent their final chunk in this round
        self.held: list = []  # the batch lane's ended streams, waiting for its next round

    def take_ended(self, timeout: float) -> list:
        final = []
        try:
            final.append(self.ended.get(timeout=timeout) if timeout else self.ended.get_nowait())
            while True:
                final.append(self.ended.get_nowait())
        except queue.Empty:
            pass
        return final


class CodecThread:
    def __init__(self, codec, on_final, batch_interval_s: float = 0.05, batch_slice: int | None = None):
        self.codec, self.on_final = codec, on_final
        self.batch_interval_s = batch_interval_s
        self.batch_slice = batch_slice
        self.first_chunks: deque = deque(maxlen=4096)  # realtime streams' FirstChunkMarks
        self.lanes = {True: _Lane("realtime", urgent=True), False: _Lane("batch", urgent=False)}
        self._fed = threading.Event()  # the loop fed realtime frames (or one ended)
        self._last_batch = time.perf_counter()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(lane,), daemon=True, name=f"orpheus-codec-{lane.name}")
            for lane in self.lanes.values()
        ]
        for t in self._threads:
            t.start()

    # What the loop thread calls ---------------------------------------------------------------

    def register(self, live) -> None:
        self.lanes[live.seq.realtime].streams[id(live)] = live

    def frames_fed(self) -> None:
        """A step's tokens are in the realtime streams' assemblers: render what is ready."""
        self._fed.set()

    def finish(self, live) -> None:
        """The sequence ended (its frames are complete): flush it and send its final chunk."""
        self.lanes[live.seq.realtime].ended.put(live)
        if live.seq.realtime:
            self._fed.set()

    def drop(self, live) -> None:
        for lane in self.lanes.values():
            lane.streams.pop(id(live), None)

    def close(self) -> None:
        self._stop.set()
        self._fed.set()
        for t in self._threads:
            t.join(timeout=30)

    @property
    def calls(self) -> int:
        return sum(lane.stats.calls for lane in self.lanes.values())

    @property
    def busy_s(self) -> float:
        return sum(lane.stats.busy_s for lane in self.lanes.values())

    # The threads --------------------------------------------------------------------------------

    def _run(self, lane: _Lane) -> None:
        while not self._stop.is_set():
            if lane.urgent:
                self._fed.wait(TICK_S)  # woken by the loop; the tick is a backstop
                self._fed.clear()  # before reading: frames fed from now on wake it again
                final = lane.take_ended(0)
            else:
                # Ended batch streams wait for the lane's next round: their last chunks then go
                # in that round's calls, not in a call each as they end (some 50 a second).
                lane.held.extend(lane.take_ended(TICK_S))
                now = time.perf_counter()
                if now - self._last_batch < self.batch_interval_s:
                    continue
                self._last_batch = now
                final, lane.held = lane.held, []
            self._timed_round(lane, final)
        final = lane.held + lane.take_ended(0)  # closing: all that ended gets its final chunk
        if final:
            self._timed_round(lane, final)

    def _timed_round(self, lane: _Lane, final: list) -> None:
        started, windows = time.monotonic(), lane.stats.windows
        try:
            self._round(lane, final)
        except Exception as e:  # the streams in this call fail, loudly
            log.exception("codec decode failed (%s lane)", lane.name)
            self._fail(lane, final, e)
        took = time.monotonic() - started
        lane.stats.busy_s += took
        if took > SLOW_ROUND_S:
            lane.stats.slow_rounds.append((started, took, lane.stats.windows - windows))

    def _round(self, lane: _Lane, final: list) -> None:
        lane.finalized = set()
        ended = {id(lv): lv for lv in final}
        streams = dict(lane.streams)
        streams.update(ended)
        if lane.urgent:
            # Streams still waiting for their first chunk go in the first call: a listener is
            # waiting on them; the others have audio in hand.
            first = {k: lv for k, lv in streams.items() if lv.marks.first_chunk_at is None}
            self._render(lane, first, ended)
            self._render(lane, {k: lv for k, lv in streams.items() if k not in first}, ended)
            return
        items = list(streams.items())  # each stream once: an ended one gets one final chunk
        step = self.batch_slice or max(1, len(items))
        for i in range(0, len(items), step):
            self._render(lane, dict(items[i : i + step]), ended)

    def _render(self, lane: _Lane, todo: dict, ended: dict) -> None:
        if not todo:
            return
        audio = decode_ready(self.codec, {k: lv.stream for k, lv in todo.items()}, set(ended), lane.urgent, lane.stats)
        for k, pcm in audio.items():
            if k not in ended:
                lv = todo[k]
                if lv.marks.first_chunk_at is None:
                    lv.marks.first_chunk_at = time.monotonic()
                    if lv.seq.realtime:
                        self.first_chunks.append(lv.marks)
                lv.sink.put(AudioChunk(lv.key, pcm, False))
        for k, lv in todo.items():
            if k in ended and k not in lane.finalized:
                self.drop(lv)
                lane.finalized.add(k)
                lv.sink.put(self.on_final(lv, audio.get(k)))

    def _fail(self, lane: _Lane, final: list, error: Exception) -> None:
        err = EngineError(f"codec failed: {type(error).__name__}: {error}")
        err.__cause__ = error
        for lv in final:
            if id(lv) in lane.finalized:
                continue  # its final chunk went out before the failing call
            self.drop(lv)
            lv.sink.put(AudioChunk(lv.key, np.zeros(0, np.float32), True, err))
