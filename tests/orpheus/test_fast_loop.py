"""The continuous-batching engine against the reference paths (tiny model, fp32, CPU)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.engines.base import SynthesisRequest
from pipeline.engines.orpheus.config import OrpheusConfig
from pipeline.engines.orpheus.engine import OrpheusEngine
from pipeline.engines.orpheus.reference import GenJob, ReferenceEngine, generate_batched, reference_generate
from pipeline.engines.orpheus.model.sampling import SamplingParams
from pipeline.engines.orpheus.prompt import prompt_ids
from pipeline.engines.orpheus.serving.runner import ModelRunner
from pipeline.engines.orpheus.serving.scheduler import Scheduler, SchedulerConfig, Seq
from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE, END_OF_SPEECH

TEXTS = [
    "Hello there.",
    "A somewhat longer sentence to speak aloud, my friend.",
    "Hi",
    "Numbers: one, two, three, four and five.",
    "The last one arrives late.",
]
BUDGETS = [50, 90, 30, 70, 40]


def drive(
    tiny,
    params,
    rows: int,
    arrivals: dict[int, list[int]],
    prefill_tokens: int = 2048,
    realtime=(),
    overlap: bool = True,
    **scheduling,
):
    """Run the runner + scheduler by hand; ``arrivals`` maps step -> indexes of TEXTS arriving.
    With ``overlap`` step N+1 is planned and launched before step N's tokens are post-processed,
    as the engine loop does on the GPU."""
    prompts = [prompt_ids(tiny.tokenizer, t, "tara") for t in TEXTS]
    seqs = [
        Seq(i, p, b, seed=1000 + i, stop_token=END_OF_SPEECH, realtime=i in realtime)
        for i, (p, b) in enumerate(zip(prompts, BUDGETS))
    ]
    runner = ModelRunner(tiny.model, rows, 256, params, logits_lo=CUSTOM_TOKEN_BASE, use_graphs=False)
    sched = Scheduler(rows, 256, config=SchedulerConfig(prefill_tokens=prefill_tokens, **scheduling))
    step, last, pending = 0, max(arrivals), None
    while step <= last or not sched.idle or pending:
        for i in arrivals.get(step, []):
            sched.add(seqs[i])
        step += 1
        plan = sched.schedule()
        launched = None if plan.empty else (plan, runner.launch(plan))
        previous, pending = (pending, launched) if overlap else (launched, None)
        if previous:
            sched.postprocess(previous[0], runner.collect(previous[1]))
    return prompts, seqs, {s.key: s.tokens for s in seqs}, sched


@pytest.mark.parametrize("overlap", [True, False], ids=["overlapped", "step-by-step"])
@pytest.mark.parametrize("rows,prefill_tokens", [(1, 2048), (3, 2048), (2, 7)])
def test_greedy_tokens_equal_generate_with_arrivals_and_departures(tiny, rows, prefill_tokens, overlap):
    params = SamplingParams(temperature=0)
    prompts, seqs, out, _ = drive(tiny, params, rows, {0: [0, 1], 3: [2], 9: [3, 4]}, prefill_tokens, overlap=overlap)
    for i, (p, b) in enumerate(zip(prompts, BUDGETS)):
        assert out[i] == reference_generate(tiny.model, [p], params, [b])[0], f"sequence {i}"
        assert seqs[i].finish_reason in ("eos", "budget")


@pytest.mark.parametrize(
    "playing_every,pause", [(1, False), (2, False), (2, True)], ids=["", "starting-only", "starting-only-paused"]
)
@pytest.mark.parametrize("overlap", [True, False], ids=["overlapped", "step-by-step"])
@pytest.mark.parametrize("rows,max_rows", [(4, 0), (3, 2)], ids=["no-cap", "preempting"])
def test_tokens_are_unchanged_by_realtime_tiers_and_realtime_only_steps(
    tiny, overlap, rows, max_rows, playing_every, pause
):
    """Streams arriving among batch work take the low rows (the batch rows there move up, cache
    and state), and decode alone between full steps (with ``playing_every``, some of those steps
    decode the starting stream alone; with ``pause``, batch rows over the cap wait in place instead
    of being preempted): every sequence still gets generate()'s tokens."""
    params = SamplingParams(temperature=0)
    prompts, seqs, out, sched = drive(
        tiny,
        params,
        rows,
        {0: [0, 1], 3: [2], 9: [3, 4]},
        realtime=(2, 4),
        overlap=overlap,
        batch_every=2,
        batch_every_starting=3,
        first_tokens=12,
        realtime_max_rows=max_rows,
        batch_floor=0,
        playing_every=playing_every,
        pause_batch=pause,
    )
    assert sched.realtime_steps > 0
    assert (sched.starting_steps > 0) == (playing_every > 1)
    for i, (p, b) in enumerate(zip(prompts, BUDGETS)):
        assert out[i] == reference_generate(tiny.model, [p], params, [b])[0], f"sequence {i}"


@pytest.mark.parametrize("temperature", [0, 0.6])
def test_preempted_batch_work_resumes_with_the_same_tokens(tiny, temperature):
    params = SamplingParams(temperature=temperature)
    prompts, seqs, out, sched = drive(
        tiny, params, 3, {0: [0, 1, 2], 6: [3, 4]}, realtime=(3, 4), realtime_max_rows=2, batch_floor=0
    )
    assert sched.preempted >= 1 and any(s.preemptions for s in seqs[:3])
    for i, (p, b) in enumerate(zip(prompts, BUDGETS)):
        steps = list(generate_batched(tiny.model, [GenJob(i, p, b, 1000 + i)], params))
        assert out[i] == [tok for s in steps for _k, tok in s.tokens], f"sequence {i}"


def test_sampled_tokens_equal_the_part_one_loop_whatever_the_neighbours(tiny):
    params = SamplingParams()  # temperature 0.6, top-p 0.95, repetition penalty 1.1
    prompts, _seqs, out, _ = drive(tiny, params, 2, {0: [0, 1, 2], 5: [3], 6: [4]})
    for i, (p, b) in enumerate(zip(prompts, BUDGETS)):
        steps = list(generate_batched(tiny.model, [GenJob(i, p, b, 1000 + i)], params))
        assert out[i] == [tok for s in steps for _k, tok in s.tokens], f"sequence {i}"


def test_the_active_mask_follows_the_decoded_rows_through_its_cache(tiny):
    """The runner copies the active mask only when the decoded rows change, from masks it keeps
    for the last few row sets: whatever the order of the sets, the device mask is the plan's."""
    from pipeline.engines.orpheus.serving.runner import ACTIVE_MASKS
    from pipeline.engines.orpheus.serving.scheduler import Plan

    rows = 6
    runner = ModelRunner(tiny.model, rows, 256, SamplingParams(), logits_lo=CUSTOM_TOKEN_BASE, use_graphs=False)
    seqs = [Seq(i, [1], 10, row=i) for i in range(rows)]
    full, tier = [0, 1, 2, 3, 4, 5], [0, 1]
    others = [[0, 2, 3, 4, 5], [1, 2], [5], [0, 1, 3], [2, 3, 4]]  # more sets than are kept
    for decoded in [full, full, tier, full, tier, tier, *others, tier, full, others[0], full]:
        launched = runner.launch(Plan(decode=[seqs[r] for r in decoded], rows=decoded[-1] + 1, context=8))
        assert runner.active.tolist() == [r in decoded for r in range(rows)], decoded
        assert sorted(runner.collect(launched)) == decoded
        assert len(runner._masks) <= ACTIVE_MASKS
        assert all(m.tolist() == [r in key for r in range(rows)] for key, m in runner._masks.items())


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_first_token_draws_get_aligned_per_row_tensors(tiny, n):
    """``_begin`` hands the sampler per-row tensors that start 16-byte aligned for any count of
    prompts: Triton specializes its kernels on pointer alignment, so an odd count would compile
    another variant of the fused sampler mid-serving."""
    import torch

    runner = ModelRunner(tiny.model, 8, 256, SamplingParams(), logits_lo=CUSTOM_TOKEN_BASE, use_graphs=False)
    seen = []

    def sampler(logits, seen_rows, steps, keys):
        seen.append([t.data_ptr() % 16 for t in (steps, keys)])
        return torch.full((logits.shape[0],), CUSTOM_TOKEN_BASE, dtype=torch.int64)

    runner.sampler = sampler
    seqs = [Seq(i, [1, 2, 3], 10, row=i, seed=i) for i in range(n)]
    first = runner._begin(seqs, torch.zeros(n, runner.width))
    assert seen == [[0, 0]] and first.tolist() == [CUSTOM_TOKEN_BASE] * n
    assert runner.pos[:n].tolist() == [3] * n and runner.steps[:n].tolist() == [1] * n


def test_the_engine_audio_equals_the_reference_engine(tiny):
    requests = [SynthesisRequest(i, t, "tara", seed=7 + i, realtime=i == 1) for i, t in enumerate(TEXTS)]

    def render(engine):
        pieces: dict = {}
        finals = 0
        for chunk in engine.synthesize(requests):
            assert chunk.error is None
            pieces.setdefault(chunk.key, []).append(chunk.audio)
            finals += chunk.final
        assert finals == len(requests)
        return {k: np.concatenate(v) for k, v in pieces.items()}

    fast = OrpheusEngine(tiny, OrpheusConfig(context=2048), max_batch=2)
    try:
        assert fast.info.max_batch == 2
        got = render(fast)
    finally:
        fast.close()
    want = render(ReferenceEngine(tiny, OrpheusConfig(), max_batch=2))
    for k in want:
        assert got[k].size > 0
        np.testing.assert_allclose(got[k], want[k], atol=1e-5)


def test_texts_are_split_to_fit_a_cache_row(tiny):
    engine = OrpheusEngine(tiny, OrpheusConfig(context=256), max_batch=1)
    try:
        chars = engine.info.max_text_chars
        assert 20 <= chars < 40  # 256 tokens hold about 20 characters of speech at 2x slack
        # a prompt that fits gets its budget cut to the row; one that does not is refused clearly
        chunks = list(engine.synthesize([SynthesisRequest("x", "word " * 30, "tara")]))
        assert chunks[-1].final and chunks[-1].error is None
        chunks = list(engine.synthesize([SynthesisRequest("y", "word " * 100, "tara")]))
        assert len(chunks) == 1 and "does not fit a context of 256" in str(chunks[0].error)
    finally:
        engine.close()
