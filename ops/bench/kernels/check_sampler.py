"""The fused draw (kernels/sample.py) against RowSampler's torch draw: the same tokens for random
logits over many rows and steps, per sampling setting; on CUDA also the time of each.

    python -m ops.bench.kernels.check_sampler [--device cpu]   # cpu: TRITON_INTERPRET=1
"""

from __future__ import annotations

import argparse
import sys

import torch

from pipeline.engines.orpheus.kernels.sample import fused_draw
from pipeline.engines.orpheus.model.sampling import RowSampler, SamplingParams
from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE, END_OF_SPEECH

SETTINGS = {
    "default (t 0.6, top-p 0.95, penalty 1.1)": SamplingParams(),
    "greedy": SamplingParams(temperature=0),
    "no top-p, no penalty": SamplingParams(top_p=1.0, repetition_penalty=1.0),
    "top-p 0.5, ignore eos": SamplingParams(top_p=0.5, ignore_eos=True),
}


def check_runner(device: str) -> bool:
    """The decode loop (runner + scheduler, a small random Llama) with the fused draw gives the
    torch draw's tokens, first tokens (``_begin``) included."""
    from transformers import LlamaForCausalLM

    from pipeline.engines.orpheus.serving.runner import ModelRunner
    from pipeline.engines.orpheus.serving.scheduler import Scheduler, Seq
    from pipeline.engines.orpheus.tiny import tiny_llama_config

    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_llama_config()).eval().to(device)
    out = []
    for fused in (False, True):
        runner = ModelRunner(model, 4, 128, SamplingParams(), logits_lo=CUSTOM_TOKEN_BASE,
                             use_graphs=False)
        runner.sampler = RowSampler(SamplingParams(), runner.width, CUSTOM_TOKEN_BASE, device,
                                    fused=fused)
        sched = Scheduler(4, 128)
        seqs = [Seq(i, [1, 2, 3 + i], budget=30, seed=7 + i) for i in range(3)]
        for q in seqs:
            sched.add(q)
        while not sched.idle:
            plan = sched.schedule()
            sched.postprocess(plan, runner.run(plan))
        out.append([q.tokens for q in seqs])
    same = out[0] == out[1]
    print(f"decode loop with the fused draw: tokens {'equal' if same else 'DIFFER'} "
          f"({sum(len(t) for t in out[1])} tokens)", flush=True)
    return same


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rows", type=int, default=0, help="rows per draw (default: 128, cpu 6)")
    args = ap.parse_args(argv)
    dev = args.device
    rows = args.rows or (128 if dev.startswith("cuda") else 6)
    width = 7 * 4096 + 10 + (END_OF_SPEECH - CUSTOM_TOKEN_BASE + 1)
    gen = torch.Generator().manual_seed(0)
    ok = True
    for name, params in SETTINGS.items():
        sampler = RowSampler(params, width, CUSTOM_TOKEN_BASE, dev)
        same = total = 0
        for trial in range(3):
            # peaked like a trained model's (a few likely codes), and flat (random weights)
            scale = (8.0, 1.0, 0.1)[trial]
            logits = (torch.randn(rows, width, generator=gen) * scale).to(dev)
            seen = (torch.rand(rows, width + 1, generator=gen) < 0.02).to(dev)
            steps = torch.randint(0, 700, (rows,), generator=gen).to(dev)
            keys = torch.randint(0, 2**32, (rows,), generator=gen).to(dev)
            want = sampler(logits, seen, steps, keys)
            got = fused_draw(params, sampler.table, sampler.valid, CUSTOM_TOKEN_BASE, sampler.eos,
                             logits, seen, steps, keys)
            routed = RowSampler(params, width, CUSTOM_TOKEN_BASE, dev, fused=True)
            assert routed.fused is not None and torch.equal(routed(logits, seen, steps, keys), got)
            same += int((want == got).sum())
            total += rows
        share = same / total
        good = share >= (1.0 if params.greedy else 0.97)
        ok &= good
        line = f"fused draw, {name}: {same}/{total} tokens equal the torch draw"
        if dev.startswith("cuda"):
            from ops.bench.timing import mean_device_ms

            t_torch = mean_device_ms(lambda: sampler(logits, seen, steps, keys))
            t_fused = mean_device_ms(lambda: fused_draw(params, sampler.table, sampler.valid,
                                                 CUSTOM_TOKEN_BASE, sampler.eos, logits, seen,
                                                 steps, keys))
            line += f"; eager {t_torch * 1e3:.0f} us torch, {t_fused * 1e3:.0f} us fused"
        print(line + (" ok" if good else " MISMATCH"), flush=True)
    ok &= check_runner(dev)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
