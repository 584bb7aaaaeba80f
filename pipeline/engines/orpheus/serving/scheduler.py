"""Continuous batching, one step at a time: which sequences are prefilled and which decode.

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

Which sequences wait and which hold a row (the rows' two tiers, admission, the realtime cap that
pauses or preempts batch rows) is ``Admission``'s, in admission.py; this module composes the step
over them. Prompts are prefilled in chunks of at most ``prefill_tokens`` tokens per step in total,
so a long prompt does not stall the running streams, and batch work is admitted every
``admit_every`` steps, so its prompts are prefilled a few at a time instead of one per step (each
prefill is an eager pass), or at every step while that many rows are free and no stream runs (a
batch filling its rows); realtime work at every step.
"""

from __future__ import annotations

from collections.abc import Callable

from pipeline.engines.orpheus.serving.admission import Admission, SchedulerConfig
from pipeline.engines.orpheus.serving.sequence import Plan, PrefillChunk, Seq, SeqState

__all__ = ["Plan", "PrefillChunk", "Scheduler", "SchedulerConfig", "Seq", "SeqState"]


class Scheduler(Admission):
    def __init__(self, rows: int, max_context: int, config: SchedulerConfig = SchedulerConfig()):
        super().__init__(rows, max_context, config)
        self.realtime_steps = 0  # steps that decoded the realtime rows alone
        self.starting_steps = 0  # ... of which the starting streams alone
        self._playing_turn = 0
        self._steps = 0  # full steps (batch admission counts these)
        self._rt_turn = 0

    def reset(self) -> None:
        super().reset()
        self._rt_turn = self._playing_turn = 0

    # One step -------------------------------------------------------------------------------

    def schedule(self) -> Plan:
        self._held = None  # realtime rows per job, counted at this step's first need
        self._preempt_for_realtime()
        # Holes exist only where something finished, was cancelled or preempted since.
        plan = Plan(moves=self._compact() if self._free_rows else [])
        self._rt_rows = self._realtime_rows()  # no holes now: rows 0 .. r-1 are the streams
        full = self._full_turn()
        starting = self._starting_turn() if not full or len(self.by_row) == self._rt_rows else None
        full = full and starting is None
        budget = self.config.prefill_tokens
        batch_turn = full and (self._steps % self.config.admit_every == 0 or self.running_rows == 0 or self._filling())
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
        else:  # the realtime tier, rows 0 .. r-1
            plan.realtime_only = True
            plan.rows = self._rt_rows
        if starting is not None:
            plan.starting_only = True
            self.starting_steps += 1
        self._decode(plan, starting or self.by_row[: plan.rows])
        for chunk in plan.prefill:
            seq = chunk.seq
            seq.prefilled = chunk.end
            if chunk.last:  # its first token comes from this step's prefill logits
                seq.state = SeqState.RUNNING
                seq.inflight += 1
                plan.owners[seq.row] = (seq, seq.epoch)
        return plan

    def _filling(self) -> bool:
        """Whether batch work may be admitted at every step: with no realtime stream running or
        waiting, while at least ``admit_every`` rows are free for it (a batch starting, or many
        pieces ending at once). Waiting steps for rows to free would only leave these idle."""
        if self.waiting_rt or self._rt_rows:
            return False
        return self.capacity - len(self.by_row) - self.reserved >= self.config.admit_every

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
        if not (rt or self.waiting_rt) or len(self.by_row) == self._rt_rows:  # no batch rows
            self._rt_turn = 0
            return True
        starting = bool(self.waiting_rt) or any(
            s.state is SeqState.PREFILL or s.generated + s.inflight < config.first_tokens for s in rt
        )
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
            self._playing_turn = 0  # none waits for its first chunk: an ordinary step
            return None
        low = self._low_lead_rule()
        starting = [s for s in rt if s.generated + s.inflight < first or low is not None and low(s)]
        if len(starting) == len(rt):
            self._playing_turn = 0  # none playing yet: an ordinary step
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
        return lambda seq: (
            seq.first_chunk_at is not None and (seq.generated - behind) / rate - (now - seq.first_chunk_at) < lead
        )

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
                continue  # preempted since (it draws these again on resume), or already ended
            for tok in toks:
                if seq.state is not running:
                    break  # it ended on an earlier token of this list
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
