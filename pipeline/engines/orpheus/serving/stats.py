"""What the loop measures, kept beside it: the loop's counters and host and device times
(``LoopStats``), the marks on a stream's way to its first chunk, and the slow steps and stalls.

The loop calls a ``LoopObserver`` at the edges of its stages (schedule and launch, collect,
post-process) and of each turn; the observer reads the clocks and keeps the figures, so the loop's
step reads as the steps it takes. The benchmarks (ops/bench/orpheus) read them back.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

# A step (with the host's gap before it) longer than this is kept in LoopStats.slow_steps: a
# realtime stream's chunk is due every ~85 ms, so a stall of this size already eats its margin.
SLOW_STEP_S = 0.03
# ... and one this long is logged as a stall: a listener hears it. It sits well above a batch
# admission step, the longest ordinary one, and below what an unfrozen full GC collection holds
# the loop for (pipeline/gcfreeze.py).
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
        marks = (self.submitted, self.admitted_at, self.first_token_at, self.ready_at, self.first_chunk_at)
        known = [m for m in marks if m is not None]
        if len(known) < len(marks):
            return None
        return {name: b - a for name, a, b in zip(("queued", "prefill", "decode", "codec"), known, known[1:])}


@dataclass
class LoopStats:
    steps: int = 0
    tokens: int = 0
    decode_rows: int = 0  # sum over steps of rows decoded
    padded_rows: int = 0  # sum over steps of graph batch size (idle-slot waste)
    prefill_tokens: int = 0
    oom_events: int = 0
    prefill_steps: int = 0  # steps that launched a prefill (an eager pass)
    busy_s: float = 0.0
    # Host time by stage: where a step's wall time goes (the device works during launch + wait).
    schedule_s: float = 0.0  # the scheduler's part of launch_s
    # Device time (CUDA events) and host launch time of the steps over the realtime rows alone,
    # and of the others.
    realtime_steps: int = 0
    realtime_device_s: float = 0.0
    realtime_launch_s: float = 0.0
    full_device_s: float = 0.0
    prefill_device_s: float = 0.0  # of those, before the decode step: moves and prefill
    launch_s: float = 0.0
    wait_s: float = 0.0
    post_s: float = 0.0
    # The slow steps, newest last: (time.monotonic at the step's start, the host's gap before it,
    # the step's launch, wait and post-processing time; then the sequences live). Where a stall was.
    slow_steps: deque = field(default_factory=lambda: deque(maxlen=256))


class LoopObserver:
    """Keeps ``stats`` and the first-chunk marks for the loop thread (and only that thread calls
    it). ``first_chunks``: where the codec's realtime lane keeps the marks of the streams that
    sent their first chunk (codec/thread.py)."""

    clock = staticmethod(time.perf_counter)

    def __init__(self, first_chunks: deque):
        self.stats = LoopStats()
        self.first_chunks = first_chunks
        self._turn: tuple[float, tuple[float, float, float]] | None = None
        self._last: float | None = None  # when the last turn that ran a step ended
        self._block = False
        self._post_from = 0.0  # when the step being post-processed was collected

    # A turn of the loop: the step and the host's time around it ---------------------------------

    def turn_begins(self, block: bool) -> None:
        """A turn starts its step; ``block``: the loop waited for work before it (no gap)."""
        s = self.stats
        self._turn, self._block = (time.monotonic(), (s.launch_s, s.wait_s, s.post_s)), block

    def turn_ends(self, live: int) -> None:
        """Count the turn's time; keep it among the slow steps, and log it as a stall, when it (with
        the host's gap before it) took too long."""
        assert self._turn is not None  # turn_begins ran first
        s, (started, parts) = self.stats, self._turn
        ended = time.monotonic()
        s.busy_s += ended - started
        gap = 0.0 if self._block or self._last is None else started - self._last
        if ended - started + gap > SLOW_STEP_S:
            slow = (started, gap, s.launch_s - parts[0], s.wait_s - parts[1], s.post_s - parts[2], live)
            s.slow_steps.append(slow)
            if ended - started + gap > STALL_S:
                log.warning(
                    "engine loop stalled %.0f ms (gap before the step %.0f, launch "
                    "%.0f, wait for the device %.0f, post-processing %.0f; %d "
                    "sequences live): realtime streams may run dry",
                    1000 * (ended - started + gap),
                    *(1000 * v for v in slow[1:5]),
                    slow[5],
                )
        self._last = ended

    # The stages of a step -----------------------------------------------------------------------

    def scheduled(self, started: float) -> None:
        self.stats.schedule_s += self.clock() - started

    def launched(self, plan, started: float, live: dict) -> None:
        """``plan`` was launched (``started``: before it was scheduled); its prompts' first
        prefill chunks mark their streams as admitted."""
        s, took = self.stats, self.clock() - started
        s.launch_s += took
        if plan.realtime_only:
            s.realtime_launch_s += took
        if plan.prefill:
            s.prefill_steps += 1
            now = time.monotonic()
            for chunk in plan.prefill:
                inflight = live.get(id(chunk.seq))
                if inflight is not None and inflight.marks.admitted_at is None:
                    inflight.marks.admitted_at = now

    def collected(self, plan, launched, started: float) -> None:
        """The host's wait for a launched step and, on CUDA, the device's time in it; the step's
        post-processing starts as the wait ends."""
        s = self.stats
        self._post_from = self.clock()
        s.wait_s += self._post_from - started
        device_ms = getattr(launched, "device_ms", lambda: None)()
        s.prefill_device_s += (getattr(launched, "prefill_ms", lambda: None)() or 0.0) / 1000
        if plan.realtime_only:
            s.realtime_steps += 1
            s.realtime_device_s += (device_ms or 0.0) / 1000
        else:
            s.full_device_s += (device_ms or 0.0) / 1000

    @staticmethod
    def before_feed() -> float:
        """The time a step's tokens are fed, read before they are: the realtime lane may send a
        first chunk as soon as its frames are in (its mark is read later, so one set just after
        it is still in order)."""
        return time.monotonic()

    @staticmethod
    def fed(starting: list, now: float) -> None:
        """Streams on their way to their first chunk (InFlight) were fed tokens at ``now``: their
        first token, and whether their first chunk's frames are complete."""
        for inflight in starting:
            marks = inflight.marks
            marks.first_token_at = marks.first_token_at or now
            if len(inflight.stream.assembler.frames) >= inflight.stream.first_ready_frames:
                marks.ready_at = now

    def post_processed(self, plan, tokens: int, padded: int) -> None:
        """A step's tokens are in: ``tokens`` accepted, its decode ran at ``padded`` rows; the idle
        rows of a step are shared by its sequences (their ``slot_steps``)."""
        s = self.stats
        s.tokens += tokens
        s.steps += 1
        if plan.decode:
            n = len(plan.decode)
            s.decode_rows += n
            s.padded_rows += padded
            share, idle = padded / n, (padded - n) / n
            for seq in plan.decode:
                seq.slot_steps += share
                seq.idle_slot_steps += idle
        s.prefill_tokens += sum(c.end - c.start for c in plan.prefill)

    def post_ends(self) -> None:
        self.stats.post_s += self.clock() - self._post_from

    # Read back ----------------------------------------------------------------------------------

    def first_chunk_phases(self, clear: bool = False) -> list[dict]:
        """Where the time to the first chunk went, per realtime stream (the last 4096)."""
        marks, kept = [], self.first_chunks
        if clear:  # popleft, not clear(): the realtime lane may append meanwhile
            while kept:
                marks.append(kept.popleft())
        else:
            marks = list(kept)
        return [p for p in (m.phases() for m in marks) if p is not None]
