"""On a CUDA machine: the prefill graphs (serving/graphs.py) against the eager prefill, on a random
Orpheus-3B-shaped model (28 layers, bf16), with the boot cost and timings.

    python3 -m ops.bench.kernels.check_prefill      # exit status 1 on a mismatch or a failed capture

It boots a ModelRunner as the engine does (decode graphs, then prefill graphs), timing the prefill
capture and the device memory it takes (cudaMemGetInfo, and the caching allocator's reserved bytes).
Then, per case (prompts of given lengths, fresh, in given cache rows), it compares:

- graph replay (``PrefillGraphs.run``) against the runner's eager prefill (``_prefill_eager``: the
  chunks right-padded to the longest only): logits and the cache at the prompts' positions;
- graph replay against the same padded prefill run eagerly at the graph's own shape;

printing max abs error, relative L2 error and the greedy first tokens of both, and the time per
call of each path, host and device together (synchronized after each call), median of 20, with the
host's launch time alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from ops.bench.kernels.checking import TOLERANCE, Report, random_model
from pipeline.engines.orpheus.serving.graphs import pack, padded_prefill
from pipeline.engines.orpheus.serving.scheduler import PrefillChunk, Seq
from pipeline.engines.orpheus.tiny import ORPHEUS_3B
from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE

ROWS, CONTEXT = 8, 1024
REPS = 20
# (prompt lengths, cache rows): one stream alone at each S of the ladder, then several arriving
# together, one of them with a padding row and row 0 in use.
CASES = [((20,), (3,)), ((57,), (1,)), ((120,), (2,)), ((250,), (5,)), ((40, 90), (1, 6)),
         ((23, 100, 64), (0, 4, 2)), ((200, 256, 130, 180), (1, 2, 3, 7))]
# bf16 across 28 layers: the eager prefill and the graph run their GEMMs and attention at other
# shapes (N x longest against N x S), so cuBLAS may tile and round them differently; the error
# grows through the layers. (max abs error / max |reference|, relative L2 error)
SHAPE_TOLERANCE = (0.1, 5e-2)
SAME_SHAPE_TOLERANCE = TOLERANCE[torch.bfloat16]      # the same kernels: a rounding flip at most


def chunks_for(lengths, rows, gen) -> list[PrefillChunk]:
    chunks = []
    for n, row in zip(lengths, rows):
        prompt = torch.randint(0, CUSTOM_TOKEN_BASE, (n,), generator=gen).tolist()
        chunks.append(PrefillChunk(Seq(key=row, prompt=prompt, budget=100, row=row), 0, n, True))
    return chunks


def cache_at(runner, chunks):
    """The K and V cache at the chunks' positions, every layer, flattened."""
    k, v = runner.cache.k, runner.cache.v
    parts = [t[:, c.seq.row, :, : c.end].reshape(-1) for c in chunks for t in (k, v)]
    return torch.cat(parts)


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
    runner = ModelRunner(model, rows, context, SamplingParams(temperature=0),
                         logits_lo=CUSTOM_TOKEN_BASE, use_graphs=False)
    runner._capture_all()                     # what __init__ does with use_graphs, in turn
    torch.cuda.synchronize()
    free_before = torch.cuda.mem_get_info()[0]
    runner._capture_prefill()
    torch.cuda.synchronize()
    free_after = torch.cuda.mem_get_info()[0]
    pg = runner.prefill_graphs
    print(f"boot: {len(runner.graphs)} decode graphs in {runner.capture_s:.2f} s; "
          f"{len(pg.graphs)} prefill graphs (N {pg.batches} x S {pg.lengths}) in "
          f"{pg.capture_s:.2f} s, {(free_before - free_after) / 2**20:.0f} MiB of device memory "
          f"({pg.bytes / 2**20:.0f} MiB reserved by the caching allocator)", flush=True)
    return runner


def check_case(report: Report, runner, lengths, rows, gen) -> None:
    pg = runner.prefill_graphs
    chunks = chunks_for(lengths, rows, gen)
    if pg.shape(chunks) is None:
        print(f"prompts {lengths}: no graph holds them at this context; skipped", flush=True)
        return
    n, s = pg.shape(chunks)
    name = f"prompts {'+'.join(map(str, lengths))} -> graph {n}x{s}"
    print(f"{name}:", flush=True)
    with torch.inference_mode():
        eager = runner._prefill_eager(chunks).clone()
        eager_cache = cache_at(runner, chunks).clone()
        graph = pg.run(chunks).clone()
        graph_cache = cache_at(runner, chunks)
        same = padded_prefill(runner.decoder, pack(chunks, n, s).cuda())[: len(chunks)]
        report.error(f"{name}: logits vs eager", graph, eager, SHAPE_TOLERANCE)
        report.error(f"{name}: cache vs eager", graph_cache, eager_cache, SHAPE_TOLERANCE)
        report.error(f"{name}: logits vs eager {n}x{s}", graph, same, SAME_SHAPE_TOLERANCE)
        greedy_e, greedy_g = eager.argmax(-1).tolist(), graph.argmax(-1).tolist()
        print(f"  greedy first tokens: eager {greedy_e}, graph {greedy_g}"
              f"{'' if greedy_e == greedy_g else '  (differ: near-tie flips)'}", flush=True)
        e_launch, e_wall = timed(lambda: runner._prefill_eager(chunks))
        g_launch, g_wall = timed(lambda: pg.run(chunks))
    print(f"  per call: eager {e_wall:.2f} ms (launch {e_launch:.2f} ms)   graph {g_wall:.2f} ms "
          f"(launch {g_launch:.2f} ms)   x{e_wall / g_wall:.2f}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=ROWS)
    ap.add_argument("--context", type=int, default=CONTEXT)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check", file=sys.stderr)
        return 2
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}", flush=True)
    runner = boot(args.rows, args.context)
    failed = [r for r in runner.fallbacks if r.startswith("prefill graph capture")]
    if failed:
        print(f"FAILED: {failed[0]}", flush=True)
        return 1
    report = Report()
    gen = torch.Generator().manual_seed(0)
    for lengths, rows in CASES:
        if max(rows) < args.rows:
            check_case(report, runner, lengths, rows, gen)
    return report.exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
