"""Admission: which sequences wait and which hold a cache row (the scheduler's rows, scheduler.py).

Rows are kept compact and in two tiers: realtime sequences hold rows ``0 .. r-1``, batch sequences
rows ``r .. n-1``, so the decode step runs at batch ``n`` (rounded up to a captured graph size) and
never over holes, and a step of the realtime rows alone runs at batch ``r``. When a sequence
finishes, a sequence of its tier moves into the hole at the next ``schedule()`` (the runner copies
its cache row and state); a realtime arrival takes row ``r`` and the batch sequence there moves to
the end.

Admission, highest first: realtime sequences, the one whose job (``Seq.group``) holds the fewest
rows first, then oldest first, so a long job's many pieces do not queue a short job behind them;
then batch sequences, the longest first: of the ``LONGEST_WINDOW`` oldest waiting, the one with the
largest token budget, the oldest of those, so a batch's long pieces start early and its end is not
a few long pieces decoding alone at a handful of rows (the makespan of a batch whose pieces run
side by side is set by the ones started last; short ones fill in around the long). A piece asked
again (``Seq.again``) or preempted waits at the head and goes first, and the head is passed over at
most ``capacity`` times, so a short piece is never starved by longer ones that keep arriving.
``reserved`` rows are kept free of batch work so a realtime arrival finds a row at the next step;
realtime work may use every row, except ``batch_floor`` rows while batch work waits, so a flood of
realtime streams cannot starve batch jobs.

While realtime streams run, at most ``realtime_max_rows`` rows decode, so the step stays short
enough for them to play in real time. ``pause_batch`` (the engine's default: more streams keep
ahead of real time, and batch work loses no prefill, so it keeps more of its pace): the cap pauses
the batch rows over it (they keep their cache rows and resume where they were) instead of
preempting them (youngest first, down to ``batch_floor``: they give their rows back and prefill
what they had again on resuming); rows are taken from batch work only when a stream needs one.

No torch here: the scheduler and its rows work on row numbers and token counts.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from typing import cast

from pipeline.engines.orpheus.serving.sequence import Plan, Seq, SeqState

# Realtime admission weighs this many of the oldest waiting streams: enough that a long job's
# pieces never hold a short job back, few enough that a burst of hundreds costs the step little.
FAIR_WINDOW = 32
# Batch admission weighs this many of the oldest waiting pieces: the worker keeps about twice the
# rows' worth of jobs in the engine (worker/boot.py batch_slots), so this sees all of them.
LONGEST_WINDOW = 1024


@dataclass(frozen=True)
class SchedulerConfig:
    """How the scheduler shares its rows and steps between realtime and batch work (what each
    knob does: this module's docstring and scheduler.py's). The defaults are the plain
    scheduler's; the engine derives its own from RealtimeConfig and the rows (engine.py
    ``scheduler_config``)."""

    reserved: int = 0  # rows batch work leaves free for realtime arrivals
    batch_floor: int = 0  # batch rows that preemption leaves running
    prefill_tokens: int = 2048  # prompt tokens prefilled per step
    admit_every: int = 1  # batch work is admitted every Nth step
    realtime_max_rows: int = 0  # rows decoding while realtime streams run (0: all)
    batch_every: int = 1  # while streams run, batch rows decode every Nth step ...
    batch_every_starting: int = 1  # ... and every Nth while a stream waits for its first chunk
    first_tokens: int = 0  # tokens a stream's first chunk needs
    playing_every: int = 1  # playing streams join every Nth realtime-only step then
    pause_batch: bool = False  # batch rows over the realtime cap pause (else: preempted)
    frame_tokens: int = 7  # tokens of one audio frame (its first chunk holds one frame)
    playback_tokens_per_s: float = 0.0  # tokens a player consumes a second (0: leads not tracked)
    low_lead_s: float = 0.0  # a playing stream this little ahead of its player starts again
    clock: Callable[[], float] = time.monotonic

    def fitted(self, rows: int) -> SchedulerConfig:
        """This config for ``rows`` rows: every count at least 1, the realtime cap at most the
        rows (0: all of them), and no low-lead rule where leads are not tracked."""
        return replace(
            self,
            reserved=min(self.reserved, rows - 1),
            batch_floor=min(self.batch_floor, rows - 1),
            prefill_tokens=max(1, self.prefill_tokens),
            admit_every=max(1, self.admit_every),
            realtime_max_rows=self.realtime_max_rows or rows,
            batch_every=max(1, self.batch_every),
            batch_every_starting=max(1, self.batch_every_starting),
            playing_every=max(1, self.playing_every),
            frame_tokens=max(1, self.frame_tokens),
            low_lead_s=self.low_lead_s if self.playback_tokens_per_s > 0 else 0.0,
        )


class Admission:
    """The waiting queues and the rows: admission, preemption and compaction. ``config`` is
    fitted to the rows once and never changes; ``capacity`` (which the loop halves when the
    device runs out of memory), ``reserved`` and ``batch_floor`` follow the rows at ``reset``."""

    def __init__(self, rows: int, max_context: int, config: SchedulerConfig = SchedulerConfig()):
        if rows < 1 or max_context < 2:
            raise ValueError("need at least one row and a context of two tokens")
        self.capacity = rows
        self.max_context = max_context
        self.config = config.fitted(rows)
        self.reserved, self.batch_floor = self.config.reserved, self.config.batch_floor
        self._decode_limit = rows  # full steps decode rows 0 .. this - 1 (pause_batch)
        self.preempted = 0
        self._rt_rows = 0  # realtime rows (rows 0 .. r-1), from each schedule() on
        self._held: Counter | None = None  # realtime rows per job this step (_next_realtime)
        self.waiting_rt: deque[Seq] = deque()
        self.waiting_batch: deque[Seq] = deque()
        self.by_row: list[Seq] = []  # row i holds by_row[i]
        self._free_rows: list[int] = []  # holes: finished, cancelled or preempted
        self._arrivals = itertools.count()
        self._overtaken = 0  # batch admissions that passed over the waiting queue's head

    # Queue ----------------------------------------------------------------------------------

    def add(self, seq: Seq) -> None:
        if len(seq.prompt) < 1:
            raise ValueError(f"sequence {seq.key!r} has an empty prompt")
        if len(seq.prompt) + 1 > self.max_context:
            raise ValueError(f"prompt of {len(seq.prompt)} tokens does not fit a context of {self.max_context}")
        # A sequence never outgrows its row: the budget is cut to the context that is left.
        seq.budget = max(1, min(seq.budget, self.max_context - len(seq.prompt)))
        seq.order = next(self._arrivals)
        if seq.realtime:
            self.waiting_rt.append(seq)
        elif seq.again:  # it has waited behind the batch work once (SynthesisRequest.again)
            # behind the pieces already ahead (asked again, or preempted), in the order they came
            waiting = self.waiting_batch
            at = next((i for i, s in enumerate(waiting) if not (s.again or s.preemptions)), len(waiting))
            waiting.insert(at, seq)
        else:
            self.waiting_batch.append(seq)

    def cancel(self, key: Hashable) -> Seq | None:
        """Take a sequence out wherever it is; a running one gives its row back at the next step."""
        for queue in (self.waiting_rt, self.waiting_batch):
            for seq in queue:
                if seq.key == key:
                    queue.remove(seq)
                    seq.state, seq.finish_reason = SeqState.FINISHED, "cancelled"
                    return seq
        for seq in self.by_row:
            if seq.key == key and seq.state is not SeqState.FINISHED:
                self._finish(seq, "cancelled")
                return seq
        return None

    def reset(self) -> None:
        """Forget every sequence (their callers have been told); the settings stay, fitted to the
        capacity."""
        self.reserved = min(self.reserved, self.capacity - 1)
        self.batch_floor = min(self.batch_floor, self.capacity - 1)
        self.waiting_rt.clear()
        self.waiting_batch.clear()
        self.by_row, self._free_rows = [], []
        self._overtaken = 0

    @property
    def idle(self) -> bool:
        return not (self.waiting_rt or self.waiting_batch or self.running_rows)

    @property
    def running_rows(self) -> int:
        return len(self.by_row) - len(self._free_rows)

    # Admission ------------------------------------------------------------------------------

    def _next_admission(self, batch_turn: bool = True, realtime_only: bool = False) -> Seq | None:
        free = self.capacity - len(self.by_row)
        if free <= 0:
            return None
        batch_waiting = bool(self.waiting_batch)
        running_rt = self._rt_rows
        rt_limit = self.capacity - (self.batch_floor if batch_waiting else 0)
        if self.waiting_rt and running_rt < rt_limit:
            return self._next_realtime()
        # Batch work leaves ``reserved`` rows free, less those realtime streams already use, and
        # while realtime streams run it stops at the realtime cap.
        keep_free = max(0, self.reserved - running_rt)
        if realtime_only or not (batch_waiting and batch_turn and free > keep_free):
            return None
        # (but never below the batch floor: a steady flood of streams must not starve batch work)
        if (
            (running_rt or self.waiting_rt)
            and self.running_rows >= self.config.realtime_max_rows
            and self.running_rows - running_rt >= self.batch_floor
        ):
            return None
        return self._next_batch()

    def _next_batch(self) -> Seq:
        """The longest waiting batch piece (see the module), or the head: a piece asked again or
        preempted, or one passed over ``capacity`` times already."""
        waiting = self.waiting_batch
        head = waiting[0]
        if head.again or head.preemptions or self._overtaken >= self.capacity or len(waiting) == 1:
            self._overtaken = 0
            return waiting.popleft()
        seq = max(itertools.islice(waiting, LONGEST_WINDOW), key=_budget)  # the first of equals
        if seq is head:
            self._overtaken = 0
            return waiting.popleft()
        self._overtaken += 1
        waiting.remove(seq)
        return seq

    def _next_realtime(self) -> Seq:
        """Of the FAIR_WINDOW oldest waiting streams, the one whose job holds the fewest realtime
        rows, the oldest of those. The rows each job holds are counted once a step (rows are given
        back only between steps) and kept up to date as this step admits: a burst of streams costs
        the step one pass over its rows, not one per admission."""
        waiting = self.waiting_rt
        if len(waiting) == 1:
            seq = waiting.popleft()
        else:
            if self._held is None:
                self._held = Counter(s.group for s in self._live(self._rt_rows) if s.group is not None)
            held = self._held
            seq = min(itertools.islice(waiting, FAIR_WINDOW), key=lambda s: held[s.group] if s.group is not None else 0)
            if seq is waiting[0]:
                waiting.popleft()
            else:
                waiting.remove(seq)
        if seq.group is not None and self._held is not None:
            self._held[seq.group] += 1
        return seq

    def _live(self, upto: int | None = None) -> list[Seq]:
        """The sequences of rows ``0 .. upto-1`` (all rows: None) that still hold their row; the
        others are holes: finished, cancelled, or preempted (its ``row`` is no longer that row)."""
        ended = SeqState.FINISHED
        rows = self.by_row if upto is None else self.by_row[:upto]
        return [s for i, s in enumerate(rows) if s.state is not ended and s.row == i]

    def _preempt_for_realtime(self) -> None:
        """Give rows back from batch work while realtime streams need them or the step is over
        the realtime cap: the youngest batch sequences go back to the head of the queue.

        With ``pause_batch`` the cap pauses batch rows instead: full steps decode the lowest
        ``limit`` rows (the streams, then the lowest batch rows), the batch rows above keep their
        cache and decode again once the cap allows, with nothing to prefill again; a batch row is
        given back only when a stream needs a row and none is free."""
        self._decode_limit = self.capacity
        if not (self.waiting_rt or (self.by_row and self.by_row[0].realtime)):
            return  # no stream: the realtime tier is empty
        cap = self.config.realtime_max_rows
        if self.running_rows + len(self.waiting_rt) <= min(self.capacity, cap):
            return  # within the lowest limit below (which the count of streams only raises)
        realtime = len(self._live(self._realtime_rows()))
        wanted = realtime + len(self.waiting_rt)
        if not wanted:
            return
        limit = min(self.capacity, max(cap, wanted + self.batch_floor))
        if self.config.pause_batch:
            self._decode_limit, limit = limit, self.capacity
        excess = self.running_rows + len(self.waiting_rt) - limit
        if excess <= 0:
            return
        live = self._live()
        batch = sorted((s for s in live if not s.realtime), key=lambda s: (s.generated, -s.order))
        for seq in batch[: max(0, min(excess, len(batch) - self.batch_floor))]:
            self._free_rows.append(seq.row)
            seq.state, seq.row, seq.prefilled, seq.inflight = SeqState.WAITING, -1, 0, 0
            seq.epoch += 1
            seq.preemptions += 1
            self.preempted += 1
            self.waiting_batch.appendleft(seq)

    def _finish(self, seq: Seq, reason: str) -> None:
        seq.state, seq.finish_reason = SeqState.FINISHED, reason
        self._free_rows.append(seq.row)

    # Rows -----------------------------------------------------------------------------------

    def _realtime_rows(self) -> int:
        """r: rows 0 .. r-1 hold the realtime tier (after ``_compact``)."""
        for r, seq in enumerate(self.by_row):
            if not seq.realtime:
                return r
        return len(self.by_row)

    def _place(self, plan: Plan, seq: Seq) -> None:
        """Give an admitted sequence a row: batch work the next one, a realtime stream row ``r``
        (the batch sequence there moves to the end; the new one has nothing in the cache yet)."""
        seq.state = SeqState.PREFILL
        n = len(self.by_row)
        r = self._rt_rows if seq.realtime else n
        self._rt_rows += seq.realtime
        if r < n:
            moved = self.by_row[r]
            plan.moves.append((r, n, moved.context))
            moved.row = n
            self.by_row.append(moved)
            self.by_row[r] = seq
        else:
            self.by_row.append(seq)
        seq.row = r

    def _compact(self) -> list[tuple[int, int, int]]:
        """Fill the holes, keeping the tiers: realtime rows ``0 .. r-1``, batch ``r .. n-1``.

        Before it, rows ``0 .. r_old-1`` were realtime or holes, and the rest batch or holes.
        Realtime sequences at rows ``>= r`` move into the holes below ``r`` first; then batch
        sequences at rows ``>= n`` move into the holes of ``r .. n-1`` (which now include the rows
        those realtime ones left). Every move goes into a free row, so no swap is ever needed."""
        live = self._live()
        self._free_rows = []
        rt = [s for s in live if s.realtime]
        batch = [s for s in live if not s.realtime]
        r, n = len(rt), len(live)
        moves = []
        slots: list[Seq | None] = [None] * max(len(self.by_row), n)
        for s in live:
            slots[s.row] = s
        for tier, lo, hi in ((rt, 0, r), (batch, r, n)):
            holes = [i for i in range(lo, hi) if slots[i] is None]
            for seq, hole in zip(sorted((s for s in tier if not lo <= s.row < hi), key=lambda s: -s.row), holes):
                moves.append((seq.row, hole, seq.context))
                slots[seq.row], slots[hole] = None, seq
                seq.row = hole
        self.by_row = cast("list[Seq]", slots[:n])  # rows 0 .. n-1 are all held now
        return moves


def _budget(seq: Seq) -> int:
    return seq.budget
