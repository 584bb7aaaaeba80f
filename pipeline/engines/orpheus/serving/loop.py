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
from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np

from pipeline.engines.base import AudioChunk
from pipeline.engines.orpheus.codec.streaming import StreamState
from pipeline.engines.orpheus.codec.thread import CodecThread
from pipeline.engines.orpheus.serving.scheduler import Plan, Scheduler, Seq, SeqState
from pipeline.engines.orpheus.serving.stats import FirstChunkMarks, LoopObserver, LoopStats
from pipeline.errors import EngineError, EngineOverloadedError

log = logging.getLogger(__name__)


@dataclass(eq=False)
class InFlight:
    """A sequence in flight with its stream state and the queue its caller reads."""

    seq: Seq
    sink: queue.SimpleQueue
    stream: StreamState
    key: Hashable
    marks: FirstChunkMarks = field(default_factory=FirstChunkMarks)


class EngineLoop:
    def __init__(
        self,
        runner,
        scheduler: Scheduler,
        codec,
        on_final,
        stream_factory=lambda seed, realtime: StreamState(seed=seed),
        overlap: bool = True,
    ):
        self.runner, self.scheduler = runner, scheduler
        self.overlap = overlap
        self._pending: tuple[Plan, object] | None = None  # (plan, launched), not yet collected
        # on_final: (live, last audio) -> the final AudioChunk (the engine's policy)
        self.codec_thread = CodecThread(codec, on_final)
        self.stream_factory = stream_factory
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.live: dict[int, InFlight] = {}  # id(seq) -> InFlight
        self.observer = LoopObserver(self.codec_thread.first_chunks)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="orpheus-loop", daemon=True)
        self._thread.start()

    def submit(self, items: list[tuple[Seq, Hashable]], sink: queue.SimpleQueue) -> None:
        for seq, key in items:
            self.inbox.put(InFlight(seq, sink, self.stream_factory(seq.seed, seq.realtime), key))

    @property
    def stats(self) -> LoopStats:
        return self.observer.stats

    def close(self) -> None:
        self._stop.set()
        self.inbox.put(None)
        self._thread.join(timeout=30)
        self.codec_thread.close()

    # The thread ---------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            block = self.scheduler.idle and self._pending is None
            if not self._admit(block=block):
                continue
            self.observer.turn_begins(block)
            try:
                self._step()
            except Exception as e:  # noqa: BLE001 - the step's sequences fail or retry; loop lives on
                self._pending = None
                self._fail_all(e)
            self.observer.turn_ends(len(self.live))

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
        """Schedule and launch step N+1, then collect and post-process step N, which the device ran
        meanwhile (without overlap: N+1 itself)."""
        launched = self._launch()
        previous, self._pending = self._pending, launched if self.overlap else None
        for step in (previous, None if self.overlap else launched):
            if step is not None:
                tokens = self._collect(*step)
                self._postprocess(step[0], tokens)

    def _launch(self) -> tuple[Plan, object] | None:
        """The next plan and its launched device work; None when there is nothing to run."""
        started = self.observer.clock()
        plan = self.scheduler.schedule()
        self.observer.scheduled(started)
        if plan.empty:
            return None
        launched = self.runner.launch(plan)
        self.observer.launched(plan, started, self.live)
        return plan, launched

    def _collect(self, plan: Plan, launched) -> dict[int, list[int]]:
        """Wait for a launched step: row -> its tokens."""
        started = self.observer.clock()
        tokens = self.runner.collect(launched)
        self.observer.collected(plan, launched, started)
        return tokens

    def _postprocess(self, plan: Plan, tokens: dict[int, list[int]]) -> None:
        """The scheduler takes the step's tokens, the streams their frames (the realtime lane is
        woken for them), and the codec the sequences that ended."""
        before = {row: seq.generated for row, (seq, _) in plan.owners.items()}
        finished = self.scheduler.postprocess(plan, tokens)
        fed, fed_realtime = self._feed(plan, tokens, before)
        if fed_realtime:
            self.codec_thread.frames_fed()
        padded = self.runner.padded_batch(plan.rows) if plan.decode else 0
        self.observer.post_processed(plan, fed, padded)
        for seq in finished:
            self.codec_thread.finish(self.live.pop(id(seq)))
        self.observer.post_ends()

    def _feed(self, plan: Plan, tokens: dict[int, list[int]], before: dict[int, int]) -> tuple[int, bool]:
        """Each row's accepted tokens into its stream's frame assembler: tokens drawn after the
        sequence ended, or before it was preempted, were dropped (``before``: what each had
        generated). Returns the tokens fed and whether a realtime stream took any."""
        fed, fed_realtime, lives, starting = 0, False, self.live, []
        now = self.observer.before_feed()
        for row, toks in tokens.items():
            seq = plan.owners[row][0]
            accepted = seq.generated - before[row]
            live = lives.get(id(seq))
            if live is None or not accepted:
                continue
            assembler = live.stream.assembler
            if accepted == 1:  # the common case: one token a step
                assembler.feed(toks[0])
            else:
                for tok in toks[:accepted]:
                    assembler.feed(tok)
            fed += accepted
            fed_realtime = fed_realtime or seq.realtime
            if live.marks.ready_at is None:  # on its way to its first chunk
                starting.append(live)
        if starting:
            self.observer.fed(starting, now)
        return fed, fed_realtime

    def _fail_all(self, error: Exception) -> None:
        oom = type(error).__name__ == "OutOfMemoryError"
        if oom:
            self.observer.stats.oom_events += 1
            self.scheduler.capacity = max(1, self.scheduler.capacity // 2)
            log.error(
                "out of device memory at %d rows; now %d rows; in-flight jobs will be retried",
                len(self.scheduler.by_row),
                self.scheduler.capacity,
            )
            err: EngineError | EngineOverloadedError = EngineOverloadedError(f"out of device memory: {error}")
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
