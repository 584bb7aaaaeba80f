"""The prefill graphs (serving/graphs.py) against the eager prefill, on a random Orpheus-3B-shaped
model (28 layers, bf16), with their boot cost (CUDA). That the two compute the same is tested in
tests/orpheus/kernels/test_on_cuda.py.

    python -m ops.bench.kernels prefill-graphs [--rows 8] [--context 1024]

It boots a ModelRunner as the engine does (decode graphs, then prefill graphs), timing the prefill
capture and the device memory it takes (cudaMemGetInfo, and the caching allocator's reserved bytes).
Then, per case (prompts of given lengths, fresh, in given cache rows), the time per call of graph
replay (``PrefillGraphs.run``) and of the runner's eager prefill (the chunks right-padded to the
longest), host and device together (synchronized after each call), median of 20, with the host's
launch time alone.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ops.bench.kernels.checking import random_model
from pipeline.engines.orpheus.serving.scheduler import PrefillChunk, Seq
from pipeline.engines.orpheus.tiny import ORPHEUS_3B, RANDOM_SERVING
from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE

ROWS, CONTEXT = 8, 1024
REPS = 20
# (prompt lengths, cache rows): one stream alone at each S of the ladder, then several arriving
# together, one of them with a padding row and row 0 in use.
CASES = [
    ((20,), (3,)),
    ((57,), (1,)),
    ((120,), (2,)),
    ((250,), (5,)),
    ((40, 90), (1, 6)),
    ((23, 100, 64), (0, 4, 2)),
    ((200, 256, 130, 180), (1, 2, 3, 7)),
]


def chunks_for(lengths, rows, gen) -> list[PrefillChunk]:
    chunks = []
    for n, row in zip(lengths, rows):
        prompt = torch.randint(0, CUSTOM_TOKEN_BASE, (n,), generator=gen).tolist()
        chunks.append(PrefillChunk(Seq(key=row, prompt=prompt, budget=100, row=row), 0, n, True))
    return chunks


def timed(fn, reps: int = REPS) -> tuple[float, float]:
    """(host launch ms, host + device ms): medians over ``reps`` calls, synchronized after each."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    launch, wall = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        launch.append(t1 - t0)
        wall.append(t2 - t0)
    return statistics.median(launch) * 1e3, statistics.median(wall) * 1e3


def boot(rows: int, context: int):
    """A runner booted as ModelRunner.__init__ does, with the prefill capture measured alone."""
    from pipeline.engines.orpheus.model.sampling import SamplingParams
    from pipeline.engines.orpheus.serving.runner import ModelRunner

    model = random_model(ORPHEUS_3B["num_hidden_layers"], torch.bfloat16, "cuda")
    runner = ModelRunner(
        model,
        rows,
        context,
        SamplingParams(temperature=0),
        logits_lo=CUSTOM_TOKEN_BASE,
        use_graphs=False,
        prefill_lengths=RANDOM_SERVING.prefill_lengths,
    )  # the benches' ladder
    runner._capture_all()  # what __init__ does with use_graphs, in turn
    torch.cuda.synchronize()
    free_before = torch.cuda.mem_get_info()[0]
    runner._capture_prefill()
    torch.cuda.synchronize()
    free_after = torch.cuda.mem_get_info()[0]
    pg = runner.prefill_graphs
    print(
        f"boot: {len(runner.graphs)} decode graphs in {runner.capture_s:.2f} s; "
        f"{len(pg.graphs)} prefill graphs (N {pg.batches} x S {pg.lengths}) in "
        f"{pg.capture_s:.2f} s, {(free_before - free_after) / 2**20:.0f} MiB of device memory "
        f"({pg.bytes / 2**20:.0f} MiB reserved by the caching allocator)",
        flush=True,
    )
    return runner


def time_case(runner, lengths, rows, gen) -> None:
    pg = runner.prefill_graphs
    chunks = chunks_for(lengths, rows, gen)
    if pg.shape(chunks) is None:
        print(f"prompts {lengths}: no graph holds them at this context; skipped", flush=True)
        return
    n, s = pg.shape(chunks)
    with torch.inference_mode():
        e_launch, e_wall = timed(lambda: runner._prefill_eager(chunks))
        g_launch, g_wall = timed(lambda: pg.run(chunks))
    print(
        f"prompts {'+'.join(map(str, lengths))} -> graph {n}x{s}, per call: eager {e_wall:.2f} ms "
        f"(launch {e_launch:.2f} ms)   graph {g_wall:.2f} ms (launch {g_launch:.2f} ms)   "
        f"x{e_wall / g_wall:.2f}",
        flush=True,
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=ROWS)
    ap.add_argument("--context", type=int, default=CONTEXT)
    args = ap.parse_args(argv)
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}", flush=True)
    runner = boot(args.rows, args.context)
    gen = torch.Generator().manual_seed(0)
    for lengths, rows in CASES:
        if max(rows) < args.rows:
            time_case(runner, lengths, rows, gen)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
