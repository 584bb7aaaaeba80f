"""The batch workloads through the engine's own scheduler, with a model of a step's time in place of
the device: how admission alone moves a batch's rows, steps and x real time, in a second on a CPU.

    python -m ops.bench.orpheus.admission_model                      # the 500-line batch workload
    python -m ops.bench.orpheus.admission_model --repeat 4           # the long one (2,000 lines)
    python -m ops.bench.orpheus.admission_model --row-ms 0.019       # a cheaper row a step

A step over ``r`` decoding rows that prefills ``p`` prompt tokens takes
``--fixed-ms + --row-ms * r + --prefill-ms * p``. The defaults are fitted to the engine alone on the
H200 (docs/performance.md): 2.4 ms for the weights and the launches, 0.028 ms a row (its attention,
its share of the GEMMs past the weights' read, the codec's work on its tokens), 0.009 ms a prompt
token. Every chunk runs its whole token budget, as random weights do in the GPU benchmarks. The
step's time grows with the rows, so a batch's x real time can never pass ``1 / row-ms`` tokens a
ms, whatever the admission: the printed ceiling.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

from ops.bench import SHARED_CORPUS
from pipeline.engines.orpheus.config import RealtimeConfig
from pipeline.engines.orpheus.engine import LM_TOKENS_PER_AUDIO_SECOND, scheduler_config
from pipeline.engines.orpheus.serving.scheduler import Scheduler, Seq


def parse(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m ops.bench.orpheus.admission_model",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--corpus", type=Path, default=SHARED_CORPUS)
    ap.add_argument("--lines", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=1, help="copies of the workload, one after another")
    ap.add_argument("--rows", type=int, default=512, help="KV-cache rows (512: the H200's and the H100's)")
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--max-budget", type=int, default=2000)
    ap.add_argument("--fixed-ms", type=float, default=2.4)
    ap.add_argument("--row-ms", type=float, default=0.028)
    ap.add_argument("--prefill-ms", type=float, default=0.009, help="ms a prompt token")
    return ap.parse_args(argv)


def run(args) -> dict:
    # the bench's own workload (its import pulls in torch, as the engine bench does)
    from ops.bench.orpheus.cli import workload

    spec = SimpleNamespace(
        corpus=args.corpus,
        context=args.context,
        max_budget=args.max_budget,
        lines=args.lines,
        subset=1,
        streams=0,
        stream_counts="",
    )
    chunks = workload(spec)[0] * args.repeat
    config = scheduler_config(args.rows, RealtimeConfig(), on_gpu=True)
    scheduler = Scheduler(args.rows, args.context, config)
    for i, job in enumerate(chunks):
        # a prompt as the random checkpoints' byte-level tokenizer makes it: a token a character
        scheduler.add(Seq(f"{job.key}/{i}", [1] * (len(job.text) + 20), budget=job.budget))
    wall_ms, steps, rows = 0.0, 0, 0
    while not scheduler.idle:
        plan = scheduler.schedule()
        prefill = sum(c.end - c.start for c in plan.prefill)
        wall_ms += args.fixed_ms + args.row_ms * len(plan.decode) + args.prefill_ms * prefill
        steps += 1
        rows += len(plan.decode)
        scheduler.postprocess(plan, {row: [0] for row in plan.owners})
    audio_s = sum(job.budget for job in chunks) / LM_TOKENS_PER_AUDIO_SECOND
    return {
        "chunks": len(chunks),
        "steps": steps,
        "mean_rows": round(rows / max(1, steps), 1),
        "wall_s": round(wall_ms / 1000, 2),
        "x_real_time": round(audio_s / (wall_ms / 1000), 1),
        "ceiling_x_real_time": round(1000 / args.row_ms / LM_TOKENS_PER_AUDIO_SECOND, 1),
    }


def main(argv=None) -> int:
    print(run(parse(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
