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

ROWS, CONTEXT = 128, 1024
REPS = 20
CASES = [(7, 64), (15, 128), (63, 128), (127, 64), (127, 128), (127, 192)]


def fill(runner, rows: int, gen: torch.Generator) -> None:
    """Random cache contents; rows ``0 .. rows-1`` mid-stream at positions 250-450."""
    for t in (runner.cache.k, runner.cache.v):
        for layer in range(t.shape[0]):
            t[layer].copy_(torch.randn(t[layer].shape, device=t.device).to(t.dtype))
    pos = torch.randint(250, 450, (rows,), generator=gen)
    runner.pos[:rows] = pos.cuda()
    runner.steps[:rows] = (pos - 120).cuda()
    runner.tokens[:rows] = torch.randint(CUSTOM_TOKEN_BASE + 10, CUSTOM_TOKEN_BASE + 4000, (rows,),
                                         generator=gen).cuda()
    runner.keys[:rows] = torch.randint(0, 2**40, (rows,), generator=gen).cuda()
    runner.seen.zero_()


def plan_for(rows: int, prompt_len: int, gen, positions) -> Plan:
    decode = [Seq(i, [1] * 120, 2000, row=i) for i in range(rows)]
    prompt = torch.randint(0, CUSTOM_TOKEN_BASE, (prompt_len,), generator=gen).tolist()
    new = Seq("new", prompt, 2000, row=rows, seed=7)
    return Plan(prefill=[PrefillChunk(new, 0, prompt_len, True)], decode=decode, rows=rows + 1,
                context=int(positions.max()) + 1)


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

    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
          f"KV cache {'fp8' if args.kv8 else 'bf16'}", flush=True)
    model = random_model(ORPHEUS_3B["num_hidden_layers"], torch.bfloat16, "cuda")
    t0 = time.monotonic()
    runner = ModelRunner(model, args.rows, args.context, SamplingParams(temperature=0),
                         logits_lo=CUSTOM_TOKEN_BASE, kv_dtype="fp8" if args.kv8 else None,
                         prefill_lengths=RANDOM_SERVING.prefill_lengths)    # 192 among them
    print(f"boot: {len(runner.graphs)} decode, {len(runner.prefill_graphs.graphs)} prefill and "
          f"{len(runner.mixed_graphs)} mixed graphs in {time.monotonic() - t0:.1f} s", flush=True)
    if not runner.mixed_graphs:
        print(f"no mixed graphs ({runner.fallbacks})", flush=True)
        return 1
    sizes = runner.mixed_sizes
    gen = torch.Generator().manual_seed(0)
    print(f"{'rows':>4} {'prompt':>6} | {'apart ms':>8} {'mixed ms':>8} {'saved':>6} | "
          f"{'wall apart':>10} {'wall mixed':>10}", flush=True)
    with torch.inference_mode():
        for rows, prompt_len in CASES:
            if rows + 1 > args.rows:
                continue
            fill(runner, rows, gen)
            plan = plan_for(rows, prompt_len, gen, runner.pos[:rows].cpu())
            runner.mixed_sizes = ()              # the same plan, prefilled apart
            apart_ms, apart_wall = timed(runner, plan)
            runner.mixed_sizes = sizes
            mixed_ms, mixed_wall = timed(runner, plan)
            print(f"{rows:>4} {prompt_len:>6} | {apart_ms:>8.2f} {mixed_ms:>8.2f} "
                  f"{apart_ms - mixed_ms:>6.2f} | {apart_wall:>10.2f} {mixed_wall:>10.2f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
