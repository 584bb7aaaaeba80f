"""Benchmark the Orpheus engine against transformers generate() and the reference (static) loop.

    python -m ops.bench.orpheus --model random-3b --lines 500 --subset 32 --streams 128 \\
        --json .bench/orpheus.json                                               # on the GPU
    python -m ops.bench.orpheus streams --scenario ops/bench/scenarios/first-lookahead.toml
    python -m ops.bench.orpheus --model /tmp/tiny --device cpu --lines 4 --subset 2 --streams 2 \\
        --max-budget 35 --rows 4 --context 256                                   # smoke

Commands (each a set of approaches; none: logits,fast,single,streams,reference,static,generate1):
  batch      logits,fast,reference,static,generate1: the batch workload and its baselines
  streams    streams: realtime streams beside batch work, under each --scenario
  single     single: one realtime stream alone
  profile    profile: the fast engine under the torch profiler

Approaches, all in one run on one device (``--approaches``):
  fast       the continuous-batching engine on the whole batch workload, and on the subset
  sync       the same engine on the batch workload with the overlap off (one step at a time)
  reference  the reference loop (length-bucketed static batches, eager) on the subset
  static     transformers generate() on padded static batches of --max-batch, on the subset
  generate1  transformers generate() one job at a time, on --generate1-jobs jobs
  streams    streams beside batch work: the batch workload running plus --streams realtime streams
             arriving over --spread seconds
  single     one realtime stream alone (median of --single-runs)
  logits     our decoder against transformers with the same weights (relative L2 of logits)
  profile    the fast engine on the first --profile-jobs batch chunks under the torch profiler:
             device time by kernel kind and the largest kernels (ops/bench/orpheus/profile.py)

The JSON keeps the figures under their approach's row ("fast batch" for the batch workload) and per
quantization mode under ``meta.modes`` ("streams" and "streams_<scheduler settings>" for streams beside
batch work; ops/bench/e2e reads them).

``--quant`` takes weight modes (none, int8, nf4, fp8), each optionally with ``/kv8`` or
``/kvmodel``: that mode's fast engine then runs an fp8 KV cache, or one in the model's dtype;
without a suffix it runs the engine's default for the GPU (fp8 from compute capability 8.9, as
``SYNTH_ORPHEUS_KV_DTYPE=auto`` does). ``--quant none/kvmodel,none/kv8`` compares the two; the rows
of an fp8 cache and their logits check are labelled ``/kv8``.

Lines are split as the renderer splits them (to the engine's max_text_chars). Random weights never
emit end-of-speech, so every chunk runs a budget of 82.03 tokens per second of expected speech (15
characters per second), capped at --max-budget; the output says so.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path

from ops.bench import SHARED_CORPUS, git_commit
from ops.bench.orpheus import report
from ops.bench.orpheus.beside_batch import bench_streams, loop_stats, phases_ms
from ops.bench.orpheus.fast import FastEngine, Tuning
from ops.bench.orpheus.models import load_model
from ops.bench.orpheus.runs import PARAMS, Job, run_generate, run_synth
from ops.bench.orpheus.scenarios import load_scenarios
from ops.bench.orpheus.streams import logits_check, run_streams
from pipeline import text as texts
from pipeline.engines.orpheus.codec.snac import CODEC_DTYPES
from pipeline.engines.orpheus.config import SWITCHES, OrpheusConfig, RealtimeConfig, Switches
from pipeline.engines.orpheus.engine import OrpheusEngine, text_chars_for, token_budget
from pipeline.engines.orpheus.model.device import resolve_kv_dtype
from pipeline.engines.orpheus.reference import ReferenceEngine

WARM_TOKENS = 35
DEFAULT_APPROACHES = "logits,fast,single,streams,reference,static,generate1"
COMMANDS = {
    "batch": "logits,fast,reference,static,generate1",
    "streams": "streams",
    "single": "single",
    "profile": "profile",
}


def parse(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv.pop(0) if argv and argv[0] in COMMANDS else None
    ap = argparse.ArgumentParser(
        prog="python -m ops.bench.orpheus [batch|streams|single|profile]",
        description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    ap.add_argument("--model", default="random-3b", help="random-3b or a checkpoint folder/hub id")
    ap.add_argument("--corpus", type=Path, default=SHARED_CORPUS)
    ap.add_argument("--lines", type=int, default=500, help="corpus lines of the batch workload, spread over the file")
    ap.add_argument("--subset", type=int, default=32, help="lines for the slow baselines")
    ap.add_argument("--max-budget", type=int, default=2000, help="token cap per chunk")
    ap.add_argument("--streams", type=int, default=128, help="realtime streams")
    ap.add_argument("--spread", type=float, default=2.0, help="the streams arrive over this many s")
    ap.add_argument(
        "--stream-counts",
        default="16,64,128",
        help="counts of streams beside batch work, each over its own background batch",
    )
    ap.add_argument(
        "--batch-lines", type=int, default=150, help="lines of the batch workload behind each run of streams"
    )
    ap.add_argument("--realtime-max-rows", type=int, default=0)
    ap.add_argument(
        "--scenario",
        type=Path,
        action="append",
        default=[],
        help="a TOML file of scheduler settings to run the streams under, one "
        "[[config]] table each (ops/bench/scenarios/; repeatable); none: the "
        "engine's defaults only",
    )
    ap.add_argument(
        "--lead", type=float, default=3.0, help="s the background batch runs before the first stream arrives"
    )
    ap.add_argument(
        "--collect-at",
        type=float,
        default=0.0,
        help="force a full GC collection this many s into each run of streams (they "
        "arrive from --lead s on), and record how long it held the GIL; 0: none",
    )
    ap.add_argument(
        "--lookaheads", default="2", help="comma list of first-chunk lookaheads (frames) for the single stream"
    )
    ap.add_argument(
        "--switch-intervals",
        default="",
        help="comma list of the interpreter's switch intervals (ms; 0: Python's own) to run the batch "
        "workload under again, one run each after the default one, in the same engine",
    )
    ap.add_argument("--single-runs", type=int, default=5)
    ap.add_argument("--generate1-jobs", type=int, default=2)
    ap.add_argument(
        "--quant",
        default="none",
        help="comma list of none,int8,nf4,fp8; MODE/kv8 or MODE/kvmodel: that "
        "mode's fast engine with an fp8 KV cache or one in the model's dtype "
        "(none: the GPU's default, fp8 from sm_89); e.g. none/kvmodel,none/kv8",
    )
    ap.add_argument("--approaches", default=COMMANDS.get(command, DEFAULT_APPROACHES))
    ap.add_argument("--profile-jobs", type=int, default=300)
    ap.add_argument("--max-batch", type=int, default=64, help="batch of the static baselines")
    ap.add_argument("--rows", type=int, default=0, help="KV-cache rows (0: from free memory)")
    ap.add_argument(
        "--kv8-rows",
        type=int,
        default=0,
        help="KV-cache rows of the modes with an fp8 cache (0: --rows); the same memory holds twice bf16's rows",
    )
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--realtime-rows", type=int, default=0)
    ap.add_argument("--no-graphs", action="store_true")
    ap.add_argument(
        "--disable",
        default="",
        help=f"comma list of the engine's faster paths to turn off ({', '.join(SWITCHES)}), "
        "as SYNTH_ORPHEUS_DISABLE does",
    )
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument(
        "--codec-dtype",
        default="auto",
        choices=CODEC_DTYPES,
        help="the codec's activations (auto: float16 on CUDA where the checkpoint passes its check)",
    )
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args(argv)
    args.command = command
    return args


def workload(args) -> tuple[list[Job], list[Job], list[Job]]:
    """The batch workload's chunks, the subset's chunks, and the realtime streams (one chunk each)."""
    lines = [ln.strip() for ln in args.corpus.read_text().splitlines() if ln.strip()]
    chars = text_chars_for(args.context)
    budget = lambda text: token_budget(text, 1.0, 28, args.max_budget)  # noqa: E731

    def chunks(picked, prefix):
        return [
            Job(f"{prefix}{i}.{k}", c, budget(c))
            for i, line in enumerate(picked)
            for k, c in enumerate(texts.split_chunks(texts.normalize(line), chars))
        ]

    batch = chunks(lines[:: max(1, len(lines) // args.lines)][: args.lines], "batch-")
    sub = chunks(lines[:: max(1, len(lines) // args.subset)][: args.subset], "sub-")
    # as many streams as the largest count asks for: the corpus's lines again where it has too few
    wanted = max([args.streams, *(int(c) for c in args.stream_counts.split(",") if c)])
    pool = chunks(lines[1::3], "x")
    rt = [
        Job(f"rt-{i}", c.text, c.budget, realtime=True)
        for i, c in enumerate((pool * (1 + wanted // max(1, len(pool))))[:wanted])
    ]
    return batch, sub, rt


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
        rows[-1]["host_ms_per_step"] = {
            k[:-2]: round(1000 * d[k] / max(1, d["steps"]), 2)
            for k in ("schedule_s", "launch_s", "codec_s", "wait_s", "post_s")
        }
        print("  ms per step by stage:", rows[-1]["host_ms_per_step"], flush=True)
        codec = {k[len("codec_batch_") :]: v for k, v in d.items() if k.startswith("codec_batch_")}
        rows[-1]["codec_batch_lane"] = codec
        calls = max(1, codec["calls"])
        print(
            f"  codec batch lane: {codec['calls']} calls, {codec['windows'] / calls:.1f} windows"
            f" and {codec['frames'] / max(1, codec['windows']):.1f} frames a window;",
            f"graph replays {codec.get('replays', '-')}, padding windows {codec.get('padded_windows', '-')},",
            f"eager calls {codec.get('eager_calls', '-')} ({codec.get('eager_windows', '-')} windows)",
            flush=True,
        )
    print(report.line(rows[-1]), f"[{time.perf_counter() - t:.1f}s]", flush=True)


def make_engine(
    args,
    lm,
    max_batch: int = 0,
    budget_max: int | None = None,
    kv_dtype: str = "auto",
    engine=OrpheusEngine,
    tuning: Tuning | None = None,
):
    """The fast engine (``engine``: ``ReferenceEngine`` for the reference loop); ``tuning``: the
    scheduler settings of a run (none: the command line's)."""
    rows = args.kv8_rows if kv_dtype == "fp8" and args.kv8_rows else args.rows
    tuning = tuning or base_tuning(args)
    config = OrpheusConfig(
        context=args.context,
        cuda_graphs=not args.no_graphs,
        kv_dtype=kv_dtype,
        switches=switches(args),
        realtime=tuning.realtime,
    )
    return engine(
        lm,
        config,
        max_batch=max_batch or rows,
        params=PARAMS,
        budget_policy="keep",
        budget_slack=1.0,
        budget_min=28 if budget_max is None else budget_max,
        budget_max=budget_max or args.max_budget,
        scheduling=tuning.scheduling,
    )


@contextmanager
def switch_interval(ms: float):
    """The interpreter's thread switch interval at ``ms`` (0: Python's own, 5 ms) for the block.
    The loop, the codec's lanes and the callers are threads of one process; how soon one that
    waits for the GIL gets it bounds how late a step can be launched."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(ms / 1000 if ms else 0.005)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def base_tuning(args) -> Tuning:
    """The engine's scheduler settings, with the command line's realtime rows."""
    return Tuning(RealtimeConfig(rows=args.realtime_rows, max_rows=args.realtime_max_rows))


def switches(args) -> Switches:
    return Switches.without(name for name in args.disable.split(",") if name)


# --quant MODE[/kv8|/kvmodel] -> the fast engine's kv_dtype; none: the engine's default for the GPU
KV_SUFFIXES = {"": "auto", "kv8": "fp8", "kvmodel": "model"}


def parse_mode(item: str) -> tuple[str, str]:
    """``none``, ``fp8/kv8`` ... -> (weight quantization, kv_dtype)."""
    quant, _, kv = item.partition("/")
    if kv not in KV_SUFFIXES:
        raise SystemExit(
            f"--quant {item!r}: after the slash only kv8 (an fp8 KV cache) or kvmodel (a cache in the model's dtype)"
        )
    return quant, KV_SUFFIXES[kv]


def bench_mode(args, item, jobs, rows, meta, first: bool):
    """Every approach for the first quantization mode; the fast engine's approaches for the
    others. The fast engine's rows are labelled ``MODE/kv8`` where it runs an fp8 KV cache; the
    other approaches run transformers' cache or the reference loop, labelled by the weights
    alone."""
    batch, sub, rt = jobs
    quant, kv_dtype = parse_mode(item)
    todo = args.approaches.split(",")
    if not first:
        todo = [a for a in todo if a in ("fast", "logits", "single", "streams", "profile")]
    lm = load_model(args.model, args.device, args.dtype, quant, switches(args), args.codec_dtype)
    meta["device"] = lm.choice.name
    kv_dtype = resolve_kv_dtype(kv_dtype, lm.choice.capability)
    label = f"{quant}" if lm.quant.applied == quant else f"{quant}->{lm.quant.applied}"
    fast_label = label + ("/kv8" if kv_dtype == "fp8" else "")
    mode = meta.setdefault("modes", {})[item] = {
        "applied": lm.quant.applied,
        "kernel": lm.quant.kernel,
        "fallback": lm.quant.fallback,
        "dtype": lm.choice.dtype_name,
        "kv_dtype": kv_dtype,
        "weights_gib": weight_gib(lm.model),
    }
    if "logits" in todo:
        from pipeline.engines.orpheus.prompt import prompt_ids

        prompts = [prompt_ids(lm.tokenizer, j.text, "tara") for j in sub[:4]]
        mode["logits_vs_transformers"] = logits_check(lm, prompts, kv_dtype=kv_dtype)
        print("logits", mode["logits_vs_transformers"], flush=True)
    fast = FastEngine(
        partial(make_engine, args, lm, kv_dtype=kv_dtype),
        lambda engine: run_synth(engine, [Job(j.key, j.text, WARM_TOKENS) for j in batch[:64]]),
        base_tuning(args),
    )  # warms the paths
    mode["fast_boot_s"] = fast.boot_s
    mode["fast_info"] = {
        k: fast.engine.info.extra.get(k)
        for k in ("cuda_graphs", "codec_graphs", "mixed_graphs", "graph_capture_s", "context", "kv_dtype", "fallbacks")
    }
    mode["fast_rows"] = fast.rows
    print("fast engine", mode["fast_rows"], "rows", mode["fast_info"], flush=True)
    if "fast" in todo:
        measure("fast batch", lambda: run_synth(fast.engine, batch), lm, fast_label, rows, loop_stats(fast.engine))
        for ms in (float(x) for x in args.switch_intervals.split(",") if x):
            with switch_interval(ms):
                print(f"switch interval {ms:g} ms: the batch workload", flush=True)
                label = f"fast batch, switch {ms:g} ms" if ms else "fast batch, switch default"
                measure(label, lambda: run_synth(fast.engine, batch), lm, fast_label, rows, loop_stats(fast.engine))
        measure("fast subset", lambda: run_synth(fast.engine, sub), lm, fast_label, rows, loop_stats(fast.engine))
    if "profile" in todo and lm.device.startswith("cuda"):
        from ops.bench.orpheus.profile import profile_kernels

        mode["profile"] = profile_kernels(lambda: run_synth(fast.engine, batch[: args.profile_jobs]))
        print("profile", json.dumps(mode["profile"], indent=1), flush=True)
    if "sync" in todo:  # the same engine, one step at a time: what the overlap is worth
        fast.engine.loop.overlap = False
        measure(
            "fast batch, no overlap",
            lambda: run_synth(fast.engine, batch),
            lm,
            fast_label,
            rows,
            loop_stats(fast.engine),
        )
        fast.engine.loop.overlap = True
    if "single" in todo:
        bench_single(args, fast, rt, mode)
    if "streams" in todo:
        bench_streams(args, fast, batch, rt, mode)
    fast.close()  # the engine's device memory goes before the baselines load theirs
    bench_baselines(args, lm, sub, label, rows, todo)
    del lm


def bench_single(args, fast: FastEngine, rt: list[Job], mode: dict) -> None:
    """One realtime stream alone, --single-runs times at each of --lookaheads."""
    for lookahead in map(int, args.lookaheads.split(",")):
        fast.use(Tuning(replace(fast.base.realtime, first_lookahead=lookahead), fast.base.pause_batch))
        fast.engine.loop.observer.first_chunk_phases(clear=True)
        res = [run_streams(fast.engine, [], [j], 0, 0).streams[0] for j in rt[: args.single_runs]]
        key = "single_stream" if lookahead == 2 else f"single_stream_lookahead{lookahead}"
        mode[key] = {
            "ttfb_s": sorted(s.ttfb for s in res),
            "rtf": sorted(s.rtf for s in res),
            "first_chunk_ms": phases_ms(fast.engine.loop.observer.first_chunk_phases(clear=True)),
        }
        print("single, lookahead", lookahead, mode[key], flush=True)


def bench_baselines(args, lm, sub: list[Job], label: str, rows: list[dict], todo: list[str]) -> None:
    """The reference loop and transformers generate() on the subset, after the fast engine has
    given back its memory."""
    if "reference" in todo:
        reference = make_engine(args, lm, max_batch=args.max_batch, engine=ReferenceEngine)
        run_synth(reference, [Job(j.key, j.text, WARM_TOKENS) for j in sub])
        measure("reference loop subset", lambda: run_synth(reference, sub), lm, label, rows)
        reference.close()
    if "static" in todo:
        run_generate(lm, [Job(j.key, j.text, WARM_TOKENS) for j in sub[:8]], args.max_batch)
        measure("generate() static subset", lambda: run_generate(lm, sub, args.max_batch), lm, label, rows)
    if "generate1" in todo:
        jobs1 = sub[: args.generate1_jobs]
        measure("generate() 1-at-a-time", lambda: run_generate(lm, jobs1, 1), lm, label, rows)


def weight_gib(model) -> float:
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return total / 2**30


def main(argv=None) -> int:
    args = parse(argv)
    jobs = workload(args)
    batch = jobs[0]
    meta = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "model": args.model,
        "batch_lines": args.lines,
        "batch_chunks": len(batch),
        "batch_tokens": sum(j.budget for j in batch),
        "subset_lines": args.subset,
        "subset_chunks": len(jobs[1]),
        "subset_tokens": sum(j.budget for j in jobs[1]),
        "streams": len(jobs[2]),
        "context": args.context,
        "max_budget": args.max_budget,
        "budgets": "82.03 tok per expected second (15 chars/s), ignore_eos (random weights never stop)",
    }
    rows: list[dict] = []
    items = args.quant.split(",")
    for item in items:
        parse_mode(item)  # a typo fails now, not after the first mode's runs
    load_scenarios(args.scenario)
    for n, item in enumerate(items):
        bench_mode(args, item, jobs, rows, meta, first=n == 0)
        report.write(meta, rows, args.json, args.markdown)
    print(report.markdown(meta, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
