"""Benchmark the Orpheus engine against transformers generate(), per quantization mode.

    python ops/bench_orpheus.py --model random-3b --quant none,int8,nf4,fp8 --lines 64 \\
        --json ops/results/orpheus.json --markdown ops/results/orpheus.md      # on the GPU
    python ops/bench_orpheus.py --model /tmp/tiny --device cpu --lines 4 --max-budget 35   # smoke

Workloads (ANCHORS.md) on a spread of bench.txt lines: W1 = the lines as one batch of jobs;
W2 = W1 plus ``--streams`` realtime jobs submitted with it. Random weights never emit end-of-speech,
so every job runs a budget of 82.03 tokens per second of expected speech (15 characters per second),
capped at ``--max-budget``; the output says so. generate() one at a time runs only the first
``--generate1-jobs`` jobs (its rate per job does not depend on the others).
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ops.orpheus_bench import report  # noqa: E402
from ops.orpheus_bench.models import load_model  # noqa: E402
from ops.orpheus_bench.runs import PARAMS, Job, run_generate, run_synth  # noqa: E402
from pipeline.engines.orpheus.engine import OrpheusEngine, token_budget  # noqa: E402

WARM_TOKENS = 35
DEFAULT_CORPUS = Path(__file__).resolve().parents[1] / "shared" / "corpus" / "bench.txt"


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="random-3b", help="random-3b or a checkpoint folder/hub id")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--lines", type=int, default=64, help="corpus lines, spread over the file")
    ap.add_argument("--max-budget", type=int, default=700, help="token cap per job")
    ap.add_argument("--streams", type=int, default=4, help="W2 realtime streams")
    ap.add_argument("--generate1-jobs", type=int, default=2)
    ap.add_argument("--quant", default="none", help="comma list of none,int8,nf4,fp8")
    ap.add_argument("--approaches", default="synth,static,generate1,w2")
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    return ap.parse_args(argv)


def workload(args) -> tuple[list[Job], list[Job]]:
    lines = [ln.strip() for ln in args.corpus.read_text().splitlines() if ln.strip()]
    step = max(1, len(lines) // args.lines)
    picked = lines[::step][: args.lines]
    budget = lambda text: token_budget(text, 1.0, 28, args.max_budget)  # noqa: E731
    w1 = [Job(f"w1-{i}", t, budget(t)) for i, t in enumerate(picked)]
    w2 = [Job(f"rt-{i}", t, budget(t), realtime=True)
          for i, t in enumerate(lines[1::step][: args.streams])]
    return w1, w2


def measure(label, fn, lm, quant, rows):
    import torch

    if lm.device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    res = fn()
    peak = torch.cuda.max_memory_allocated() / 2**30 if lm.device.startswith("cuda") else None
    rows.append(report.row(label, quant, res, peak))
    print(report.line(rows[-1]), f"[{time.perf_counter() - t:.1f}s]", flush=True)


def bench_mode(args, quant, w1, w2, rows, meta):
    lm = load_model(args.model, args.device, args.dtype, quant)
    engine = OrpheusEngine(lm, max_batch=args.max_batch, params=PARAMS, budget_policy="keep",
                           budget_slack=1.0, budget_min=28, budget_max=args.max_budget)
    meta["device"] = lm.choice.name
    meta.setdefault("modes", {})[quant] = {"applied": lm.quant.applied, "kernel": lm.quant.kernel,
                                           "fallback": lm.quant.fallback, "dtype": lm.choice.dtype_name}
    warm(args, lm, w1)
    todo = args.approaches.split(",")
    label = f"{quant}" if lm.quant.applied == quant else f"{quant}->{lm.quant.applied}"
    if "synth" in todo:
        measure("synth W1", lambda: run_synth(engine, w1), lm, label, rows)
    if "static" in todo:
        measure("generate() static W1", lambda: run_generate(lm, w1, args.max_batch), lm, label, rows)
    if "generate1" in todo:
        jobs = w1[: args.generate1_jobs]
        measure("generate() 1-at-a-time", lambda: run_generate(lm, jobs, 1), lm, label, rows)
    if "w2" in todo:
        measure("synth W2", lambda: run_synth(engine, w1 + w2), lm, label, rows)
        measure("generate() static W2", lambda: run_generate(lm, w2 + w1, args.max_batch), lm,
                label, rows)
    engine.close()
    del lm, engine


def warm(args, lm, w1) -> None:
    """Short runs at the workload's batch shapes, so no approach pays first-call costs (run 1 on the
    H200 showed the first measured mode 2-3x slow without this)."""
    short = [Job(j.key, j.text, WARM_TOKENS) for j in w1]
    engine = OrpheusEngine(lm, max_batch=args.max_batch, params=PARAMS, budget_policy="keep",
                           budget_slack=1.0, budget_min=WARM_TOKENS, budget_max=WARM_TOKENS)
    run_synth(engine, short)
    run_generate(lm, short, args.max_batch)
    run_generate(lm, short[:1], 1)


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None) -> int:
    args = parse(argv)
    w1, w2 = workload(args)
    meta = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "commit": git_commit(), "model": args.model, "lines": len(w1), "streams": len(w2),
            "max_budget": args.max_budget, "max_batch": args.max_batch,
            "w1_tokens": sum(j.budget for j in w1), "budgets": "82.03 tok per expected second "
            "(15 chars/s), ignore_eos (random weights never stop)"}
    rows: list[dict] = []
    for quant in args.quant.split(","):
        bench_mode(args, quant, w1, w2, rows, meta)
        report.write(meta, rows, args.json, args.markdown)
    print(report.markdown(meta, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
