"""Continuous batching: which sequences hold a cache row, which are prefilled, which decode, this step.

The scheduler never imports torch: it works on row numbers and token counts, and the model runner
turns its ``Plan`` into device work. One step is:

    plan = scheduler.schedule()      # moves, prefill chunks, rows to decode
    tokens = runner.run(plan)        # device
    finished = scheduler.postprocess(plan, tokens)

or, overlapped (the loop does this on the GPU, so the host plans and launches step N+1 while the
device still runs step N): ``schedule()`` N+1 and launch it before ``postprocess()`` N. What a
plan does to a sequence that is certain (prefill progress, a completed prompt starting to decode,
one more token in flight) is applied by ``schedule()``; what depends on the tokens (end of speech,
the budget reached) by ``postprocess()``. A sequence that draws end-of-speech at step N has been
decoded once more at N+1: that token is dropped. A sequence never runs past its budget, which is
known ahead. Tokens of a step that was launched before a preemption are dropped (``Seq.epoch``):
the resumed sequence draws them again, the same (the draw depends on the job's seed and step only).

Rows are kept compact and in two tiers: realtime sequences hold rows ``0 .. r-1``, batch sequences
rows ``r .. n-1``, so the decode step runs at batch ``n`` (rounded up to a captured graph size) and
never over holes, and a step of the realtime rows alone runs at batch ``r``. When a sequence
finishes, a sequence of its tier moves into the hole at the next ``schedule()`` (the runner copies
its cache row and state); a realtime arrival takes row ``r`` and the batch sequence there moves to
the end.

Realtime-only steps: a realtime stream must get a token every 9.8 ms to play at 0.8x real time,
and its first chunk needs ``first_tokens`` of them as fast as possible, while a step over a full
batch takes longer than that. So while realtime streams run, batch rows decode (and batch prompts
are admitted and prefilled) only every ``batch_every``-th step, every ``batch_every_starting``-th
while a stream still waits for its first chunk; the steps between are short steps over the
realtime rows alone. Batch work still gets every full step, so it is slowed, never starved.

Starting-only steps (``playing_every`` > 1; 1 here, 2 in the engine): while a stream waits for its
first chunk, of the steps over the realtime rows alone, the streams already playing join only every
``playing_every``-th; the others decode the starting streams alone. Such a step still runs at the
realtime tier's batch, but its time is mostly the weights and the attention over the rows that
decode, so the first chunk's tokens come faster at some cost to the playing streams. A playing
stream whose audio runs less than ``low_lead_s`` ahead of its player (who started at its first
chunk and plays ``playback_tokens_per_s``) joins them too (0 here): its buffer is smallest just
after its first chunk (one frame, 85 ms), and long steps (prefills, batch steps) eat into it, so it
gets every realtime step until it is ahead again, while streams well ahead give the starting ones
their steps.

``pause_batch`` (the engine's default: more streams keep ahead of real time, and batch work loses
no prefill, so it keeps more of its pace): the realtime cap pauses the batch rows
over it (they keep their cache rows and resume where they were) instead of preempting them (they
give their rows back and prefill again on resuming); rows are taken from batch work only when a
stream needs one.

Admission, highest first: realtime sequences, the one whose job (``Seq.group``) holds the fewest
rows first, then oldest first, so a long job's many pieces do not queue a short job behind them;
then batch sequences, oldest first.
``reserved`` rows are kept free of batch work so a realtime arrival finds a row at the next step;
realtime work may use every row, except ``batch_floor`` rows while batch work waits, so a flood of
realtime streams cannot starve batch jobs. Prompts are prefilled in chunks of at most
``prefill_tokens`` tokens per step in total, so a long prompt does not stall the running streams.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from typing import cast

from pipeline.engines.orpheus.serving.sequence import Plan, PrefillChunk, Seq, SeqState

# Realtime admission weighs this many of the oldest waiting streams: enough that a long job's
# pieces never hold a short job back, few enough that a burst of hundreds costs the step little.
FAIR_WINDOW = 32

__all__ = ["Plan", "PrefillChunk", "Scheduler", "SchedulerConfig", "Seq", "SeqState"]


@dataclass(frozen=True)
class SchedulerConfig:
    """How the scheduler shares its rows and steps between realtime and batch work (what each
    knob does: the module's docstring). The defaults are the plain scheduler's; the engine derives
    its own from RealtimeConfig and the rows (engine.py ``scheduler_config``)."""

    reserved: int = 0               # rows batch work leaves free for realtime arrivals
    batch_floor: int = 0            # batch rows that preemption leaves running
    prefill_tokens: int = 2048      # prompt tokens prefilled per step
    admit_every: int = 1            # batch work is admitted every Nth step
    realtime_max_rows: int = 0      # rows decoding while realtime streams run (0: all)
    batch_every: int = 1            # while streams run, batch rows decode every Nth step ...
    batch_every_starting: int = 1   # ... and every Nth while a stream waits for its first chunk
    first_tokens: int = 0           # tokens a stream's first chunk needs
    playing_every: int = 1          # playing streams join every Nth realtime-only step then
    pause_batch: bool = False       # batch rows over the realtime cap pause (else: preempted)
    frame_tokens: int = 7           # tokens of one audio frame (its first chunk holds one frame)
    playback_tokens_per_s: float = 0.0  # tokens a player consumes a second (0: leads not tracked)
    low_lead_s: float = 0.0         # a playing stream this little ahead of its player starts again
    clock: Callable[[], float] = time.monotonic

    def fitted(self, rows: int) -> SchedulerConfig:
        """This config for ``rows`` rows: every count at least 1, the realtime cap at most the
        rows (0: all of them), and no low-lead rule where leads are not tracked."""
        return replace(
            self, reserved=min(self.reserved, rows - 1), batch_floor=min(self.batch_floor, rows - 1),
            prefill_tokens=max(1, self.prefill_tokens), admit_every=max(1, self.admit_every),
            realtime_max_rows=self.realtime_max_rows or rows, batch_every=max(1, self.batch_every),
            batch_every_starting=max(1, self.batch_every_starting),
            playing_every=max(1, self.playing_every), frame_tokens=max(1, self.frame_tokens),
            low_lead_s=self.low_lead_s if self.playback_tokens_per_s > 0 else 0.0)


class Scheduler:
    """``config`` is fitted to the rows once and never changes; ``capacity`` (which the loop
    halves when the device runs out of memory), ``reserved`` and ``batch_floor`` follow the rows
    at ``reset``."""

    def __init__(self, rows: int, max_context: int, config: SchedulerConfig = SchedulerConfig()):
        if rows < 1 or max_context < 2:
            raise ValueError("need at least one row and a context of two tokens")
        self.capacity = rows
        self.max_context = max_context
        self.config = config.fitted(rows)
        self.reserved, self.batch_floor = self.config.reserved, self.config.batch_floor
        self._decode_limit = rows      # full steps decode rows 0 .. this - 1 (pause_batch)
        self.preempted = 0
        self.realtime_steps = 0        # steps that decoded the realtime rows alone
        self.starting_steps = 0        # ... of which the starting streams alone
        self._playing_turn = 0
        self._steps = 0                # full steps (batch admission counts these)
        self._rt_turn = 0
        self._rt_rows = 0                    # realtime rows (rows 0 .. r-1), from each schedule() on
        self._held: Counter | None = None    # realtime rows per job this step (_next_realtime)
        self.waiting_rt: deque[Seq] = deque()
        self.waiting_batch: deque[Seq] = deque()
        self.by_row: list[Seq] = []             # row i holds by_row[i]
        self._free_rows: list[int] = []         # holes: finished, cancelled or preempted
        self._arrivals = itertools.count()

    # Queue ----------------------------------------------------------------------------------

    def add(self, seq: Seq) -> None:
        if len(seq.prompt) < 1:
            raise ValueError(f"sequence {seq.key!r} has an empty prompt")
        if len(seq.prompt) + 1 > self.max_context:
            raise ValueError(f"prompt of {len(seq.prompt)} tokens does not fit a context of "
                             f"{self.max_context}")
        # A sequence never outgrows its row: the budget is cut to the context that is left.
        seq.budget = max(1, min(seq.budget, self.max_context - len(seq.prompt)))
        seq.order = next(self._arrivals)
        (self.waiting_rt if seq.realtime else self.waiting_batch).append(seq)

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
        capacity (which the loop halves when the device runs out of memory)."""
        self.reserved = min(self.reserved, self.capacity - 1)
        self.batch_floor = min(self.batch_floor, self.capacity - 1)
        self.waiting_rt.clear()
        self.waiting_batch.clear()
        self.by_row, self._free_rows = [], []
        self._rt_turn = self._playing_turn = 0

    @property
    def idle(self) -> bool:
        return not (self.waiting_rt or self.waiting_batch or self.running_rows)

    @property
    def running_rows(self) -> int:
        return len(self.by_row) - len(self._free_rows)

    # One step -------------------------------------------------------------------------------

    def schedule(self) -> Plan:
        self._held = None           # realtime rows per job, counted at this step's first need
        self._preempt_for_realtime()
        # Holes exist only where something finished, was cancelled or preempted since.
        plan = Plan(moves=self._compact() if self._free_rows else [])
        self._rt_rows = self._realtime_rows()         # no holes now: rows 0 .. r-1 are the streams
        full = self._full_turn()
        starting = self._starting_turn() if not full or len(self.by_row) == self._rt_rows else None
        full = full and starting is None
        budget = self.config.prefill_tokens
        batch_turn = full and (self._steps % self.config.admit_every == 0 or self.running_rows == 0)
        self._steps += full
        self.realtime_steps += not full
        # Sequences part-way through their prompt go first: they already hold a row.
        prefilling = SeqState.PREFILL
        for seq in [s for s in self.by_row if s.state is prefilling]:
            if budget > 0 and (full and seq.row < self._decode_limit or seq.realtime):
                budget -= self._prefill_chunk(plan, seq, budget)
        while budget > 0:
            admitted = self._next_admission(batch_turn, realtime_only=not full)
            if admitted is None:
                break
            self._place(plan, admitted)
            budget -= self._prefill_chunk(plan, admitted, budget)
        if full:
            plan.rows = min(len(self.by_row), self._decode_limit)
        else:       # the realtime tier, rows 0 .. r-1
            plan.realtime_only = True
            plan.rows = self._rt_rows
        if starting is not None:
            plan.starting_only = True
            self.starting_steps += 1
        self._decode(plan, starting or self.by_row[: plan.rows])
        for chunk in plan.prefill:
            seq = chunk.seq
            seq.prefilled = chunk.end
            if chunk.last:      # its first token comes from this step's prefill logits
                seq.state = SeqState.RUNNING
                seq.inflight += 1
                plan.owners[seq.row] = (seq, seq.epoch)
        return plan

    def _decode(self, plan: Plan, rows: list[Seq]) -> None:
        """Every ``decodable`` sequence of ``rows`` decodes one more token; the plan's context is
        their longest ``context`` before it. One pass, the properties written out: it runs over
        every row at every step, on the loop thread."""
        decode, owners, context, running = plan.decode, plan.owners, 0, SeqState.RUNNING
        for seq in rows:
            if seq.state is running:
                ahead = seq.generated + seq.inflight
                if ahead < seq.budget:
                    decode.append(seq)
                    if len(seq.prompt) + ahead > context:
                        context = len(seq.prompt) + ahead
                    if seq.prefilled > context:
                        context = seq.prefilled
                    seq.inflight += 1
                    owners[seq.row] = (seq, seq.epoch)
        plan.context = context

    def _full_turn(self) -> bool:
        """Whether this step decodes every row, or the realtime rows alone (see the module)."""
        config = self.config
        if config.batch_every == 1 and config.batch_every_starting == 1:
            return True
        rt = self.by_row[: self._rt_rows]
        if not (rt or self.waiting_rt) or len(self.by_row) == self._rt_rows:   # no batch rows
            self._rt_turn = 0
            return True
        starting = bool(self.waiting_rt) or any(
            s.state is SeqState.PREFILL or s.generated + s.inflight < config.first_tokens for s in rt)
        self._rt_turn += 1
        period = config.batch_every_starting if starting else config.batch_every
        if self._rt_turn >= period:
            self._rt_turn = 0
            return True
        return False

    def _starting_turn(self) -> list[Seq] | None:
        """On a step over the realtime rows alone: the streams waiting for their first chunk, and
        those low on audio, if this is a step for them alone (see the module); else None."""
        if self.config.playing_every == 1:
            return None
        running, first = SeqState.RUNNING, self.config.first_tokens
        rt = [s for s in self.by_row[: self._rt_rows] if s.state is running]
        if not any(s.generated + s.inflight < first for s in rt):
            self._playing_turn = 0       # none waits for its first chunk: an ordinary step
            return None
        low = self._low_lead_rule()
        starting = [s for s in rt if s.generated + s.inflight < first or low is not None and low(s)]
        if len(starting) == len(rt):
            self._playing_turn = 0       # none playing yet: an ordinary step
            return None
        self._playing_turn += 1
        if self._playing_turn >= self.config.playing_every:
            self._playing_turn = 0
            return None
        return starting

    def _low_lead_rule(self) -> Callable[[Seq], bool] | None:
        """Whether a stream's audio (its tokens less the first chunk's lookahead) runs less than
        ``low_lead_s`` ahead of its player; None when leads are not tracked."""
        config = self.config
        lead = config.low_lead_s
        if not lead:
            return None
        now, rate, behind = config.clock(), config.playback_tokens_per_s, config.first_tokens - config.frame_tokens
        return lambda seq: seq.first_chunk_at is not None and \
            (seq.generated - behind) / rate - (now - seq.first_chunk_at) < lead

    def postprocess(self, plan: Plan, tokens: dict[int, list[int]]) -> list[Seq]:
        """``tokens``: row -> the tokens that row produced this step: one per decoded row, and one
        from the last prefill logits for a sequence whose prompt completed. Returns the sequences
        that finished."""
        finished, owners, running = [], plan.owners, SeqState.RUNNING
        config = self.config
        first, now = config.first_tokens, config.clock() if config.low_lead_s else 0.0
        for row, toks in tokens.items():
            seq, epoch = owners[row]
            if seq.epoch != epoch or seq.state is not running:
                continue    # preempted since (it draws these again on resume), or already ended
            for tok in toks:
                if seq.state is not running:
                    break                   # it ended on an earlier token of this list
                seq.inflight -= 1
                seq.generated += 1
                seq.tokens.append(tok)
                if seq.generated == first and seq.realtime and seq.first_chunk_at is None:
                    seq.first_chunk_at = now
                if seq.stop_token is not None and tok == seq.stop_token:
                    self._finish(seq, "eos")
                elif seq.generated >= seq.budget:
                    self._finish(seq, "budget")
            if seq.state is SeqState.FINISHED:
                finished.append(seq)
        return finished

    # Internals ------------------------------------------------------------------------------

    def _prefill_chunk(self, plan: Plan, seq: Seq, budget: int) -> int:
        size = len(seq.prefix)
        end = min(size, seq.prefilled + budget)
        plan.prefill.append(PrefillChunk(seq, seq.prefilled, end, end == size))
        return end - seq.prefilled

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
        if (running_rt or self.waiting_rt) and self.running_rows >= self.config.realtime_max_rows \
                and self.running_rows - running_rt >= self.batch_floor:
            return None
        return self.waiting_batch.popleft()

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
            seq = min(itertools.islice(waiting, FAIR_WINDOW),
                      key=lambda s: held[s.group] if s.group is not None else 0)
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
            return                              # no stream: the realtime tier is empty
        cap = self.config.realtime_max_rows
        if self.running_rows + len(self.waiting_rt) <= min(self.capacity, cap):
            return          # within the lowest limit below (which the count of streams only raises)
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
            for seq, hole in zip(sorted((s for s in tier if not lo <= s.row < hi),
                                        key=lambda s: -s.row), holes):
                moves.append((seq.row, hole, seq.context))
                slots[seq.row], slots[hole] = None, seq
                seq.row = hole
        self.by_row = cast("list[Seq]", slots[:n])   # rows 0 .. n-1 are all held now
        return moves

