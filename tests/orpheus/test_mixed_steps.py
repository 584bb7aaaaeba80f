"""Mixed steps (runner.py, ``Decoder.mixed``): one pass that decodes rows and prefills one whole
prompt, run eagerly on the CPU (tiny model, fp32): the same logits and cache as the decode step and
the prefill run one after the other, and the runner's tokens unchanged by taking that path."""

from __future__ import annotations

import pytest
import torch

from pipeline.engines.orpheus.config import Switches
from pipeline.engines.orpheus.model.decoder import Decoder
from pipeline.engines.orpheus.model.sampling import SamplingParams
from pipeline.engines.orpheus.prompt import prompt_ids
from pipeline.engines.orpheus.serving import runner as runner_mod
from pipeline.engines.orpheus.serving.graphs import pack
from pipeline.engines.orpheus.serving.runner import ModelRunner
from pipeline.engines.orpheus.serving.scheduler import Scheduler, Seq
from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE, END_OF_SPEECH
from tests.orpheus.test_prefill_graphs import ATOL, CONTEXT, ROWS, RTOL, chunk, random_cache, small_model


@pytest.mark.parametrize("prompt_row", [4, 2], ids=["row-past-the-batch", "idle-row-in-the-batch"])
def test_mixed_pass_equals_decode_then_prefill(prompt_row):
    """Rows 0, 1 and 3 decode at positions 20, 7 and 33 (row 2 idle), and a prompt of 13 tokens
    padded to 32 goes into row 4 (a batch row past the step's) or the idle row 2 (a stream's new
    row, as the runner places it): the logits of both parts (the idle row's too) and every cache
    entry equal a decode step followed by the padded prefill, over the same leftovers. (The per-row attention of the
    GPU's graphs is a Triton kernel: tests/orpheus/kernels/test_on_cuda.py compares it there.)"""
    model = small_model()
    torch.manual_seed(3)
    prompt = torch.randint(0, 512, (13,)).tolist()
    packed = pack([chunk(prompt, prompt_row)], 1, 32)
    s = packed.shape[1] - 2
    ids, lens, rows = packed[:, :s], packed[:, s], packed[:, s + 1]
    tokens = torch.tensor([5, 77, 0, 301])
    mixed, apart = Decoder(model, random_cache(model, 4)), Decoder(model, random_cache(model, 4))
    wpos = torch.tensor([20, 7, mixed.cache.scratch, 33])
    length = CONTEXT
    with torch.inference_mode():
        got_dec, got_pre = mixed.mixed(tokens, wpos, length, False, ids, torch.zeros_like(lens), lens, rows, s)
        want_dec = apart.decode(tokens, wpos, length)
        want_pre = apart.prefill(ids, torch.zeros_like(lens), lens, rows, s)
    torch.testing.assert_close(got_dec, want_dec, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(got_pre, want_pre, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(mixed.cache.k, apart.cache.k, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(mixed.cache.v, apart.cache.v, atol=ATOL, rtol=RTOL)
    assert got_dec.shape == (4, 512) and got_pre.shape == (1, 512)
    assert ROWS > 4


TEXTS = [
    "Hello there.",
    "A somewhat longer sentence to speak aloud, my friend.",
    "Hi",
    "Numbers: one, two, three, four and five.",
    "The last one arrives late.",
]


@pytest.mark.parametrize("temperature", [0, 0.6])
def test_runner_tokens_are_the_same_with_mixed_steps(tiny, temperature):
    """Streams arriving one at a time beside running ones: with mixed steps on, the arrivals'
    prefills ride in decode steps (counted), and every token drawn equals the run with them off."""
    params = SamplingParams(temperature=temperature)
    prompts = [prompt_ids(tiny.tokenizer, t, "tara") for t in TEXTS]
    arrivals = {0: [0], 3: [1], 5: [2], 9: [3], 14: [4]}

    def drive(mixed: bool):
        runner = ModelRunner(
            tiny.model,
            4,
            256,
            params,
            logits_lo=CUSTOM_TOKEN_BASE,
            use_graphs=False,
            switches=Switches(mixed_steps=mixed),
        )
        sched = Scheduler(4, 256)
        seqs = [
            Seq(i, p, 40, seed=70 + i, stop_token=END_OF_SPEECH, realtime=i % 2 == 0) for i, p in enumerate(prompts)
        ]
        step, pending = 0, None
        while step <= max(arrivals) or not sched.idle or pending:
            for i in arrivals.get(step, []):
                sched.add(seqs[i])
            step += 1
            plan = sched.schedule()
            launched = None if plan.empty else (plan, runner.launch(plan))
            previous, pending = pending, launched
            if previous:
                sched.postprocess(previous[0], runner.collect(previous[1]))
        return [s.tokens for s in seqs], runner.mixed_steps

    apart, none = drive(mixed=False)
    together, mixed_steps = drive(mixed=True)
    assert none == 0
    assert mixed_steps >= 3  # arrivals at 3, 5, 9, 14 find rows decoding (one may wait)
    assert together == apart
    assert all(len(t) > 5 for t in apart)


def test_mixed_shape_refuses_what_a_mixed_step_cannot_hold(tiny, monkeypatch):
    monkeypatch.setattr(runner_mod, "MIXED_BATCHES", (2, 4))
    runner = ModelRunner(tiny.model, 8, 512, SamplingParams(), logits_lo=CUSTOM_TOKEN_BASE, use_graphs=False)
    assert runner.mixed_sizes == (2, 4)

    def plan_of(rows: int, *chunks):
        from pipeline.engines.orpheus.serving.scheduler import Plan

        decode = [Seq(i, [1], 5, row=i) for i in range(rows)]
        return Plan(prefill=list(chunks), decode=decode, rows=rows)

    assert runner._mixed_shape(plan_of(1, chunk([7] * 20, 1))) == (2, 32)
    assert runner._mixed_shape(plan_of(3, chunk([7] * 100, 3))) == (4, 128)
    assert runner._mixed_shape(plan_of(5, chunk([7] * 20, 5))) is None  # too many rows
    assert runner._mixed_shape(plan_of(2, chunk([7] * 300, 2))) is None  # too long
    assert runner._mixed_shape(plan_of(2, chunk([7] * 20, 2), chunk([7] * 9, 3))) is None  # two
    assert runner._mixed_shape(plan_of(2, chunk([7] * 40, 2, end=30))) is None  # not whole


def test_on_cuda_a_mixed_step_needs_its_graph(tiny, monkeypatch):
    """On CUDA a mixed step runs only from a captured graph; a shape without one (its capture
    failed, or it is off the grid) prefills apart."""
    from pipeline.engines.orpheus.serving.scheduler import Plan

    monkeypatch.setattr(runner_mod, "MIXED_BATCHES", (2, 4))
    runner = ModelRunner(tiny.model, 8, 512, SamplingParams(), logits_lo=CUSTOM_TOKEN_BASE, use_graphs=False)
    plan = Plan(prefill=[chunk([7] * 20, 1)], decode=[Seq(0, [1], 5, row=0)], rows=2)
    runner._cuda = True  # as a CUDA runner decides; nothing runs here
    assert runner._mixed_shape(plan) is None
    runner.mixed_graphs[(2, 32)] = object()
    assert runner._mixed_shape(plan) == (2, 32)
