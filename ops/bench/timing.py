"""The benchmarks' timing helpers: wall-clock seconds of a block on the host, and device
milliseconds of a call on CUDA (events around the work, the device synchronized before and after).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass
class Stopwatch:
    start: float = 0.0
    s: float = 0.0  # elapsed seconds once the block has ended


@contextlib.contextmanager
def stopwatch() -> Iterator[Stopwatch]:
    """Wall-clock seconds of a block (CPU work: nothing to synchronize)."""
    sw = Stopwatch(start=time.perf_counter())
    try:
        yield sw
    finally:
        sw.s = time.perf_counter() - sw.start


def mean_device_ms(fn: Callable[[], object], reps: int = 20) -> float:
    """Device milliseconds per call of ``fn``: one call to warm up, then ``reps`` calls queued back
    to back between two CUDA events."""
    import torch

    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def median_device_ms(fn: Callable[[], object], reps: int = 50, warmup: int = 3) -> float:
    """Median device milliseconds of ``reps`` calls of ``fn``, each between its own CUDA events and
    synchronized before the next, after ``warmup`` untimed calls."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)
