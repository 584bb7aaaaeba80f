"""Benchmark the Orpheus engine against transformers generate() and the part-1 engine.

    python ops/bench_orpheus.py --model random-3b --lines 500 --subset 32 --streams 128 \\
        --json ops/results/orpheus.json --markdown ops/results/orpheus.md       # on the GPU
    python ops/bench_orpheus.py --model /tmp/tiny --device cpu --lines 4 --subset 2 --streams 2 \\
        --max-budget 35 --rows 4 --context 256                                   # smoke

Approaches, all in one run on one device (``--approaches``):
  fast       the continuous-batching engine (part 2) on the whole workload (W1), and on the subset
  sync       the same engine on W1 with the overlap off (one step at a time): what overlap is worth
  part1      part 1's engine (length-bucketed static batches, eager) on the subset
  static     transformers generate() on padded static batches of --max-batch, on the subset
  generate1  transformers generate() one job at a time, on --generate1-jobs jobs
  w2         W1 running plus --streams realtime streams arriving over --spread seconds
  single     one realtime stream alone (median of --single-runs)
  logits     our decoder against transformers with the same weights (relative L2 of logits)
  profile    the fast engine on the first --profile-jobs W1 chunks under the torch profiler:
             device time by kernel kind and the largest kernels (orpheus_bench/profile.py)

``--quant`` takes weight modes (none, int8, nf4, fp8), each optionally with ``/kv8``: that mode's
fast engine then runs an fp8 KV cache (``--quant none,none/kv8,fp8/kv8`` compares the three); its
rows and the logits check are labelled with the suffix.

Lines are split as the renderer splits them (to the engine's max_text_chars). Random weights never
emit end-of-speech, so every chunk runs a budget of 82.03 tokens per second of expected speech (15
characters per second), capped at --max-budget; the output says so.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ops.orpheus_bench import report  # noqa: E402
from ops.orpheus_bench.models import load_model  # noqa: E402
from ops.orpheus_bench.runs import PARAMS, Job, run_generate, run_synth  # noqa: E402
from ops.orpheus_bench.streams import gc_pauses, logits_check, run_streams  # noqa: E402
from pipeline import text as texts  # noqa: E402
from pipeline.engines.orpheus.engine import OrpheusEngine, text_chars_for, token_budget  # noqa: E402

WARM_TOKENS = 35
DEFAULT_CORPUS = Path(__file__).resolve().parents[1] / "shared" / "corpus" / "bench.txt"


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="random-3b", help="random-3b or a checkpoint folder/hub id")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--lines", type=int, default=500, help="corpus lines for W1, spread over the file")
    ap.add_argument("--subset", type=int, default=32, help="lines for the slow baselines")
    ap.add_argument("--max-budget", type=int, default=2000, help="token cap per chunk")
    ap.add_argument("--streams", type=int, default=128, help="W2 realtime streams")
    ap.add_argument("--spread", type=float, default=2.0, help="W2 streams arrive over this many s")
    ap.add_argument("--w2-counts", default="16,64,128",
                    help="W2 stream counts, each over its own background batch")
    ap.add_argument("--w2-lines", type=int, default=150, help="W1 lines behind each W2 run")
    ap.add_argument("--realtime-max-rows", type=int, default=0)
    ap.add_argument("--w2-configs", default="",
                    help="comma list of "
                         "EVERY:STARTING:MAX_ROWS[:SWITCH_MS[:STEADY[:PAUSE[:LOOKAHEAD[:RAMP]]]]] "
                         "scheduler settings to run W2 under (realtime_batch_every, ..._starting, "
                         "realtime_max_rows; 0 = the engine's default; the GIL switch interval; "
                         "the scheduler's steady_every, 1 = no starting-only steps; pause_batch: "
                         "1 pauses the batch rows over the cap, 0 preempts them, absent: the "
                         "engine's default; then the first chunk's lookahead in frames, 1 or 2; "
                         "then ramp_tokens, absent: the engine's default, 0: none); "
                         "empty: the engine's defaults only")
    ap.add_argument("--w2-lead", type=float, default=3.0,
                    help="s the W2 background batch runs before the first stream arrives")
    ap.add_argument("--w2-collect-at", type=float, default=0.0,
                    help="force a full GC collection this many s into each W2 run (the streams "
                         "arrive from --w2-lead s on), and record how long it held the GIL; "
                         "0: none")
    ap.add_argument("--lookaheads", default="2",
                    help="comma list of first-chunk lookaheads (frames) for the single stream")
    ap.add_argument("--single-runs", type=int, default=5)
    ap.add_argument("--generate1-jobs", type=int, default=2)
    ap.add_argument("--quant", default="none",
                    help="comma list of none,int8,nf4,fp8; MODE/kv8: that mode's fast engine "
                         "with an fp8 KV cache (e.g. none/kv8,fp8/kv8)")
    ap.add_argument("--approaches", default="logits,fast,single,w2,part1,static,generate1")
    ap.add_argument("--profile-jobs", type=int, default=300)
    ap.add_argument("--max-batch", type=int, default=64, help="batch of the static baselines")
    ap.add_argument("--rows", type=int, default=0, help="KV-cache rows (0: from free memory)")
    ap.add_argument("--kv8-rows", type=int, default=0,
                    help="KV-cache rows of the modes with an fp8 cache (0: --rows); the same "
                         "memory holds twice bf16's rows")
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--realtime-rows", type=int, default=0)
    ap.add_argument("--no-graphs", action="store_true")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    return ap.parse_args(argv)


def workload(args) -> tuple[list[Job], list[Job], list[Job]]:
    """W1 chunks, the subset's chunks, and the realtime streams (one chunk each)."""
    lines = [ln.strip() for ln in args.corpus.read_text().splitlines() if ln.strip()]
    chars = text_chars_for(args.context)
    budget = lambda text: token_budget(text, 1.0, 28, args.max_budget)  # noqa: E731

    def chunks(picked, prefix):
        return [Job(f"{prefix}{i}.{k}", c, budget(c))
                for i, line in enumerate(picked)
                for k, c in enumerate(texts.split_chunks(texts.normalize(line), chars))]

    w1 = chunks(lines[:: max(1, len(lines) // args.lines)][: args.lines], "w1-")
    sub = chunks(lines[:: max(1, len(lines) // args.subset)][: args.subset], "sub-")
    rt = [Job(f"rt-{i}", c.text, c.budget, realtime=True)
          for i, c in enumerate(chunks(lines[1::3], "x")[: args.streams])]
    return w1, sub, rt


def measure(label, fn, lm, quant, rows, stats=None):
    import torch

    before = stats() if stats else None
    if lm.device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    res = fn()
    peak = torch.cuda.max_memory_allocated() / 2**30 if lm.device.startswith("cuda") else None
    rows.append(report.row(label, quant, res, peak))
    if stats:
        after = stats()
        d = {k: after[k] - before[k] for k in after}
        rows[-1]["mean_rows"] = d["decode_rows"] / max(1, d["steps"])
        rows[-1]["idle_slot_waste"] = 1 - d["decode_rows"] / max(1, d["padded_rows"])
        rows[-1]["ms_per_step"] = 1000 * res.wall_s / max(1, d["steps"])
        rows[-1]["prefill_step_share"] = d["prefill_steps"] / max(1, d["steps"])
        rows[-1]["device_ms_per_step"] = 1000 * d["device_s"] / max(1, d["steps"])
        rows[-1]["host_ms_per_step"] = {k[:-2]: round(1000 * d[k] / max(1, d["steps"]), 2)
                                        for k in ("schedule_s", "launch_s", "codec_s", "wait_s",
                                                  "post_s")}
        print("  ms per step by stage:", rows[-1]["host_ms_per_step"], flush=True)
    print(report.line(rows[-1]), f"[{time.perf_counter() - t:.1f}s]", flush=True)


def make_engine(args, lm, loop: str, max_batch: int = 0, budget_max: int | None = None,
                kv_dtype: str = "auto"):
    rows = args.kv8_rows if kv_dtype == "fp8" and args.kv8_rows else args.rows
    return OrpheusEngine(lm, max_batch=max_batch or rows, params=PARAMS, budget_policy="keep",
                         budget_slack=1.0, budget_min=28 if budget_max is None else budget_max,
                         budget_max=budget_max or args.max_budget, loop=loop, context=args.context,
                         cuda_graphs=not args.no_graphs, realtime_rows=args.realtime_rows,
                         realtime_max_rows=args.realtime_max_rows, kv_dtype=kv_dtype)


KV_SUFFIXES = {"": "auto", "kv8": "fp8"}     # --quant MODE[/kv8] -> the fast engine's kv_dtype


def parse_mode(item: str) -> tuple[str, str]:
    """``none``, ``fp8/kv8`` ... -> (weight quantization, kv_dtype)."""
    quant, _, kv = item.partition("/")
    if kv not in KV_SUFFIXES:
        raise SystemExit(f"--quant {item!r}: after the slash only kv8 (an fp8 KV cache)")
    return quant, KV_SUFFIXES[kv]


def w2_counters(fast) -> dict[str, float]:
    """The loop's (``loop_stats``), scheduler's and runner's running totals, for a W2 run's
    differences."""
    sched = fast.loop.scheduler
    out = loop_stats(fast)()
    out.update(preempted=sched.preempted, realtime_only_steps=sched.realtime_steps,
               starting_only_steps=sched.starting_steps,
               mixed_steps=fast.loop.runner.mixed_steps)
    out.update({f"host_{k}": v for k, v in vars(fast.loop.runner.host).items()})
    out["clock_s"] = time.monotonic()
    return out


def allocator_counts() -> dict[str, int]:
    """The CUDA caching allocator's running counts that a stall could come from: cudaMalloc calls,
    and retries (a failed cudaMalloc: the cache freed, with a device sync, and tried again)."""
    import torch

    if not torch.cuda.is_available():
        return {}
    m = torch.cuda.memory_stats()
    return {k: m.get(k, 0) for k in ("num_alloc_retries", "num_device_alloc",
                                     "num_sync_all_streams", "num_device_free")}


@contextmanager
def forced_collection(at_s: float):
    """A full GC collection ``at_s`` seconds into the block (none if 0), on a timer thread: the
    collector's worst case, on purpose. Yields a dict: when it ran and how long it took (ms), and
    the objects frozen out of its reach (engine.freeze_boot_objects)."""
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


def stall_record(fast, since: float, alloc_before: dict) -> dict:
    """Where a W2 run's stalls were: the loop's slow steps and the codec lanes' slow rounds that
    began after ``since`` (time.monotonic), in ms from it, and the allocator's counts in the run."""
    def ms(v: float) -> float:
        return round(1000 * v, 1)

    steps = [s for s in fast.loop.stats.slow_steps if s[0] >= since]
    out = {"slow_steps": len(steps),
           # (at, gap before, launch, wait, post; ms) and the sequences live, the 12 longest
           "slowest_steps": [[ms(s[0] - since), *map(ms, s[1:5]), s[5]] for s in
                             sorted(steps, key=lambda s: -(s[1] + s[2] + s[3] + s[4]))[:12]]}
    for lane in fast.loop.codec_worker.lanes.values():
        rounds = [r for r in lane.stats.slow_rounds if r[0] >= since]
        out[f"codec_{lane.name}_slow_rounds"] = [[ms(r[0] - since), ms(r[1]), r[2]] for r in
                                                 sorted(rounds, key=lambda r: -r[1])[:8]]
    after = allocator_counts()
    out["allocator"] = {k: after[k] - alloc_before.get(k, 0) for k in after}
    return out


def w2_step_figures(before: dict, after: dict) -> dict:
    """Steps, preemptions, device and host time per step of a W2 run, from two ``w2_counters``."""
    d = {k: after[k] - before[k] for k in after}
    rt_steps, full_steps = d["realtime_steps"], d["steps"] - d["realtime_steps"]

    def per(total: float, steps: float, digits: int = 2) -> float:
        return round(1000 * total / max(1, steps), digits)

    return {
        "preempted": d["preempted"], "realtime_only_steps": d["realtime_only_steps"],
        "starting_only_steps": d["starting_only_steps"], "steps": d["steps"],
        "device_ms_per_step": {"realtime_only": per(d["realtime_device_s"], rt_steps),
                               "full": per(d["full_device_s"], full_steps)},
        # device time before the decode step (moves, prefill), per step that prefilled apart (a
        # mixed step's prefill is inside its decode pass: not timed apart)
        "prefill_device_ms_per_prefill_step": per(d["prefill_device_s"],
                                                  d["prefill_steps"] - d["mixed_steps"]),
        "prefill_steps": d["prefill_steps"],
        # of those, steps that prefilled inside the decode pass (runner.py's mixed steps)
        "mixed_steps": d["mixed_steps"],
        # the runner's part of the launch time, by part, per step (realtime-only or not)
        "runner_host_ms_per_step": {k[5:]: per(v, d["steps"], 3) for k, v in d.items()
                                    if k.startswith("host_")},
        "launch_ms_per_step": {
            "realtime_only": per(d["realtime_launch_s"], rt_steps),
            "full": per(d["launch_s"] - d["realtime_launch_s"], full_steps)},
        # the loop's wall time per step, and the shares of it the device had the steps' work and
        # the loop waited for it (near 1: device-bound; low: the host holds the steps back)
        "wall_ms_per_step": per(d["clock_s"], d["steps"]),
        "device_share": round(d["device_s"] / max(d["clock_s"], 1e-9), 3),
        "wait_share": round(d["wait_s"] / max(d["clock_s"], 1e-9), 3),
    }


def bench_mode(args, item, jobs, rows, meta, first: bool):
    """Every approach for the first quantization mode; the fast engine's W1 for the others. The
    fast engine's rows are labelled ``MODE/kv8`` where it runs an fp8 KV cache; the other
    approaches run transformers' cache or the static loop, labelled by the weights alone."""
    w1, sub, rt = jobs
    quant, kv_dtype = parse_mode(item)
    todo = args.approaches.split(",")
    if not first:
        todo = [a for a in todo if a in ("fast", "logits", "single", "w2", "profile")]
    lm = load_model(args.model, args.device, args.dtype, quant)
    meta["device"] = lm.choice.name
    label = f"{quant}" if lm.quant.applied == quant else f"{quant}->{lm.quant.applied}"
    fast_label = label + ("/kv8" if kv_dtype == "fp8" else "")
    mode = meta.setdefault("modes", {})[item] = {
        "applied": lm.quant.applied, "kernel": lm.quant.kernel, "fallback": lm.quant.fallback,
        "dtype": lm.choice.dtype_name, "kv_dtype": kv_dtype, "weights_gib": weight_gib(lm.model)}
    if "logits" in todo:
        from pipeline.engines.orpheus.prompt import prompt_ids

        prompts = [prompt_ids(lm.tokenizer, j.text, "tara") for j in sub[:4]]
        mode["logits_vs_transformers"] = logits_check(lm, prompts, kv_dtype=kv_dtype)
        print("logits", mode["logits_vs_transformers"], flush=True)
    t = time.perf_counter()
    fast = make_engine(args, lm, "continuous", kv_dtype=kv_dtype)
    mode["fast_boot_s"] = time.perf_counter() - t
    mode["fast_info"] = {k: fast.info.extra.get(k) for k in
                         ("cuda_graphs", "codec_graphs", "mixed_graphs", "graph_capture_s",
                          "context", "kv_dtype", "fallbacks")}
    mode["fast_rows"] = fast.info.max_batch
    print("fast engine", mode["fast_rows"], "rows", mode["fast_info"], flush=True)
    run_synth(fast, [Job(j.key, j.text, WARM_TOKENS) for j in w1[:64]])     # warm the paths
    if "fast" in todo:
        measure("fast W1", lambda: run_synth(fast, w1), lm, fast_label, rows, loop_stats(fast))
        measure("fast subset", lambda: run_synth(fast, sub), lm, fast_label, rows, loop_stats(fast))
    if "profile" in todo and lm.device.startswith("cuda"):
        from ops.orpheus_bench.profile import profile_kernels

        mode["profile"] = profile_kernels(lambda: run_synth(fast, w1[: args.profile_jobs]))
        print("profile", json.dumps(mode["profile"], indent=1), flush=True)
    if "sync" in todo:       # the same engine, one step at a time: what the overlap is worth
        fast.loop.overlap = False
        measure("fast W1, no overlap", lambda: run_synth(fast, w1), lm, fast_label, rows,
                loop_stats(fast))
        fast.loop.overlap = True
    if "single" in todo:
        for lookahead in map(int, args.lookaheads.split(",")):
            set_lookahead(fast, lookahead)
            fast.loop.first_chunk_phases(clear=True)
            res = [run_streams(fast, [], [j], 0, 0).streams[0] for j in rt[: args.single_runs]]
            key = "single_stream" if lookahead == 2 else f"single_stream_lookahead{lookahead}"
            mode[key] = {"ttfb_s": sorted(s.ttfb for s in res), "rtf": sorted(s.rtf for s in res),
                         "first_chunk_ms": phases_ms(fast.loop.first_chunk_phases(clear=True))}
            print("single, lookahead", lookahead, mode[key], flush=True)
        set_lookahead(fast, 2)
    if "w2" in todo:
        background = [j for j in w1 if int(j.key[3:].split(".")[0]) < args.w2_lines]
        sched = fast.loop.scheduler
        defaults = (sched.full_every, sched.full_every_starting, sched.realtime_max_rows)
        base_steady, base_pause, base_ramp = sched.steady_every, sched.pause_batch, \
            sched.ramp_tokens
        switch = sys.getswitchinterval()
        configs = [c.split(":") for c in args.w2_configs.split(",") if c] or [[]]
        for config in configs:
            # EVERY:STARTING:MAX_ROWS[:SWITCH_MS[:STEADY[:PAUSE[:LOOKAHEAD[:RAMP]]]]]
            # (see --w2-configs)
            steady = int(config[4]) if len(config) > 4 and int(config[4]) else base_steady
            ramp = int(config[7]) if len(config) > 7 else base_ramp
            pause = config[5] == "1" if len(config) > 5 else base_pause
            lookahead = int(config[6]) if len(config) > 6 and int(config[6]) else 2
            set_lookahead(fast, lookahead)
            config = tuple(int(v) or d for v, d in zip(config[:3], defaults)) + \
                defaults[len(config[:3]):] + (float(config[3]) if len(config) > 3 else 0.0,)
            sched.full_every, sched.full_every_starting, sched.realtime_max_rows = config[:3]
            sched.steady_every, sched.pause_batch, sched.ramp_tokens = max(1, steady), pause, ramp
            sys.setswitchinterval(config[3] / 1000 or switch)
            name = "w2" if config[:3] == defaults and not config[3] and steady == base_steady \
                and pause == base_pause and lookahead == 2 and ramp == base_ramp else \
                "w2_every{}_starting{}_max{}".format(*config) + \
                (f"_switch{config[3]:g}ms" if config[3] else "") + \
                (f"_steady{steady}" if steady > 1 else "") + \
                ("_paused" if pause else "_preempting") + \
                (f"_lookahead{lookahead}" if lookahead != 2 else "") + \
                (f"_ramp{ramp}" if ramp != base_ramp else "")
            mode[name] = {"config": dict(zip(("batch_every", "batch_every_starting",
                                             "realtime_max_rows", "switch_interval_ms",
                                             "steady_every", "pause_batch", "first_lookahead",
                                             "ramp_tokens"),
                                            config[:3] + (config[3] or switch * 1000, steady,
                                                          pause, lookahead, ramp)))}
            for count in map(int, args.w2_counts.split(",")):
                before, alloc, since = w2_counters(fast), allocator_counts(), time.monotonic()
                fast.loop.first_chunk_phases(clear=True)
                with gc_pauses() as pauses, forced_collection(args.w2_collect_at) as forced:
                    r = run_streams(fast, background, rt[:count], args.spread,
                                    lead_s=args.w2_lead)
                summary = mode[name][count] = r.summary()
                summary["gc"] = {f"gen{g}": v for g, v in pauses.items()}
                summary["stalls"] = stall_record(fast, since, alloc)
                if forced:
                    summary["stalls"]["forced_collection"] = forced
                summary["stalls"]["underrun_at_ms"] = sorted(
                    round(1000 * (t - since), 1) for st in r.streams for t in st.underrun_at)[:24]
                summary.update(w2_step_figures(before, w2_counters(fast)))
                summary["first_chunk_ms"] = phases_ms(fast.loop.first_chunk_phases(clear=True))
                if r.background is not None:
                    summary["background_x_real_time"] = r.background.audio_s / r.background.wall_s
                print(name, count, summary, flush=True)
        sched.full_every, sched.full_every_starting, sched.realtime_max_rows = defaults
        sched.steady_every, sched.pause_batch, sched.ramp_tokens = base_steady, base_pause, base_ramp
        set_lookahead(fast, 2)
        sys.setswitchinterval(switch)
    fast.close()
    del fast
    if "part1" in todo:
        part1 = make_engine(args, lm, "static", max_batch=args.max_batch)
        run_synth(part1, [Job(j.key, j.text, WARM_TOKENS) for j in sub])
        measure("part-1 engine subset", lambda: run_synth(part1, sub), lm, label, rows)
        part1.close()
    if "static" in todo:
        run_generate(lm, [Job(j.key, j.text, WARM_TOKENS) for j in sub[:8]], args.max_batch)
        measure("generate() static subset", lambda: run_generate(lm, sub, args.max_batch), lm,
                label, rows)
    if "generate1" in todo:
        jobs1 = sub[: args.generate1_jobs]
        measure("generate() 1-at-a-time", lambda: run_generate(lm, jobs1, 1), lm, label, rows)
    del lm


def set_lookahead(engine, frames: int) -> None:
    """The first-chunk lookahead of streams submitted from now on (as the engine's setting does)."""
    from pipeline.constants import SNAC_TOKENS_PER_FRAME
    from pipeline.engines.orpheus.engine import stream_state

    engine.first_lookahead = frames
    engine.loop.stream_factory = lambda seed, rt: stream_state(seed, rt, frames)
    first = stream_state(0, True, frames).first_ready_frames * SNAC_TOKENS_PER_FRAME
    engine.loop.scheduler.first_tokens = first


def phases_ms(phases: list[dict]) -> dict:
    """Median milliseconds of each phase on the way to the first chunk (loop.Live)."""
    import statistics

    if not phases:
        return {}
    return {k: round(1000 * statistics.median(p[k] for p in phases), 1) for k in phases[0]}


def weight_gib(model) -> float:
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total / 2**30


def loop_stats(engine):
    def snap():
        s = engine.loop.stats
        return {"steps": s.steps, "tokens": s.tokens, "decode_rows": s.decode_rows,
                "padded_rows": s.padded_rows, "codec_calls": engine.loop.codec_worker.calls,
                "codec_s": engine.loop.codec_worker.busy_s, "launch_s": s.launch_s,
                "schedule_s": s.schedule_s, "wait_s": s.wait_s,
                "post_s": s.post_s, "prefill_steps": s.prefill_steps,
                "device_s": s.full_device_s + s.realtime_device_s,
                "realtime_steps": s.realtime_steps, "realtime_device_s": s.realtime_device_s,
                "full_device_s": s.full_device_s, "realtime_launch_s": s.realtime_launch_s,
                "prefill_device_s": s.prefill_device_s}
    return snap


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None) -> int:
    args = parse(argv)
    jobs = workload(args)
    w1 = jobs[0]
    meta = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "commit": git_commit(), "model": args.model, "w1_lines": args.lines,
            "w1_chunks": len(w1), "w1_tokens": sum(j.budget for j in w1),
            "subset_lines": args.subset, "subset_chunks": len(jobs[1]),
            "subset_tokens": sum(j.budget for j in jobs[1]), "streams": len(jobs[2]),
            "context": args.context, "max_budget": args.max_budget,
            "budgets": "82.03 tok per expected second (15 chars/s), ignore_eos (random weights "
                       "never stop)"}
    rows: list[dict] = []
    items = args.quant.split(",")
    for item in items:
        parse_mode(item)                   # a typo fails now, not after the first mode's runs
    for n, item in enumerate(items):
        bench_mode(args, item, jobs, rows, meta, first=n == 0)
        report.write(meta, rows, args.json, args.markdown)
    print(report.markdown(meta, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
