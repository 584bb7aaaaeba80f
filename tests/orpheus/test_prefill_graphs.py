"""The static-shape prefill that the prefill graphs capture (serving/graphs.py), run eagerly on the
CPU (tiny model, fp32): padded prompts against each prompt prefilled alone, the cache outside the
prompts untouched but for the scratch slot, the shape chooser, and the runner through that path."""

from __future__ import annotations

import pytest
import torch

from pipeline.engines.orpheus.model.decoder import Decoder

from pipeline.engines.orpheus.model.kv_cache import KVCache
from pipeline.engines.orpheus.model.sampling import SamplingParams
from pipeline.engines.orpheus.prompt import prompt_ids
from pipeline.engines.orpheus.serving.graphs import PrefillGraphs, pack, padded_prefill, shape_for
from pipeline.engines.orpheus.serving.runner import ModelRunner
from pipeline.engines.orpheus.serving.scheduler import PrefillChunk, Scheduler, Seq
from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE, END_OF_SPEECH

ROWS, CONTEXT = 6, 64
# fp32: the padded and the unpadded pass differ only in the summation order of their GEMMs and
# attention (other shapes); measured: max abs 3e-6 on logits up to 6, relative L2 5e-7.
ATOL, RTOL = 1e-5, 1e-5


def small_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    from pipeline.engines.orpheus.tiny import TINY_LLAMA

    torch.manual_seed(0)
    fields = {**TINY_LLAMA, "initializer_range": 0.2}  # logits far from uniform
    return LlamaForCausalLM(LlamaConfig(vocab_size=512, **fields)).eval()


def random_cache(model, seed: int) -> KVCache:
    """A cache full of another sequence's leftovers (random values), the same for a given seed."""
    cfg = model.config
    cache = KVCache(cfg.num_hidden_layers, ROWS, cfg.num_key_value_heads, CONTEXT, cfg.head_dim, torch.float32, "cpu")
    gen = torch.Generator().manual_seed(seed)
    cache.k.copy_(torch.randn(cache.k.shape, generator=gen))
    cache.v.copy_(torch.randn(cache.v.shape, generator=gen))
    return cache


def chunk(prompt: list[int], row: int, start: int = 0, end: int | None = None) -> PrefillChunk:
    seq = Seq(key=row, prompt=prompt, budget=10, row=row)
    end = len(prompt) if end is None else end
    return PrefillChunk(seq, start, end, end == len(prompt))


@pytest.mark.parametrize("lengths,rows", [((13,), (3,)), ((5, 17, 9), (1, 0, 4))], ids=["one prompt", "three prompts"])
def test_padded_prefill_equals_each_prompt_prefilled_alone(lengths, rows):
    """Padded to 4 rows x 32 tokens (row 0 holds a real prompt in the second case, and every
    padding row writes row 0's scratch slot): the same last logits, the same cache at the prompts'
    positions, and nothing else changed but the scratch slot."""
    model = small_model()
    torch.manual_seed(1)
    prompts = [torch.randint(0, 512, (n,)).tolist() for n in lengths]
    chunks = [chunk(p, r) for p, r in zip(prompts, rows)]
    padded, alone = Decoder(model, random_cache(model, 2)), Decoder(model, random_cache(model, 2))
    before_k, before_v = padded.cache.k.clone(), padded.cache.v.clone()
    with torch.inference_mode():
        got = padded_prefill(padded, pack(chunks, 4, 32))  # [4, V]
        want = torch.cat(
            [
                alone.prefill(torch.tensor([p]), torch.tensor([0]), torch.tensor([len(p)]), torch.tensor([r]), len(p))
                for p, r in zip(prompts, rows)
            ]
        )
    assert got.shape == (4, 512)
    torch.testing.assert_close(got[: len(chunks)], want, atol=ATOL, rtol=RTOL)

    written = torch.zeros(ROWS, CONTEXT + 1, dtype=torch.bool)  # [R, T+1]
    for p, r in zip(prompts, rows):
        written[r, : len(p)] = True
    written_kv = written.view(1, ROWS, 1, CONTEXT + 1, 1).expand_as(padded.cache.k)
    for got_c, want_c, before in ((padded.cache.k, alone.cache.k, before_k), (padded.cache.v, alone.cache.v, before_v)):
        torch.testing.assert_close(got_c[written_kv], want_c[written_kv], atol=ATOL, rtol=RTOL)
        kept = ~written_kv.clone()
        kept[..., CONTEXT, :] = False  # the scratch slot
        assert torch.equal(got_c[kept], before[kept])


def test_shape_for_picks_the_smallest_fitting_shape_and_refuses_the_rest():
    def prompts(*lengths):
        return [chunk([7] * n, row) for row, n in enumerate(lengths)]

    assert shape_for(prompts(20)) == (1, 32)
    assert shape_for(prompts(32)) == (1, 32)
    assert shape_for(prompts(33)) == (1, 64)
    assert shape_for(prompts(120, 5)) == (2, 128)
    assert shape_for(prompts(3, 100, 40)) == (4, 128)
    assert shape_for(prompts(256, 256, 256, 256)) == (4, 256)
    assert shape_for(prompts(257)) is None  # too long
    assert shape_for(prompts(*[10] * 5)) is None  # too many
    assert shape_for([]) is None
    resumed = chunk([7] * 40, 0, start=30)  # a prompt's last part
    first_part = chunk([7] * 40, 1, end=30)  # more of it comes later
    assert shape_for([resumed]) is None and shape_for([first_part]) is None
    assert shape_for([resumed, *prompts(10)]) is None  # one such chunk: eager


def test_the_grid_is_cut_to_the_cache():
    model = small_model()
    graphs = PrefillGraphs(Decoder(model, random_cache(model, 0)), capture=False)
    assert graphs.batches == (1, 2, 4) and graphs.lengths == (32, 64)  # 6 rows of 64 tokens
    cfg = model.config
    three = KVCache(cfg.num_hidden_layers, 3, cfg.num_key_value_heads, 300, cfg.head_dim, torch.float32, "cpu")
    graphs = PrefillGraphs(Decoder(model, three), capture=False)
    assert graphs.batches == (1, 2, 3) and graphs.lengths == (32, 64, 128, 256)
    assert graphs.shape([chunk([7] * 10, r) for r in range(3)]) == (3, 32)


TEXTS = [
    "Hello there.",
    "A somewhat longer sentence to speak aloud, my friend.",
    "Hi",
    "Numbers: one, two, three, four and five.",
    "The last one arrives late.",
]


@pytest.mark.parametrize("temperature", [0, 0.6])
def test_the_runner_through_the_padded_prefill_draws_what_the_eager_prefill_draws(tiny, temperature):
    """The runner's whole-prompt plans go through the padded prefill (capture=False: the graphs'
    inputs and shapes, run eagerly); every token drawn is the eager runner's."""
    params = SamplingParams(temperature=temperature)
    prompts = [prompt_ids(tiny.tokenizer, t, "tara") for t in TEXTS]
    arrivals = {0: [0, 1, 3], 4: [2], 7: [4]}  # prompts of 24, 65, 52; 14; 38 tokens

    def drive(padded: bool):
        runner = ModelRunner(tiny.model, 4, 256, params, logits_lo=CUSTOM_TOKEN_BASE, use_graphs=False)
        if padded:
            runner.prefill_graphs = PrefillGraphs(runner.decoder, capture=False)
        sched = Scheduler(4, 256)
        seqs = [Seq(i, p, 40, seed=50 + i, stop_token=END_OF_SPEECH) for i, p in enumerate(prompts)]
        step, shapes = 0, []
        while step <= max(arrivals) or not sched.idle:
            for i in arrivals.get(step, []):
                sched.add(seqs[i])
            step += 1
            plan = sched.schedule()
            if plan.prefill:
                shapes.append(runner.prefill_graphs.shape(plan.prefill) if padded else None)
            if not plan.empty:
                sched.postprocess(plan, runner.run(plan))
        return [s.tokens for s in seqs], shapes

    eager, _ = drive(padded=False)
    padded, shapes = drive(padded=True)
    assert shapes == [(4, 128), (1, 32), (1, 64)]  # every prefill took the padded path
    assert padded == eager
    assert all(len(t) > 5 for t in eager)
