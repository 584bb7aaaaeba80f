"""What only a GPU can check, on a random 28-layer model at Orpheus-3B shapes in bf16: the CUDA
graphs (the prefill's against the eager prefill, a mixed step's against the same plan run apart)
and that no kind of step's launch waits for the device. Skipped where there is no CUDA device:
graph capture, the device's sleep and the sync debugger have no interpreter. What these paths
cost: ``python -m ops.bench.kernels prefill-graphs`` and ``mixed-steps``."""

from __future__ import annotations

import pytest
import torch

from pipeline.engines.orpheus.config import Switches
from pipeline.engines.orpheus.model.sampling import SamplingParams
from pipeline.engines.orpheus.serving.graphs import pack, padded_prefill
from pipeline.engines.orpheus.serving.runner import ModelRunner
from pipeline.engines.orpheus.serving.scheduler import Plan, PrefillChunk, Scheduler, SchedulerConfig, Seq
from pipeline.engines.orpheus.tiny import ORPHEUS_3B, tiny_llama_config
from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE
from synth_testkit.runner_state import MIXED_CASES, fill

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

# bf16 across 28 layers: the two ways run their GEMMs and attention at other shapes (N x longest
# against N x S, decode rows and prompt tokens together against apart), so cuBLAS may tile and
# round them differently; the error grows through the layers. (max abs error / max |reference|,
# relative L2 error)
SHAPE_TOLERANCE = (0.1, 5e-2)
# the same kernels at the same shape: a rounding flip of the fp32 reductions at most
SAME_SHAPE_TOLERANCE = (2**-6, 4e-3)


def assert_close(got, want, tol, what: str) -> None:
    g, w = got.float(), want.float()
    top = w.abs().max().item() or 1.0
    max_abs, rel = (g - w).abs().max().item(), ((g - w).norm() / w.norm().clamp_min(1e-30)).item()
    assert max_abs <= tol[0] * top and rel <= tol[1], (
        f"{what}: max abs {max_abs:.3e} (max |ref| {top:.2f}), rel L2 {rel:.3e}"
    )


@pytest.fixture(scope="module")
def model():
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    with torch.device("cuda"):
        lm = LlamaForCausalLM(tiny_llama_config(**ORPHEUS_3B))
    yield lm.to(torch.bfloat16).eval()
    torch.cuda.empty_cache()


def runner_for(model, rows: int, context: int, params=SamplingParams(temperature=0), **kw):
    return ModelRunner(model, rows, context, params, logits_lo=CUSTOM_TOKEN_BASE, **kw)


# The prefill graphs ------------------------------------------------------------------------------

# (prompt lengths, cache rows): one stream alone at each S of the ladder, then several arriving
# together, one of them with a padding row and row 0 in use.
PREFILL_CASES = [
    ((20,), (3,)),
    ((57,), (1,)),
    ((120,), (2,)),
    ((250,), (5,)),
    ((40, 90), (1, 6)),
    ((23, 100, 64), (0, 4, 2)),
    ((200, 256, 130, 180), (1, 2, 3, 7)),
]


@pytest.fixture(scope="module")
def prefill_runner(model):
    """8 rows of 1,024 positions, booted as the engine boots it, less the mixed steps."""
    runner = runner_for(model, 8, 1024, switches=Switches.without(["mixed_steps"]))
    yield runner
    del runner
    torch.cuda.empty_cache()


def cache_at(runner, chunks):
    """The K and V cache at the chunks' positions, every layer, flattened."""
    k, v = runner.cache.k, runner.cache.v
    return torch.cat([t[:, c.seq.row, :, : c.end].reshape(-1) for c in chunks for t in (k, v)])


@pytest.mark.parametrize(
    "lengths,rows", PREFILL_CASES, ids=["+".join(map(str, lengths)) for lengths, _ in PREFILL_CASES]
)
def test_a_prefill_graph_matches_the_eager_prefill(prefill_runner, lengths, rows):
    """Replayed from the smallest graph that holds the prompts, against the eager prefill (the
    prompts right-padded to the longest only), logits and cache; and against the same padded
    prefill run eagerly at the graph's shape."""
    runner = prefill_runner
    assert not [r for r in runner.fallbacks if r.startswith("prefill graph capture")]
    graphs = runner.prefill_graphs
    gen = torch.Generator().manual_seed(sum(lengths))
    chunks = [
        PrefillChunk(
            Seq(key=row, prompt=torch.randint(0, CUSTOM_TOKEN_BASE, (n,), generator=gen).tolist(), budget=100, row=row),
            0,
            n,
            True,
        )
        for n, row in zip(lengths, rows)
    ]
    n, s = graphs.shape(chunks)
    with torch.inference_mode():
        eager = runner._prefill_eager(chunks).clone()
        eager_cache = cache_at(runner, chunks)
        graph = graphs.run(chunks).clone()
        graph_cache = cache_at(runner, chunks)
        same = padded_prefill(runner.decoder, pack(chunks, n, s).cuda())[: len(chunks)]
    assert_close(graph, eager, SHAPE_TOLERANCE, "logits against eager")
    assert_close(graph_cache, eager_cache, SHAPE_TOLERANCE, "cache against eager")
    assert_close(graph, same, SAME_SHAPE_TOLERANCE, f"logits against eager at {n}x{s}")


# Mixed steps -------------------------------------------------------------------------------------

# (rows decoding, prompt length)


def state(runner) -> list:
    return [runner.tokens, runner.pos, runner.steps, runner.keys, runner.seen, runner.cache.k, runner.cache.v]


def written(runner, rows: int, pos, prompt_len: int) -> list:
    """The cache entries a step wrote: each decode row's at its position, the prompt's row's
    [0, prompt_len); K and V, every layer, flattened."""
    out = []
    for c in (runner.cache.k, runner.cache.v):
        out.append(c[:, torch.arange(rows, device=c.device), :, pos].reshape(-1))
        out.append(c[:, rows, :, :prompt_len].reshape(-1))
    return out


@pytest.mark.parametrize("kv8", [False, True], ids=["bf16 cache", "fp8 cache"])
def test_a_mixed_step_matches_its_prefill_and_decode_run_apart(model, kv8):
    """One plan (rows decoding, a fresh prompt in the next row) as one graph and as the prefill
    graph then the decode graph, from the same state: the prompt's logits and the cache entries
    both wrote. (Greedy tokens are not compared: on random weights many rows' top two logits lie
    within the rounding of two GEMM shapes; their equality is the CPU's fp32 test,
    tests/orpheus/test_mixed_steps.py.)"""
    runner = runner_for(model, 128, 1024, kv_dtype="fp8" if kv8 else None)
    assert runner.mixed_graphs, runner.fallbacks
    sizes, gen = runner.mixed_sizes, torch.Generator().manual_seed(0)
    try:
        with torch.inference_mode():
            for rows, prompt_len in MIXED_CASES:
                fill(runner, rows, gen)
                new = Seq(
                    "new",
                    torch.randint(0, CUSTOM_TOKEN_BASE, (prompt_len,), generator=gen).tolist(),
                    2000,
                    row=rows,
                    seed=7,
                )
                plan = Plan(
                    prefill=[PrefillChunk(new, 0, prompt_len, True)],
                    decode=[Seq(i, [1] * 120, 2000, row=i) for i in range(rows)],
                    rows=rows + 1,
                    context=int(runner.pos[:rows].max()) + 1,
                )
                snapshot, pos = [t.clone() for t in state(runner)], runner.pos[:rows].clone()
                runner.mixed_sizes = sizes
                shape = runner._mixed_shape(plan)
                assert shape is not None, (rows, prompt_len)
                runner.collect(runner.launch(plan))
                mixed_logits = runner.mixed_graphs[shape].output.clone()
                mixed_cache = [t.clone() for t in written(runner, rows, pos, prompt_len)]
                for t, saved in zip(state(runner), snapshot):
                    t.copy_(saved)
                del snapshot
                runner.mixed_sizes = ()  # the same plan, prefilled apart
                runner.collect(runner.launch(plan))
                apart_logits = runner.prefill_graphs.graphs[runner.prefill_graphs.shape(plan.prefill)].output[:1]
                what = f"{rows} rows + {prompt_len} tokens"
                assert_close(mixed_logits, apart_logits, SHAPE_TOLERANCE, f"{what}: prompt logits")
                for part, got, want in zip(
                    ("K decode rows", "K prompt", "V decode rows", "V prompt"),
                    mixed_cache,
                    written(runner, rows, pos, prompt_len),
                ):
                    assert_close(got, want, SHAPE_TOLERANCE, f"{what}: cache {part}")
    finally:
        del runner
        torch.cuda.empty_cache()


# Launches that must not wait -------------------------------------------------------------------

SLEEP_MS = 60.0
# Steps of every kind: realtime prompts through the prefill graphs, batch prompts through the
# eager prefill, a prompt longer than a step's prefill budget (chunked), the moves of rows that
# finish, decode-only and realtime-only steps.
ARRIVALS = {
    0: [(True, 40), (True, 90)],
    3: [(False, 300)] * 6,
    8: [(False, 1500)],
    14: [(True, 60)],
    20: [(False, 200)] * 3,
}
WATCHED = {0: [(True, 50), (False, 400), (False, 400)], 5: [(False, 1300)]}


def sleep_cycles(ms: float) -> int:
    """Cycles of ``torch.cuda._sleep`` for about ``ms`` on this device (measured once)."""
    n = 10_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(n)
    start.record()
    torch.cuda._sleep(n)
    end.record()
    torch.cuda.synchronize()
    return int(n * ms / start.elapsed_time(end))


def test_no_kind_of_step_waits_for_the_device_at_launch(model):
    """Each step is launched behind a long sleep queued on the runner's stream: a launch that
    queues its work without waiting returns while the device still sleeps. Then more steps of
    every kind launch under the sync debugger, which raises at the first synchronizing call."""
    runner = runner_for(model, 64, 2048, SamplingParams(ignore_eos=True))
    sched = Scheduler(64, 2048, config=SchedulerConfig(reserved=8, prefill_tokens=1024, admit_every=1))
    gen = torch.Generator().manual_seed(0)

    def arrive(arrivals, step, budget, phase):
        for realtime, n in arrivals.get(step, []):
            sched.add(
                Seq(
                    key=(phase, step, n, realtime, len(sched.by_row)),
                    budget=budget,
                    realtime=realtime,
                    seed=step,
                    prompt=torch.randint(1000, 20000, (n,), generator=gen).tolist(),
                )
            )

    try:
        cycles, waited = sleep_cycles(SLEEP_MS), []
        for step in range(40):
            arrive(ARRIVALS, step, 30 if step < 10 else 400, "asleep")
            plan = sched.schedule()
            if plan.empty:
                continue
            with torch.cuda.stream(runner.stream or torch.cuda.current_stream()):
                torch.cuda._sleep(cycles)  # on the stream the runner launches on
            launched = runner.launch(plan)
            if launched.done.query():
                waited.append((step, plan))
            sched.postprocess(plan, runner.collect(launched))
        assert waited == [], f"launches that waited for the device: {waited}"
        torch.cuda.synchronize()
        for step in range(30):
            arrive(WATCHED, step, 100, "watched")
            plan = sched.schedule()
            if plan.empty:
                continue
            torch.cuda.set_sync_debug_mode("error")
            try:
                launched = runner.launch(plan)
            finally:
                torch.cuda.set_sync_debug_mode(0)
            sched.postprocess(plan, runner.collect(launched))
    finally:
        torch.cuda.set_sync_debug_mode(0)
        del runner
        torch.cuda.empty_cache()
