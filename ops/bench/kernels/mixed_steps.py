"""Mixed steps (runner.py: one decode step and one whole prompt's prefill in a single graph) against
the same plan run apart (the prefill graph, then the decode graph), on a random Orpheus-3B-shaped
model (28 layers, bf16 weights): device ms a step (CUDA). That the two compute the same is tested
in tests/orpheus/kernels/test_on_cuda.py.

    python -m ops.bench.kernels mixed-steps [--kv8]

The runner boots as the engine's does (decode, prefill and mixed graphs); the cache is filled with
random values and the decoding rows sit at positions 250-450, as streams some seconds in. Per case
(rows decoding, prompt length), one plan (those rows decode, a fresh prompt takes the next row) is
launched both ways: each way's device time a step (CUDA events from its first to its last work;
median of 20 launches, each collected before the next) and wall time.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ops.bench.kernels.checking import random_model
from pipeline.engines.orpheus.serving.scheduler import Plan, PrefillChunk, Seq
from pipeline.engines.orpheus.tiny import ORPHEUS_3B, RANDOM_SERVING
from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE
from synth_testkit.runner_state import MIXED_CASES, fill

ROWS, CONTEXT = 128, 1024
REPS = 20


def plan_for(rows: int, prompt_len: int, gen, positions) -> Plan:
    decode = [Seq(i, [1] * 120, 2000, row=i) for i in range(rows)]
    prompt = torch.randint(0, CUSTOM_TOKEN_BASE, (prompt_len,), generator=gen).tolist()
    new = Seq("new", prompt, 2000, row=rows, seed=7)
    return Plan(
        prefill=[PrefillChunk(new, 0, prompt_len, True)], decode=decode, rows=rows + 1, context=int(positions.max()) + 1
    )


def timed(runner, plan) -> tuple[float, float]:
    """(device ms, wall ms) a step: medians over REPS launches, each collected before the next."""
    device, wall = [], []
    for i in range(REPS + 3):
        t0 = time.perf_counter()
        launched = runner.launch(plan)
        runner.collect(launched)
        if i >= 3:
            wall.append((time.perf_counter() - t0) * 1e3)
            device.append(launched.device_ms())
    return statistics.median(device), statistics.median(wall)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kv8", action="store_true", help="an fp8 KV cache (as for streams beside batch work)")
    ap.add_argument("--rows", type=int, default=ROWS)
    ap.add_argument("--context", type=int, default=CONTEXT)
    args = ap.parse_args(argv)
    from pipeline.engines.orpheus.model.sampling import SamplingParams
    from pipeline.engines.orpheus.serving.runner import ModelRunner

    print(
        f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; KV cache {'fp8' if args.kv8 else 'bf16'}",
        flush=True,
    )
    model = random_model(ORPHEUS_3B["num_hidden_layers"], torch.bfloat16, "cuda")
    t0 = time.monotonic()
    runner = ModelRunner(
        model,
        args.rows,
        args.context,
        SamplingParams(temperature=0),
        logits_lo=CUSTOM_TOKEN_BASE,
        kv_dtype="fp8" if args.kv8 else None,
        prefill_lengths=RANDOM_SERVING.prefill_lengths,
    )  # 192 among them
    print(
        f"boot: {len(runner.graphs)} decode, {len(runner.prefill_graphs.graphs)} prefill and "
        f"{len(runner.mixed_graphs)} mixed graphs in {time.monotonic() - t0:.1f} s",
        flush=True,
    )
    if not runner.mixed_graphs:
        print(f"no mixed graphs ({runner.fallbacks})", flush=True)
        return 1
    sizes = runner.mixed_sizes
    gen = torch.Generator().manual_seed(0)
    print(
        f"{'rows':>4} {'prompt':>6} | {'apart ms':>8} {'mixed ms':>8} {'saved':>6} | "
        f"{'wall apart':>10} {'wall mixed':>10}",
        flush=True,
    )
    with torch.inference_mode():
        for rows, prompt_len in MIXED_CASES:
            if rows + 1 > args.rows:
                continue
            fill(runner, rows, gen)
            plan = plan_for(rows, prompt_len, gen, runner.pos[:rows].cpu())
            runner.mixed_sizes = ()  # the same plan, prefilled apart
            apart_ms, apart_wall = timed(runner, plan)
            runner.mixed_sizes = sizes
            mixed_ms, mixed_wall = timed(runner, plan)
            print(
                f"{rows:>4} {prompt_len:>6} | {apart_ms:>8.2f} {mixed_ms:>8.2f} "
                f"{apart_ms - mixed_ms:>6.2f} | {apart_wall:>10.2f} {mixed_wall:>10.2f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
