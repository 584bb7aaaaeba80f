"""The prefill's Triton path (rope_store with each token's cache row, then prefill_attention over
the cache) against the torch path it replaces, on a random 28-layer model at Orpheus-3B shapes
(CUDA): a prefill (1 x 128 tokens, 4 x 64) and a mixed step (127 rows + 128 tokens), each as a
CUDA graph, median device ms of 20 replays, over an fp8 and a bf16 cache. That the two paths
compute the same is tested in tests/orpheus/kernels/test_prefill_kernels.py.

    python -m ops.bench.kernels prefill-attention
"""

from __future__ import annotations

import argparse

import torch

from ops.bench.kernels.checking import HEAD_DIM, graphed, random_model
from ops.bench.timing import median_device_ms
from pipeline.engines.orpheus.model.decoder import Decoder
from pipeline.engines.orpheus.model.kv_cache import KVCache
from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE


def time_steps(layers: int, kv_dtype) -> None:
    """Prefill and mixed steps as CUDA graphs: the torch path against the kernels, two decoders
    over one cache (timed in turn), each built with its ``prefill_attention`` setting."""
    model = random_model(layers, torch.bfloat16, "cuda")
    cfg = model.config
    cache = KVCache(
        cfg.num_hidden_layers, 136, cfg.num_key_value_heads, 1024, HEAD_DIM, model.dtype, "cuda", kv_dtype=kv_dtype
    )
    decoders = [Decoder(model, cache, CUSTOM_TOKEN_BASE, prefill_attention=kernel) for kernel in (False, True)]
    print(f"device ms, {layers} layers, {kv_dtype or 'bf16'} cache (graph replays, median of 20):", flush=True)

    def t(values):
        return torch.tensor(values, device="cuda")

    wpos = torch.randint(250, 450, (127,), device="cuda")
    tokens = torch.randint(CUSTOM_TOKEN_BASE, CUSTOM_TOKEN_BASE + 4000, (127,), device="cuda")
    one = (torch.randint(0, 1000, (1, 128), device="cuda"), t([0]), t([120]), t([130]))
    four = (torch.randint(0, 1000, (4, 64), device="cuda"), t([0] * 4), t([64, 50, 40, 20]), t([130, 131, 132, 133]))
    cases = {
        "prefill 1 x 128": lambda dec: dec.prefill(*one, 128),
        "prefill 4 x 64": lambda dec: dec.prefill(*four, 64),
        "mixed 127 rows + 128": lambda dec: dec.mixed(tokens, wpos, 451, True, *one, 128),
    }
    with torch.inference_mode():
        for name, fn in cases.items():
            cells = []
            for dec in decoders:
                replay, _ = graphed(lambda: fn(dec))
                cells.append(median_device_ms(replay, 20))
                del replay
            print(
                f"  {name:<22} torch path {cells[0]:.3f}  kernels {cells[1]:.3f}  saved {cells[0] - cells[1]:.3f} ms",
                flush=True,
            )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=28)
    args = ap.parse_args(argv)
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}", flush=True)
    for kv in ("fp8", None):
        time_steps(args.layers, kv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
