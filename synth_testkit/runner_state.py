"""A model runner's cache and rows filled as if mid-stream: what the mixed-step checks (tests) and
their timings (ops/bench/kernels/mixed_steps.py) start from."""

from __future__ import annotations

import torch

from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE

# (decode rows, prompt tokens) of a mixed step
MIXED_CASES = [(7, 64), (15, 128), (63, 128), (127, 64), (127, 128), (127, 192)]


def fill(runner, rows: int, gen: torch.Generator) -> None:
    """Random cache contents; rows ``0 .. rows-1`` mid-stream at positions 250-450."""
    for t in (runner.cache.k, runner.cache.v):
        for layer in range(t.shape[0]):
            t[layer].copy_(torch.randn(t[layer].shape, device=t.device).to(t.dtype))
    pos = torch.randint(250, 450, (rows,), generator=gen)
    runner.pos[:rows] = pos.cuda()
    runner.steps[:rows] = (pos - 120).cuda()
    runner.tokens[:rows] = torch.randint(
        CUSTOM_TOKEN_BASE + 10, CUSTOM_TOKEN_BASE + 4000, (rows,), generator=gen
    ).cuda()
    runner.keys[:rows] = torch.randint(0, 2**40, (rows,), generator=gen).cuda()
    runner.seen.zero_()
