"""The loop thread's host (Python) time per step, measured on the CPU.

On the GPU a step over 128 streams takes about 6 ms of device time, and the loop thread must plan,
launch and post-process each step in less, in Python, sharing the GIL with the codec lanes and the
callers. This drives the real ``Scheduler`` and ``EngineLoop`` (schedule, collect, postprocess, the
frame assemblers fed, the stats) with a runner that has a step's tokens at once (valid audio codes,
so the assemblers build frames), at a steady mix: a third of the rows realtime streams, the rest
batch jobs, each replaced by a new one when it ends. Then it times ``ModelRunner.launch``'s host part
with the tiny model, its decode step (a graph replay on the GPU) left out.

Run: python -m ops.bench.kernels.host_overhead [--rows 16,128,384] [--steps 2000] [--profile 384]
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import pstats
import random
import statistics
import time
from dataclasses import replace

import torch

from pipeline.constants import SNAC_TOKENS_PER_FRAME
from pipeline.engines.orpheus.config import RealtimeConfig
from pipeline.engines.orpheus.engine import scheduler_config, stream_state
from pipeline.engines.orpheus.model.sampling import SamplingParams
from pipeline.engines.orpheus.serving.loop import EngineLoop
from pipeline.engines.orpheus.serving.launched import LaunchedStep
from pipeline.engines.orpheus.serving.runner import ModelRunner, ladder
from pipeline.engines.orpheus.serving.scheduler import Plan, Scheduler, Seq
from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE, END_OF_SPEECH, audio_range

CONTEXT = 2048
PROMPT_TOKENS = (40, 60)
BUDGETS = (200, 600)


class Workload:
    """New sequences: prompts of 40-60 tokens, budgets of 200-600, end-of-speech drawn at a token
    number between half the budget and a little past it (those end on their budget)."""

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)
        self.ends: dict[int, int] = {}  # key -> the token number that is end-of-speech
        self._keys = itertools.count()

    def make(self, realtime: bool) -> Seq:
        key = next(self._keys)
        prompt = [self.rng.randrange(1000, 128000) for _ in range(self.rng.randint(*PROMPT_TOKENS))]
        budget = self.rng.randint(*BUDGETS)
        self.ends[key] = self.rng.randint(budget // 2, budget + 50)
        return Seq(key, prompt, budget, realtime=realtime, seed=key, stop_token=END_OF_SPEECH)


class InstantRunner(ModelRunner):
    """A ModelRunner whose device work is replaced by drawing the step's tokens on the host:
    ``collect`` and ``padded_batch`` are the real ones, ``launch`` hands over host tensors as the
    real one does. Its own time (``launch_s``) is not the loop's and is taken out of the figures."""

    def __init__(self, rows: int, ends: dict[int, int]):  # no model, no device state
        self.batch_sizes = ladder(rows)
        self.ends = ends
        self.launch_s = 0.0

    def launch(self, plan: Plan) -> LaunchedStep:
        t0 = time.perf_counter()
        b = self.padded_batch(plan.rows) if plan.decode else 0
        decoded = [0] * b
        for seq in plan.decode:
            decoded[seq.row] = self._draw(seq)
        first = [c.seq for c in plan.prefill if c.last]
        launched = LaunchedStep(
            [s.row for s in plan.decode],
            torch.tensor(decoded) if b else None,
            [s.row for s in first],
            torch.tensor([self._draw(s) for s in first]) if first else None,
            None,
        )
        self.launch_s += time.perf_counter() - t0
        return launched

    def _draw(self, seq: Seq) -> int:
        n = seq.generated + seq.inflight  # this token's number (1-based), counted at schedule
        if n == self.ends[seq.key]:
            return END_OF_SPEECH
        return audio_range((n - 1) % SNAC_TOKENS_PER_FRAME)[0] + (n * 37 + seq.key) % 4096


def scheduler_for(rows: int, realtime_max_rows: int = 0) -> Scheduler:
    """As engine.build_loop sets it up on a GPU, with ``realtime_max_rows`` allowed to decode
    beside streams (by default every row, so the step covers all of them)."""
    config = replace(scheduler_config(rows, RealtimeConfig(), on_gpu=True), realtime_max_rows=realtime_max_rows or rows)
    return Scheduler(rows, CONTEXT, config=config)


def steady_loop(rows: int, seed: int = 0) -> tuple[EngineLoop, InstantRunner, Workload]:
    work = Workload(seed)
    runner = InstantRunner(rows, work.ends)
    loop = EngineLoop(
        runner, scheduler_for(rows), codec=None, on_final=lambda live, audio: None, stream_factory=stream_state
    )
    loop.close()  # its threads stop; this thread steps it by hand
    realtime = rows // 3
    loop.submit([(work.make(i < realtime), None) for i in range(rows)], sink=None)
    return loop, runner, work


def step(loop: EngineLoop, runner: InstantRunner, work: Workload) -> tuple[float, float, bool]:
    """One step of the loop thread (inbox, schedule, launch, collect, postprocess); returns its
    host seconds without the fake runner's, the scheduler's part, and whether it was realtime-only.
    A sequence that ended is replaced by a new one of its tier (outside the timing)."""
    s = loop.stats
    fake, sched, rt = runner.launch_s, s.schedule_s, loop.scheduler.realtime_steps
    t0 = time.perf_counter()
    loop._admit(block=False)
    loop._step()
    took = time.perf_counter() - t0 - (runner.launch_s - fake)
    worker = loop.codec_thread
    for lane in worker.lanes.values():
        for live in lane.take_ended(0):
            worker.drop(live)
            loop.submit([(work.make(live.seq.realtime), None)], sink=None)
    return took, s.schedule_s - sched, loop.scheduler.realtime_steps != rt


def measure(rows: int, steps: int, warmup: int, seed: int = 0) -> dict:
    loop, runner, work = steady_loop(rows, seed)
    for _ in range(warmup):
        step(loop, runner, work)
    totals, schedules, rt = [], [], []
    for _ in range(steps):
        took, sched, realtime_only = step(loop, runner, work)
        totals.append(took)
        schedules.append(sched)
        rt.append(realtime_only)
    us = 1e6
    full = [t for t, r in zip(totals, rt) if not r]
    only = [t for t, r in zip(totals, rt) if r]
    return dict(
        rows=rows,
        decoded=loop.stats.decode_rows / max(1, loop.stats.steps),
        schedule=statistics.mean(schedules) * us,
        rest=statistics.mean(t - s for t, s in zip(totals, schedules)) * us,
        total=statistics.mean(totals) * us,
        median=statistics.median(totals) * us,
        full=statistics.mean(full) * us if full else 0.0,
        realtime_only=statistics.mean(only) * us if only else 0.0,
    )


class NoDecodeRunner(ModelRunner):
    """The real runner on the tiny model with its decode step left out: on the GPU that is one
    graph replay, so what remains is launch's host work (the active mask, the copies, events)."""

    def _step(self, b: int, length: int) -> None:
        pass


def measure_launch(rows: int, reps: int) -> dict:
    """``launch`` + ``collect`` of decode-only plans: over the same rows as the step before, over
    alternately all rows and the realtime third (a full step, then a realtime-only one), and over a
    row set that changes every step."""
    from transformers import LlamaForCausalLM

    from pipeline.engines.orpheus.tiny import tiny_llama_config

    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_llama_config()).eval()
    runner = NoDecodeRunner(model, rows, CONTEXT, SamplingParams(), logits_lo=CUSTOM_TOKEN_BASE, use_graphs=False)
    seqs = [Seq(i, [1], 100, row=i) for i in range(rows)]

    def plan(decode: list[Seq]) -> Plan:
        return Plan(decode=decode, rows=decode[-1].row + 1, context=100)

    full, rt = plan(seqs), plan(seqs[: max(1, rows // 3)])
    changing = [plan([s for s in seqs if s.row != i]) for i in range(rows)]
    cases = {
        "same": lambda i: full,
        "alternating": lambda i: (full, rt)[i % 2],
        "changing": lambda i: changing[i % rows],
    }
    out = {}
    for name, pick in cases.items():
        for i in range(reps // 10):
            runner.collect(runner.launch(pick(i)))
        t0 = time.perf_counter()
        for i in range(reps):
            runner.collect(runner.launch(pick(i)))
        out[name] = (time.perf_counter() - t0) / reps * 1e6
    return out


def profile(rows: int, steps: int, warmup: int) -> None:
    loop, runner, work = steady_loop(rows)
    for _ in range(warmup):
        step(loop, runner, work)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        step(loop, runner, work)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="16,128,384", help="comma list of row counts")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=600, help="steps before timing: all admitted")
    ap.add_argument("--repeats", type=int, default=3, help="runs per size (the same sequences); the fastest is shown")
    ap.add_argument("--launch-reps", type=int, default=2000, help="0: skip the runner's launch")
    ap.add_argument("--profile", type=int, default=0, help="cProfile the loop at this many rows")
    args = ap.parse_args(argv)
    if args.profile:
        profile(args.profile, args.steps, args.warmup)
        return 0
    print(
        "loop thread, host us/step (mean; fake runner excluded): schedule = Scheduler.schedule; "
        "rest = inbox, launch bookkeeping, collect, postprocess, assemblers, stats"
    )
    print(
        f"{'rows':>5} {'decoded':>8} {'schedule':>9} {'rest':>8} {'total':>8} {'median':>8} {'full':>8} {'rt-only':>8}"
    )
    for rows in map(int, args.rows.split(",")):
        runs = [measure(rows, args.steps, args.warmup) for _ in range(args.repeats)]
        r = min(runs, key=lambda m: m["total"])
        print(
            f"{rows:>5} {r['decoded']:>8.1f} {r['schedule']:>9.1f} {r['rest']:>8.1f} "
            f"{r['total']:>8.1f} {r['median']:>8.1f} {r['full']:>8.1f} {r['realtime_only']:>8.1f}",
            flush=True,
        )
    if args.launch_reps:
        print(
            "ModelRunner.launch + collect, decode-only, tiny model on the CPU, decode step left "
            "out (us/step; on the GPU add pinned staging, copies and events)"
        )
        print(f"{'rows':>5} {'same':>8} {'altern.':>8} {'changing':>8}")
        for rows in map(int, args.rows.split(",")):
            r = measure_launch(rows, args.launch_reps)
            print(f"{rows:>5} {r['same']:>8.1f} {r['alternating']:>8.1f} {r['changing']:>8.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
