"""fused.py's Triton kernels (add-and-norm, RoPE with the cache write, silu-times-up) against their
torch references, device microseconds per call at Orpheus-3B's widths in bf16 on random data; then
the full 28-layer decode step as a CUDA graph, fused Triton against unfused torch, at each batch
(CUDA). That they compute the same is tested in tests/orpheus/kernels/test_fused_kernels.py.

    python -m ops.bench.kernels fused-ops [--batches 1 64 256] [--no-step]
"""

from __future__ import annotations

import argparse

import torch

from ops.bench.kernels.checking import (
    CONTEXT,
    EPS,
    HEAD_DIM,
    HEADS,
    HIDDEN,
    INTERMEDIATE,
    KV_HEADS,
    graphed,
    random_model,
    rope_tables,
)
from ops.bench.timing import median_device_ms
from pipeline.engines.orpheus.kernels import fused
from pipeline.engines.orpheus.model.decoder import Decoder
from pipeline.engines.orpheus.model.kv_cache import KVCache
from pipeline.engines.orpheus.tiny import ORPHEUS_3B
from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE

STEP_CONTEXT = 512  # the step timing's cache: 256 rows x 28 layers at 512 positions is 15 GB
STEP_POS = 200  # where its rows write; each row's attention reads its 201 positions


def timing(name: str, kernel, reference) -> None:
    k, r = median_device_ms(kernel), median_device_ms(reference)
    print(f"  {name:<34} triton {k * 1e3:8.1f} us   torch {r * 1e3:8.1f} us   x{r / k:.1f}", flush=True)


def time_kernels(b: int, dtype) -> None:
    rnd = dict(dtype=dtype, device="cuda")
    print(f"batch {b}:", flush=True)
    x, delta = torch.randn(b, HIDDEN, **rnd), torch.randn(b, HIDDEN, **rnd)
    w = (1 + 0.1 * torch.randn(HIDDEN, device="cuda")).to(dtype)
    timing(
        f"add_rms_norm B={b}",
        lambda: fused.add_rms_norm_triton(x, delta, w, EPS),
        lambda: fused.add_rms_norm_ref(x, delta, w, EPS),
    )
    # q, k, v as the decoder has them: column slices of the fused projection's output
    qkv = torch.randn(b, (HEADS + 2 * KV_HEADS) * HEAD_DIM, **rnd)
    q, k, v = (
        t.view(b, -1, HEAD_DIM) for t in qkv.split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1)
    )
    cos, sin = rope_tables(dtype, "cuda")
    wpos = torch.randperm(CONTEXT, device="cuda")[:b]
    caches = [torch.zeros(b + 3, KV_HEADS, CONTEXT + 1, HEAD_DIM, **rnd) for _ in range(4)]
    timing(
        f"rope_store B={b}",
        lambda: fused.rope_store_triton(q, k, v, cos, sin, wpos, caches[2], caches[3]),
        lambda: fused.rope_store_ref(q, k, v, cos, sin, wpos, caches[0], caches[1]),
    )
    gate_up = 2 * torch.randn(b, 2 * INTERMEDIATE, **rnd)
    timing(f"silu_mul B={b}", lambda: fused.silu_mul_triton(gate_up), lambda: fused.silu_mul_ref(gate_up))


def time_step(batches, dtype) -> None:
    """The 28-layer decode step as a CUDA graph, unfused torch against fused Triton, over one cache
    (timed in turn)."""
    model = random_model(ORPHEUS_3B["num_hidden_layers"], dtype, "cuda")
    cfg = model.config
    cache = KVCache(
        cfg.num_hidden_layers, max(batches), cfg.num_key_value_heads, STEP_CONTEXT, HEAD_DIM, model.dtype, model.device
    )
    plain = Decoder(model, cache, CUSTOM_TOKEN_BASE, fuse=False, ops=fused.REFERENCE)
    fast = Decoder(model, cache, CUSTOM_TOKEN_BASE, ops=fused.TRITON)
    weights = sum(p.nbytes for p in model.model.layers.parameters()) + fast.head_w.nbytes
    print(f"decode step, 28 layers, one graph per batch ({weights / 1e9:.2f} GB of weights read per step):", flush=True)
    with torch.inference_mode():
        for b in batches:
            tokens = torch.randint(CUSTOM_TOKEN_BASE, cfg.vocab_size, (b,), device="cuda")
            wpos = torch.full((b,), STEP_POS, device="cuda")
            cells = []
            for name, dec in (("unfused torch", plain), ("fused triton", fast)):
                replay, _ = graphed(lambda: dec.decode(tokens, wpos, 256, per_row=True))
                ms = median_device_ms(replay)
                cells.append(f"{name} {ms:.3f} ms ({weights / ms / 1e6:.0f} GB/s)")
                del replay
            print(f"  B={b}: " + "   ".join(cells), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--no-step", action="store_true", help="the kernels only, not the 28-layer step")
    args = ap.parse_args(argv)
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}", flush=True)
    torch.manual_seed(0)
    for b in args.batches:
        time_kernels(b, torch.bfloat16)
    if not args.no_step:
        time_step(args.batches, torch.bfloat16)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
