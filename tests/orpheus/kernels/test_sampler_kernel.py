"""kernels/sample.py's one-kernel draw against RowSampler's torch draw: the same tokens over peaked
and flat logits for each sampling setting, and the same tokens from the decode loop. Its time
against the torch draw: ``python -m ops.bench.kernels sampler``."""

from __future__ import annotations

import pytest
import torch

from pipeline.engines.orpheus.model.sampling import RowSampler, SamplingParams
from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE, END_OF_SPEECH

WIDTH = 7 * 4096 + 10 + (END_OF_SPEECH - CUSTOM_TOKEN_BASE + 1)  # the model's logits kept
SETTINGS = {
    "default": SamplingParams(),  # t 0.6, top-p 0.95, penalty 1.1
    "greedy": SamplingParams(temperature=0),
    "no top-p, no penalty": SamplingParams(top_p=1.0, repetition_penalty=1.0),
    "top-p 0.5, ignore eos": SamplingParams(top_p=0.5, ignore_eos=True),
}


@pytest.mark.parametrize("name", SETTINGS)
def test_the_fused_draw_gives_the_torch_draws_tokens(device, name):
    """Greedy: every token. Sampling: at least 97%, since a float sum in another order may move a
    draw that falls on a boundary of the cumulative distribution. RowSampler asked for the kernel
    returns the kernel's tokens."""
    from pipeline.engines.orpheus.kernels.sample import fused_draw

    params = SETTINGS[name]
    rows = 128 if device == "cuda" else 6
    sampler = RowSampler(params, WIDTH, CUSTOM_TOKEN_BASE, device)
    routed = RowSampler(params, WIDTH, CUSTOM_TOKEN_BASE, device, fused=True)
    assert routed.fused is not None
    gen = torch.Generator().manual_seed(0)
    same = 0
    for scale in (8.0, 1.0, 0.1):  # peaked like a trained model's, then flat (random weights)
        logits = (torch.randn(rows, WIDTH, generator=gen) * scale).to(device)
        seen = (torch.rand(rows, WIDTH + 1, generator=gen) < 0.02).to(device)
        steps = torch.randint(0, 700, (rows,), generator=gen).to(device)
        keys = torch.randint(0, 2**32, (rows,), generator=gen).to(device)
        got = fused_draw(
            params, sampler.table, sampler.valid, CUSTOM_TOKEN_BASE, sampler.eos, logits, seen, steps, keys
        )
        assert torch.equal(routed(logits, seen, steps, keys), got)
        same += int((sampler(logits, seen, steps, keys) == got).sum())
    assert same / (3 * rows) >= (1.0 if params.greedy else 0.97), f"{same} of {3 * rows}"


def test_the_decode_loop_draws_the_same_tokens_with_the_fused_draw(device):
    """Runner and scheduler over a small random Llama, the first tokens (``_begin``) included."""
    from transformers import LlamaForCausalLM

    from pipeline.engines.orpheus.serving.runner import ModelRunner
    from pipeline.engines.orpheus.serving.scheduler import Scheduler, Seq
    from pipeline.engines.orpheus.tiny import tiny_llama_config

    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_llama_config()).eval().to(device)
    tokens = []
    for fused in (False, True):
        runner = ModelRunner(model, 4, 128, SamplingParams(), logits_lo=CUSTOM_TOKEN_BASE, use_graphs=False)
        # the draw under test in place of the one the device picks (torch on the CPU)
        runner.sampler = RowSampler(SamplingParams(), runner.width, CUSTOM_TOKEN_BASE, device, fused=fused)
        sched = Scheduler(4, 128)
        seqs = [Seq(i, [1, 2, 3 + i], budget=8, seed=7 + i) for i in range(2)]
        for seq in seqs:
            sched.add(seq)
        while not sched.idle:
            plan = sched.schedule()
            sched.postprocess(plan, runner.run(plan))
        tokens.append([seq.tokens for seq in seqs])
    assert tokens[0] == tokens[1]
    assert sum(len(t) for t in tokens[1]) > 3
