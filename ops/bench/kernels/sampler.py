"""The fused draw (kernels/sample.py, one Triton kernel) against RowSampler's torch draw: device
microseconds per draw over the model's logits, per sampling setting (CUDA). That they draw the
same tokens is tested in tests/orpheus/kernels/test_sampler_kernel.py.

    python -m ops.bench.kernels sampler [--rows 128]
"""

from __future__ import annotations

import argparse
import sys

import torch

from ops.bench.timing import mean_device_ms
from pipeline.engines.orpheus.kernels.sample import fused_draw
from pipeline.engines.orpheus.model.sampling import RowSampler, SamplingParams
from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE, END_OF_SPEECH

SETTINGS = {
    "default (t 0.6, top-p 0.95, penalty 1.1)": SamplingParams(),
    "greedy": SamplingParams(temperature=0),
    "no top-p, no penalty": SamplingParams(top_p=1.0, repetition_penalty=1.0),
    "top-p 0.5, ignore eos": SamplingParams(top_p=0.5, ignore_eos=True),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=128, help="rows per draw")
    args = ap.parse_args(argv)
    rows, dev = args.rows, "cuda"
    width = 7 * 4096 + 10 + (END_OF_SPEECH - CUSTOM_TOKEN_BASE + 1)
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(rows, width, generator=gen) * 8.0).to(dev)  # peaked, as a trained model's
    seen = (torch.rand(rows, width + 1, generator=gen) < 0.02).to(dev)
    steps = torch.randint(0, 700, (rows,), generator=gen).to(dev)
    keys = torch.randint(0, 2**32, (rows,), generator=gen).to(dev)
    for name, params in SETTINGS.items():
        sampler = RowSampler(params, width, CUSTOM_TOKEN_BASE, dev, fused=False)
        t_torch = mean_device_ms(lambda: sampler(logits, seen, steps, keys))
        t_fused = mean_device_ms(
            lambda: fused_draw(
                params, sampler.table, sampler.valid, CUSTOM_TOKEN_BASE, sampler.eos, logits, seen, steps, keys
            )
        )
        print(f"draw of {rows} rows, {name}: torch {t_torch * 1e3:.0f} us, fused {t_fused * 1e3:.0f} us", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
