"""Streams beside batch work in the engine alone: per scenario config and stream count, a
background batch with realtime streams arriving over it, and where the run's time went (the
loop's and the runner's counters, slow steps and codec rounds, the allocator, the GC)."""

from __future__ import annotations

import gc
import sys
import threading
import time
from contextlib import contextmanager

from ops.bench.orpheus.fast import FastEngine
from ops.bench.orpheus.runs import Job
from ops.bench.orpheus.scenarios import load_scenarios
from ops.bench.orpheus.streams import gc_pauses, run_streams


def bench_streams(args, fast: FastEngine, batch: list[Job], rt: list[Job], mode: dict) -> None:
    """Streams beside batch work: per scenario config (an engine booted with its settings), per
    count of --stream-counts, the first --batch-lines lines of the batch workload running with that
    many realtime streams arriving over --spread s."""
    background = [j for j in batch if int(j.key.split("-", 1)[1].split(".")[0]) < args.batch_lines]
    base = fast.base_scheduler
    defaults = (base.batch_every, base.batch_every_starting, base.realtime_max_rows)
    base_steady, base_pause = base.playing_every, base.pause_batch
    base_lead, base_lookahead = fast.base.realtime.low_lead_ms, fast.base.realtime.first_lookahead
    switch = sys.getswitchinterval()
    for c in load_scenarios(args.scenario):
        tuning = fast.base.under(c)
        fast.use(tuning)
        sched = fast.engine.loop.scheduler.config
        steady, pause = sched.playing_every, sched.pause_batch
        lead, lookahead = tuning.realtime.low_lead_ms, tuning.realtime.first_lookahead
        config = (sched.batch_every, sched.batch_every_starting, sched.realtime_max_rows, float(c.switch_interval_ms))
        sys.setswitchinterval(config[3] / 1000 or switch)
        name = streams_key(
            config, (steady, pause, lookahead, lead), (base_steady, base_pause, base_lookahead, base_lead), defaults
        )
        mode[name] = {
            "config": dict(
                zip(
                    (
                        "batch_every",
                        "batch_every_starting",
                        "realtime_max_rows",
                        "switch_interval_ms",
                        "playing_every",
                        "pause_batch",
                        "first_lookahead",
                        "low_lead_ms",
                    ),
                    config[:3] + (config[3] or switch * 1000, steady, pause, lookahead, lead),
                )
            )
        }
        for count in map(int, args.stream_counts.split(",")):
            summary = mode[name][count] = streams_run(args, fast.engine, background, rt[:count])
            print(name, count, summary, flush=True)
    sys.setswitchinterval(switch)


def streams_key(config: tuple, settings: tuple, base: tuple, defaults: tuple) -> str:
    """The JSON key of a scenario config's figures: "streams" for the engine's defaults, else the
    settings that differ (the key ops/bench/e2e and older raw files use)."""
    steady, pause, lookahead, lead = settings
    if config[:3] == defaults and not config[3] and settings == base:
        return "streams"
    return (
        "streams_every{}_starting{}_max{}".format(*config)
        + (f"_switch{config[3]:g}ms" if config[3] else "")
        + (f"_steady{steady}" if steady > 1 else "")
        + ("_paused" if pause else "_preempting")
        + (f"_lookahead{lookahead}" if lookahead != 2 else "")
        + (f"_lead{lead}ms" if lead != base[3] else "")
    )


def streams_run(args, fast, background: list[Job], streams: list[Job]) -> dict:
    """One run of ``streams`` beside ``background``: the streams' summary with its GC pauses,
    stalls, step figures and first-chunk phases."""
    before, alloc, since = streams_counters(fast), allocator_counts(), time.monotonic()
    fast.loop.observer.first_chunk_phases(clear=True)
    with gc_pauses() as pauses, forced_collection(args.collect_at) as forced:
        r = run_streams(fast, background, streams, args.spread, lead_s=args.lead)
    summary = r.summary()
    summary["gc"] = {f"gen{g}": v for g, v in pauses.items()}
    summary["stalls"] = stall_record(fast, since, alloc)
    if forced:
        summary["stalls"]["forced_collection"] = forced
    summary["stalls"]["underrun_at_ms"] = sorted(
        round(1000 * (t - since), 1) for st in r.streams for t in st.underrun_at
    )[:24]
    summary.update(streams_step_figures(before, streams_counters(fast)))
    summary["first_chunk_ms"] = phases_ms(fast.loop.observer.first_chunk_phases(clear=True))
    if r.background is not None:
        summary["background_x_real_time"] = r.background.audio_s / r.background.wall_s
    return summary


def streams_counters(fast) -> dict[str, float]:
    """The loop's (``loop_stats``), scheduler's and runner's running totals, for a run of
    streams' differences."""
    sched = fast.loop.scheduler
    out = loop_stats(fast)()
    out.update(
        preempted=sched.preempted,
        realtime_only_steps=sched.realtime_steps,
        starting_only_steps=sched.starting_steps,
        mixed_steps=fast.loop.runner.mixed_steps,
    )
    out.update({f"host_{k}": v for k, v in vars(fast.loop.runner.host).items()})
    out["clock_s"] = time.monotonic()
    return out


def streams_step_figures(before: dict, after: dict) -> dict:
    """Steps, preemptions, device and host time per step of a run of streams, from two
    ``streams_counters``."""
    d = {k: after[k] - before[k] for k in after}
    rt_steps, full_steps = d["realtime_steps"], d["steps"] - d["realtime_steps"]

    def per(total: float, steps: float, digits: int = 2) -> float:
        return round(1000 * total / max(1, steps), digits)

    return {
        "preempted": d["preempted"],
        "realtime_only_steps": d["realtime_only_steps"],
        "starting_only_steps": d["starting_only_steps"],
        "steps": d["steps"],
        "device_ms_per_step": {
            "realtime_only": per(d["realtime_device_s"], rt_steps),
            "full": per(d["full_device_s"], full_steps),
        },
        # device time before the decode step (moves, prefill), per step that prefilled apart (a
        # mixed step's prefill is inside its decode pass: not timed apart)
        "prefill_device_ms_per_prefill_step": per(d["prefill_device_s"], d["prefill_steps"] - d["mixed_steps"]),
        "prefill_steps": d["prefill_steps"],
        # of those, steps that prefilled inside the decode pass (runner.py's mixed steps)
        "mixed_steps": d["mixed_steps"],
        # the runner's part of the launch time, by part, per step (realtime-only or not)
        "runner_host_ms_per_step": {k[5:]: per(v, d["steps"], 3) for k, v in d.items() if k.startswith("host_")},
        "launch_ms_per_step": {
            "realtime_only": per(d["realtime_launch_s"], rt_steps),
            "full": per(d["launch_s"] - d["realtime_launch_s"], full_steps),
        },
        # the loop's wall time per step, and the shares of it the device had the steps' work and
        # the loop waited for it (near 1: device-bound; low: the host holds the steps back)
        "wall_ms_per_step": per(d["clock_s"], d["steps"]),
        "device_share": round(d["device_s"] / max(d["clock_s"], 1e-9), 3),
        "wait_share": round(d["wait_s"] / max(d["clock_s"], 1e-9), 3),
    }


def stall_record(fast, since: float, alloc_before: dict) -> dict:
    """Where a run of streams stalled: the loop's slow steps and the codec lanes' slow rounds that
    began after ``since`` (time.monotonic), in ms from it, and the allocator's counts in the run."""

    def ms(v: float) -> float:
        return round(1000 * v, 1)

    steps = [s for s in fast.loop.stats.slow_steps if s[0] >= since]
    out = {
        "slow_steps": len(steps),
        # (at, gap before, launch, wait, post; ms) and the sequences live, the 12 longest
        "slowest_steps": [
            [ms(s[0] - since), *map(ms, s[1:5]), s[5]]
            for s in sorted(steps, key=lambda s: -(s[1] + s[2] + s[3] + s[4]))[:12]
        ],
    }
    for lane in fast.loop.codec_thread.lanes.values():
        rounds = [r for r in lane.stats.slow_rounds if r[0] >= since]
        out[f"codec_{lane.name}_slow_rounds"] = [
            [ms(r[0] - since), ms(r[1]), r[2]] for r in sorted(rounds, key=lambda r: -r[1])[:8]
        ]
    after = allocator_counts()
    out["allocator"] = {k: after[k] - alloc_before.get(k, 0) for k in after}
    return out


def allocator_counts() -> dict[str, int]:
    """The CUDA caching allocator's running counts that a stall could come from: cudaMalloc calls,
    and retries (a failed cudaMalloc: the cache freed, with a device sync, and tried again)."""
    import torch

    if not torch.cuda.is_available():
        return {}
    m = torch.cuda.memory_stats()
    return {
        k: m.get(k, 0) for k in ("num_alloc_retries", "num_device_alloc", "num_sync_all_streams", "num_device_free")
    }


@contextmanager
def forced_collection(at_s: float):
    """A full GC collection ``at_s`` seconds into the block (none if 0), on a timer thread: the
    collector's worst case, on purpose. Yields a dict: when it ran and how long it took (ms), and
    the objects frozen out of its reach (pipeline/gcfreeze.py)."""
    out: dict = {}
    if not at_s:
        yield out
        return
    began = time.perf_counter()

    def collect():
        t = time.perf_counter()
        gc.collect()
        out["at_ms"] = round(1000 * (t - began), 1)
        out["took_ms"] = round(1000 * (time.perf_counter() - t), 2)

    timer = threading.Timer(at_s, collect)
    timer.start()
    try:
        yield out
    finally:
        timer.join()
        # after the run: counting them walks the frozen list with the GIL held (~40 ms at 450k)
        out["frozen_objects"] = gc.get_freeze_count()


def phases_ms(phases: list[dict]) -> dict:
    """Median milliseconds of each phase on the way to the first chunk (serving/stats.py FirstChunkMarks)."""
    import statistics

    if not phases:
        return {}
    return {k: round(1000 * statistics.median(p[k] for p in phases), 1) for k in phases[0]}


def loop_stats(engine):
    codec_thread = engine.loop.codec_thread
    lane_counts = getattr(codec_thread.codec, "lane_counts", None)  # a fake codec has none

    def snap():
        s = engine.loop.stats
        lane = codec_thread.lanes[False].stats
        counts = lane_counts(False) if lane_counts else {}
        return {
            "codec_batch_calls": lane.calls,
            "codec_batch_windows": lane.windows,
            "codec_batch_frames": lane.frames,
            **{f"codec_batch_{k}": v for k, v in counts.items()},
            "steps": s.steps,
            "tokens": s.tokens,
            "decode_rows": s.decode_rows,
            "padded_rows": s.padded_rows,
            "codec_calls": engine.loop.codec_thread.calls,
            "codec_s": engine.loop.codec_thread.busy_s,
            "launch_s": s.launch_s,
            "schedule_s": s.schedule_s,
            "wait_s": s.wait_s,
            "post_s": s.post_s,
            "prefill_steps": s.prefill_steps,
            "device_s": s.full_device_s + s.realtime_device_s,
            "realtime_steps": s.realtime_steps,
            "realtime_device_s": s.realtime_device_s,
            "full_device_s": s.full_device_s,
            "realtime_launch_s": s.realtime_launch_s,
            "prefill_device_s": s.prefill_device_s,
        }

    return snap
