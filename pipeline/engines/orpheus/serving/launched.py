"""What a launched step carries until it is collected (its host copies and CUDA events), and the
runner's host time by part: the model runner's records, apart from its device work."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LaunchedStep:
    rows: list[int]  # rows decoded this step
    decoded: torch.Tensor | None  # host tensor [B] of last tokens (None: no decode)
    first_rows: list[int]  # rows whose prompt completed this step
    first: torch.Tensor | None  # host tensor of their first tokens
    done: torch.cuda.Event | None  # CUDA event after the copies (None on the CPU)
    start: torch.cuda.Event | None = None  # CUDA event before the step's work (timing)
    prefilled: torch.cuda.Event | None = None  # CUDA event after its moves and prefill (if any)

    def device_ms(self) -> float | None:
        """Device time from the step's first work to its last copy (after ``collect``): with
        the overlap, the step starts when the one before it ends."""
        if self.start is None or self.done is None:  # on the CPU: neither is recorded
            return None
        return self.start.elapsed_time(self.done)

    def prefill_ms(self) -> float | None:
        """The part of ``device_ms`` before the decode step: moves and prefill."""
        if self.start is None or self.prefilled is None:
            return None
        return self.start.elapsed_time(self.prefilled)


@dataclass
class HostTimes:
    """The runner's host seconds in ``launch``, by part (the loop's launch time, less the
    scheduler's): where a slow launch goes. ``begin``: setting up the rows whose prompt completed
    and drawing their first tokens (eager), inside ``prefill``."""

    moves: float = 0.0  # with the step's start event
    prefill: float = 0.0
    begin: float = 0.0
    decode: float = 0.0  # the active mask and the graph's replay (or the eager step)
    copies: float = 0.0  # the tokens' device-to-host copies and the events
