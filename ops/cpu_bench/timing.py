"""The one timing helper of the CPU benchmark."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass
class Stopwatch:
    start: float = 0.0
    s: float = 0.0          # elapsed seconds once the block has ended


@contextlib.contextmanager
def stopwatch() -> Iterator[Stopwatch]:
    """Wall-clock seconds of a block (CPU work: nothing to synchronize)."""
    sw = Stopwatch(start=time.perf_counter())
    try:
        yield sw
    finally:
        sw.s = time.perf_counter() - sw.start
