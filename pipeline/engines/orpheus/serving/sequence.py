"""What the scheduler (admission.py, scheduler.py) works on: a sequence and its state, and the plan of one step.
No torch here either: the model runner reads a ``Plan`` and turns it into device work."""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass, field


class SeqState(enum.Enum):
    WAITING = "waiting"  # no row yet
    PREFILL = "prefill"  # holds a row, prompt partly in the cache
    RUNNING = "running"  # decoding one token per step
    FINISHED = "finished"  # row given back


@dataclass(eq=False)
class Seq:
    key: Hashable
    prompt: list[int]
    budget: int  # most new tokens
    realtime: bool = False
    seed: int = 0
    stop_token: int | None = None  # None: run to the budget
    state: SeqState = SeqState.WAITING
    row: int = -1
    prefilled: int = 0  # prompt tokens already in the cache (or on their way)
    generated: int = 0
    inflight: int = 0  # tokens launched whose value is not back yet
    epoch: int = 0  # +1 at each preemption: older steps' tokens are stale
    tokens: list[int] = field(default_factory=list)  # generated so far (a resume prefills them)
    finish_reason: str | None = None  # "eos" | "budget" | "cancelled"
    order: int = 0  # arrival order, set by the scheduler
    preemptions: int = 0
    slot_steps: float = 0.0  # graph rows spent on it: its decode steps + its share of idle
    idle_slot_steps: float = 0.0  # its share of the padded rows of the steps it decoded in
    first_chunk_at: float | None = None  # the scheduler's clock when its first chunk's tokens came
    group: Hashable | None = None  # its job: realtime admission takes turns between jobs
    again: bool = False  # a piece asked again (SynthesisRequest.again): ahead of the batch work waiting

    @property
    def prefix(self) -> list[int]:
        """What a prefill puts in the cache: the prompt, and after a preemption what was generated."""
        return self.prompt + self.tokens if self.tokens else self.prompt

    @property
    def context(self) -> int:
        """Cache positions this sequence needs once the next step's input is written."""
        return max(self.prefilled, len(self.prompt) + self.generated + self.inflight)

    @property
    def decodable(self) -> bool:
        """Running, and another token stays within the budget."""
        return self.state is SeqState.RUNNING and self.generated + self.inflight < self.budget


@dataclass(frozen=True)
class PrefillChunk:
    seq: Seq
    start: int  # prompt positions [start, end) go into the cache this step
    end: int
    last: bool  # the prefix is complete: its last logits give the next token


@dataclass
class Plan:
    moves: list[tuple[int, int, int]] = field(default_factory=list)  # (from, to, positions), in order
    prefill: list[PrefillChunk] = field(default_factory=list)
    decode: list[Seq] = field(default_factory=list)  # RUNNING, by row; rows 0..n-1
    rows: int = 0  # the rows the decode step runs over: all in use, or the realtime tier
    context: int = 0  # positions the decode step attends to (its longest row)
    realtime_only: bool = False  # a step over the realtime rows alone
    starting_only: bool = False  # ... and of those, the streams waiting for their first chunk
    # Who held each row when the plan was made, and in which epoch: the tokens of a row go to
    # this sequence, whatever moved since.
    owners: dict[int, tuple[Seq, int]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.prefill or self.decode)
