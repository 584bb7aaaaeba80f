"""The loop thread under contention for the GIL, on the CPU.

On the H200 a step over 128 realtime streams took 2.5-3.9 ms of host launch time, against about
0.08 ms of the loop's own Python (host_overhead.py), and the device time of such a step exceeded
its graph's by about 1 ms: the loop waits for the GIL while the codec threads and the callers'
threads run. This runs the real ``EngineLoop`` on its own thread, the real codec lanes, and a
caller thread per realtime stream (as the GPU worker's thread pool has one per task), with a
runner and a codec that spend their device time waiting (the GIL released, as a CUDA sync does):

- the runner draws a step's tokens at once (host_overhead.InstantRunner) and holds the step for
  ``2.4 + 0.02 * batch`` ms of device time (the decode graph's on the H200: 4.8 ms at 128 rows),
  steps queued one after another, so the device idles only while the host is late;
- the codec waits 0.043 ms per frame rendered (its CUDA graphs on the H200).

It reports the loop's launch time per step (realtime-only and full), the share of the wall time
the simulated device sat idle, and the tokens per second, with and without the callers' threads.

Run: python -m ops.bench.kernels.contention [--streams 16,128] [--seconds 8]
"""

from __future__ import annotations

import argparse
import itertools
import queue
import threading
import time

import numpy as np

from pipeline.constants import SNAC_SAMPLES_PER_FRAME
from pipeline.engines.base import AudioChunk
from pipeline.engines.orpheus.engine import stream_state
from pipeline.engines.orpheus.serving.loop import EngineLoop

from ops.bench.kernels.host_overhead import InstantRunner, Workload, scheduler_for

STEP_BASE_MS, STEP_PER_ROW_MS = 2.4, 0.02
CODEC_MS_PER_FRAME = 0.043


class Done:
    """A launched step's completion: ``synchronize`` waits for its simulated end."""

    def __init__(self, end: float):
        self.end = end

    def synchronize(self) -> None:
        wait = self.end - time.perf_counter()
        if wait > 0:
            time.sleep(wait)


class TimedRunner(InstantRunner):
    def __init__(self, rows: int, ends: dict[int, int]):
        super().__init__(rows, ends)
        self.free_at = 0.0  # when the simulated device finishes what is queued
        self.busy_s = 0.0

    def launch(self, plan):
        launched = super().launch(plan)
        rows = self.padded_batch(plan.rows) if plan.decode else 0
        took = (STEP_BASE_MS + STEP_PER_ROW_MS * rows) / 1000 if rows or plan.prefill else 0.0
        start = max(time.perf_counter(), self.free_at)
        self.free_at = start + took
        self.busy_s += took
        launched.done = Done(self.free_at)
        return launched


class WaitingCodec:
    def decode_windows(self, frames: np.ndarray, keys, urgent: bool = False) -> np.ndarray:
        g, w = frames.shape[:2]
        time.sleep(g * w * CODEC_MS_PER_FRAME / 1000)
        return np.zeros((g, w * SNAC_SAMPLES_PER_FRAME), dtype=np.float32)


def final_chunk(live, audio) -> AudioChunk:
    return AudioChunk(live.key, audio if audio is not None else np.zeros(0, np.float32), True)


def run(streams: int, rows: int, seconds: float, callers: bool, seed: int = 0) -> dict:
    work = Workload(seed)
    runner = TimedRunner(rows, work.ends)
    sched = scheduler_for(rows, realtime_max_rows=max(1, min(rows, streams)))  # the streams' cap beside batch work
    loop = EngineLoop(runner, sched, WaitingCodec(), final_chunk, stream_factory=stream_state)
    stop = threading.Event()
    shared: queue.SimpleQueue = queue.SimpleQueue()
    finals = itertools.count()

    def drain(sink: queue.SimpleQueue) -> None:
        """The batch task's caller; without ``callers``, the streams' too (one thread for all),
        each ended stream followed by a new one."""
        while not stop.is_set():
            try:
                chunk = sink.get(timeout=0.1)
            except queue.Empty:
                continue
            if chunk.final:
                next(finals)
                if chunk.key == "rt":
                    loop.submit([(work.make(True), "rt")], sink)

    def stream_caller() -> None:  # one stream after another, as a task would
        sink: queue.SimpleQueue = queue.SimpleQueue()
        while not stop.is_set():
            loop.submit([(work.make(True), "rt")], sink)
            while not stop.is_set():
                try:
                    if sink.get(timeout=0.1).final:
                        next(finals)
                        break
                except queue.Empty:
                    pass

    loop.submit([(work.make(False), "batch") for _ in range(4 * rows)], shared)
    threads = [threading.Thread(target=drain, args=(shared,), daemon=True)]
    if callers:
        threads += [threading.Thread(target=stream_caller, daemon=True) for _ in range(streams)]
    else:  # the streams' chunks go to the queue the batch's caller drains
        loop.submit([(work.make(True), "rt") for _ in range(streams)], shared)
    for t in threads:
        t.start()
    time.sleep(1.0)  # admitted, prefilled, under way
    st = loop.stats
    before = (st.steps, st.realtime_steps, st.launch_s, st.realtime_launch_s, st.tokens, runner.busy_s)
    t0 = time.perf_counter()
    time.sleep(seconds)
    wall = time.perf_counter() - t0
    after = (st.steps, st.realtime_steps, st.launch_s, st.realtime_launch_s, st.tokens, runner.busy_s)
    stop.set()
    loop.close()
    steps, rt_steps, launch, rt_launch, tokens, busy = (b - a for a, b in zip(before, after))
    full = steps - rt_steps
    return {
        "streams": streams,
        "callers": callers,
        "steps": steps,
        "launch_ms_realtime_only": 1000 * rt_launch / max(1, rt_steps),
        "launch_ms_full": 1000 * (launch - rt_launch) / max(1, full),
        "device_idle": max(0.0, 1 - busy / wall),
        "tok_s": tokens / wall,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", default="16,128")
    ap.add_argument("--rows", type=int, default=384)
    ap.add_argument("--seconds", type=float, default=8.0)
    args = ap.parse_args(argv)
    print(
        f"{'streams':>7} {'callers':>8} {'steps':>6} {'launch ms rt-only':>18} "
        f"{'launch ms full':>15} {'device idle':>12} {'tok/s':>8}"
    )
    for streams in map(int, args.streams.split(",")):
        for callers in (False, True):
            r = run(streams, args.rows, args.seconds, callers)
            print(
                f"{streams:>7} {str(callers):>8} {r['steps']:>6} "
                f"{r['launch_ms_realtime_only']:>18.2f} {r['launch_ms_full']:>15.2f} "
                f"{r['device_idle']:>12.1%} {r['tok_s']:>8.0f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
