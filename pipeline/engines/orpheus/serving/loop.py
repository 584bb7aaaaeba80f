"""The continuous-batching loop: one thread owns the model; any number of callers feed it.

``synthesize()`` calls (one per Celery task in flight: the GPU worker runs a thread pool) put their
sequences in the inbox and read their chunks from their own queue. The loop thread steps:

    schedule N+1 -> launch N+1 (device) -> collect N -> postprocess N -> frames to the codec

so the host plans and queues a step while the device still runs the one before: the device never
waits for the host's bookkeeping, and the host's time per step is hidden under the device's
(``overlap=False`` does one step at a time). The codec works on threads of its own
(codec/thread.py; its realtime lane is woken as soon as a step's frames are fed), so the language
model's step never waits for it either. A failed step fails the sequences in it, loudly, and the
loop carries on; running out of device memory halves the rows and gives the sequences back as
retryable, never lost.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np

from pipeline.engines.base import AudioChunk
from pipeline.engines.orpheus.codec.streaming import StreamState
from pipeline.engines.orpheus.codec.thread import CodecThread
from pipeline.engines.orpheus.serving.scheduler import Plan, Scheduler, Seq, SeqState
from pipeline.errors import EngineError, EngineOverloadedError

log = logging.getLogger(__name__)

# A step (with the host's gap before it) longer than this is kept in LoopStats.slow_steps: a
# realtime stream's chunk is due every ~85 ms, so a stall of this size already eats its margin.
SLOW_STEP_S = 0.03
# ... and one this long is logged as a stall: a listener hears it. It sits well above a batch
# admission step, the longest ordinary one, and below what an unfrozen full GC collection holds
# the loop for (engine.freeze_boot_objects).
STALL_S = 0.15


@dataclass
class FirstChunkMarks:
    """On the way to a stream's first chunk (time.monotonic): submitted, its prompt's first
    prefill chunk launched, its first token back, the frames of its first chunk complete, the chunk
    handed over. Small, so the codec's realtime lane keeps the last few thousand for the metrics."""

    submitted: float = field(default_factory=time.monotonic)
    admitted_at: float | None = None
    first_token_at: float | None = None
    ready_at: float | None = None
    first_chunk_at: float | None = None

    def phases(self) -> dict | None:
        """Seconds spent queued, in prefill (to the first token), decoding the first chunk's
        frames, and in the codec (to the chunk handed over); None before the first chunk."""
        marks = (self.submitted, self.admitted_at, self.first_token_at, self.ready_at,
                 self.first_chunk_at)
        if any(m is None for m in marks):
            return None
        return {name: b - a for name, a, b in
                zip(("queued", "prefill", "decode", "codec"), marks, marks[1:])}


@dataclass(eq=False)
class InFlight:
    """A sequence in flight with its stream state and the queue its caller reads."""

    seq: Seq
    sink: queue.SimpleQueue
    stream: StreamState
    key: Hashable
    marks: FirstChunkMarks = field(default_factory=FirstChunkMarks)


@dataclass
class LoopStats:
    steps: int = 0
    tokens: int = 0
    decode_rows: int = 0            # sum over steps of rows decoded
    padded_rows: int = 0            # sum over steps of graph batch size (idle-slot waste)
    prefill_tokens: int = 0
    oom_events: int = 0
    prefill_steps: int = 0          # steps that launched a prefill (an eager pass)
    busy_s: float = 0.0
    # Host time by stage: where a step's wall time goes (the device works during launch + wait).
    schedule_s: float = 0.0         # the scheduler's part of launch_s
    # Device time (CUDA events) and host launch time of the steps over the realtime rows alone,
    # and of the others.
    realtime_steps: int = 0
    realtime_device_s: float = 0.0
    realtime_launch_s: float = 0.0
    full_device_s: float = 0.0
    prefill_device_s: float = 0.0   # of those, before the decode step: moves and prefill
    launch_s: float = 0.0
    wait_s: float = 0.0
    post_s: float = 0.0
    # The slow steps, newest last: (time.monotonic at the step's start, the host's gap before it,
    # the step's launch, wait and post-processing time; then the sequences live). Where a stall was.
    slow_steps: deque = field(default_factory=lambda: deque(maxlen=256))


class EngineLoop:
    def __init__(self, runner, scheduler: Scheduler, codec, on_final,
                 stream_factory=lambda seed, realtime: StreamState(seed=seed), overlap: bool = True):
        self.runner, self.scheduler = runner, scheduler
        self.overlap = overlap
        self._pending: tuple[Plan, object] | None = None   # (plan, launched), not yet collected
        # on_final: (live, last audio) -> the final AudioChunk (the engine's policy)
        self.codec_thread = CodecThread(codec, on_final)
        self.stream_factory = stream_factory
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.live: dict[int, InFlight] = {}   # id(seq) -> InFlight
        self.stats = LoopStats()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="orpheus-loop", daemon=True)
        self._thread.start()

    def submit(self, items: list[tuple[Seq, Hashable]], sink: queue.SimpleQueue) -> None:
        for seq, key in items:
            self.inbox.put(InFlight(seq, sink, self.stream_factory(seq.seed, seq.realtime), key))

    def first_chunk_phases(self, clear: bool = False) -> list[dict]:
        """Where the time to the first chunk went, per realtime stream (the last 4096)."""
        marks, kept = [], self.codec_thread.first_chunks
        if clear:       # popleft, not clear(): the realtime lane may append meanwhile
            while kept:
                marks.append(kept.popleft())
        else:
            marks = list(kept)
        return [p for p in (m.phases() for m in marks) if p is not None]

    def close(self) -> None:
        self._stop.set()
        self.inbox.put(None)
        self._thread.join(timeout=30)
        self.codec_thread.close()

    # The thread ---------------------------------------------------------------------------------

    def _run(self) -> None:
        s, last = self.stats, None
        while not self._stop.is_set():
            block = self.scheduler.idle and self._pending is None
            if not self._admit(block=block):
                continue
            started = time.monotonic()
            parts = (s.launch_s, s.wait_s, s.post_s)
            try:
                self._step()
            except Exception as e:  # noqa: BLE001 - the step's sequences fail or retry; loop lives on
                self._pending = None
                self._fail_all(e)
            ended = time.monotonic()
            s.busy_s += ended - started
            gap = 0.0 if block or last is None else started - last
            if ended - started + gap > SLOW_STEP_S:
                slow = (started, gap, s.launch_s - parts[0], s.wait_s - parts[1],
                        s.post_s - parts[2], len(self.live))
                s.slow_steps.append(slow)
                if ended - started + gap > STALL_S:
                    log.warning("engine loop stalled %.0f ms (gap before the step %.0f, launch "
                                "%.0f, wait for the device %.0f, post-processing %.0f; %d "
                                "sequences live): realtime streams may run dry",
                                1000 * (ended - started + gap), *(1000 * v for v in slow[1:5]),
                                slow[5])
            last = ended

    def _admit(self, block: bool) -> bool:
        try:
            item = self.inbox.get(timeout=0.5) if block else self.inbox.get_nowait()
        except queue.Empty:
            return not block
        while item is not None:
            self._add(item)
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                break
        return not self._stop.is_set()

    def _add(self, live: InFlight) -> None:
        try:
            self.scheduler.add(live.seq)
        except ValueError as e:
            live.sink.put(AudioChunk(live.key, np.zeros(0, np.float32), True, EngineError(str(e))))
            return
        self.live[id(live.seq)] = live
        self.codec_thread.register(live)

    def _step(self) -> None:
        """Launch the next plan (if any), then collect and post-process the one launched before it
        (or, without overlap, this one)."""
        s = self.stats
        t0 = time.perf_counter()
        plan = self.scheduler.schedule()
        s.schedule_s += time.perf_counter() - t0
        launched = None if plan.empty else (plan, self.runner.launch(plan))
        t1 = time.perf_counter()
        if launched is not None:        # as steps and realtime_steps count them
            s.launch_s += t1 - t0
            if plan.realtime_only:
                s.realtime_launch_s += t1 - t0
        if plan.prefill:
            s.prefill_steps += 1
            now = time.monotonic()
            for chunk in plan.prefill:
                live = self.live.get(id(chunk.seq))
                if live is not None and live.marks.admitted_at is None:
                    live.marks.admitted_at = now
        previous, self._pending = self._pending, launched if self.overlap else None
        if previous is not None:
            self._finish(*previous)
        if launched is not None and not self.overlap:
            self._finish(*launched)

    def _finish(self, plan: Plan, launched) -> None:
        s = self.stats
        t1 = time.perf_counter()
        tokens = self.runner.collect(launched)
        t3 = time.perf_counter()
        s.wait_s += t3 - t1
        device_ms = getattr(launched, "device_ms", lambda: None)()
        s.prefill_device_s += (getattr(launched, "prefill_ms", lambda: None)() or 0.0) / 1000
        if plan.realtime_only:
            s.realtime_steps += 1
            s.realtime_device_s += (device_ms or 0.0) / 1000
        else:
            s.full_device_s += (device_ms or 0.0) / 1000
        owners, lives = plan.owners, self.live
        before = {row: seq.generated for row, (seq, _) in owners.items()}
        finished = self.scheduler.postprocess(plan, tokens)
        fed_realtime = False
        for row, toks in tokens.items():
            seq = owners[row][0]
            # tokens drawn after the sequence ended, or before it was preempted, were dropped
            accepted = seq.generated - before[row]
            live = lives.get(id(seq))
            if live is None or not accepted:
                continue
            assembler, marks = live.stream.assembler, live.marks
            # Read the clock before the frames are fed: the realtime lane may send the chunk at once
            # (the marks are read later, so a mark set just after it is still in order).
            now = time.monotonic() if marks.ready_at is None else None
            if accepted == 1:           # the common case: one token a step
                assembler.feed(toks[0])
            else:
                for tok in toks[:accepted]:
                    assembler.feed(tok)
            s.tokens += accepted
            fed_realtime = fed_realtime or seq.realtime
            if now is not None:
                marks.first_token_at = marks.first_token_at or now
                if len(assembler.frames) >= live.stream.first_ready_frames:
                    marks.ready_at = now
        if fed_realtime:
            self.codec_thread.frames_fed()
        s.steps += 1
        if plan.decode:
            n, padded = len(plan.decode), self.runner.padded_batch(plan.rows)
            s.decode_rows += n
            s.padded_rows += padded
            share, idle = padded / n, (padded - n) / n
            for seq in plan.decode:      # the idle rows of a step are shared by its sequences
                seq.slot_steps += share
                seq.idle_slot_steps += idle
        s.prefill_tokens += sum(c.end - c.start for c in plan.prefill)
        for seq in finished:
            self.codec_thread.finish(self.live.pop(id(seq)))
        s.post_s += time.perf_counter() - t3

    def _fail_all(self, error: Exception) -> None:
        oom = type(error).__name__ == "OutOfMemoryError"
        if oom:
            self.stats.oom_events += 1
            self.scheduler.capacity = max(1, self.scheduler.capacity // 2)
            log.error("out of device memory at %d rows; now %d rows; in-flight jobs will be retried",
                      len(self.scheduler.by_row), self.scheduler.capacity)
            err: EngineError = EngineOverloadedError(f"out of device memory: {error}")
        else:
            log.exception("Orpheus step failed; failing the %d sequences in flight", len(self.live))
            err = EngineError(f"generation failed: {type(error).__name__}: {error}")
        err.__cause__ = error
        for live in self.live.values():
            live.seq.state = SeqState.FINISHED
            self.codec_thread.drop(live)
            live.sink.put(AudioChunk(live.key, np.zeros(0, np.float32), True, err))
        self.live.clear()
        self.scheduler.reset()
