"""Device-only timings of the engine's two kernels-in-a-loop: the decode graph per (batch, length)
and the codec per window batch. Run: python -m ops.bench.kernels.micro (GPU)."""

from __future__ import annotations


import numpy as np
import torch

from ops.bench.timing import mean_device_ms


def step_kernels(fn, reps: int = 20, top: int = 25) -> list[tuple[str, float, float]]:
    """``fn``'s kernels under the profiler, per call of ``fn``: (name, launches, us), largest first,
    the rest summed in one line, and the total."""
    from ops.bench.orpheus.profile import profile_kernels

    fn()
    prof = profile_kernels(lambda: [fn() for _ in range(reps)], top=10_000)
    rows = [(name, calls / reps, ms * 1000 / reps) for name, calls, ms in prof["top_kernels"]]
    total = (f"total ({len(rows)} kernels)", sum(r[1] for r in rows), sum(r[2] for r in rows))
    rest = rows[top:]
    if rest:
        rows = rows[:top] + [("the rest", sum(r[1] for r in rest), sum(r[2] for r in rest))]
    return rows + [total]


def check_attention() -> None:
    """The per-row Triton kernel against SDPA with a per-row mask, on random data."""
    import torch.nn.functional as F

    from pipeline.engines.orpheus.kernels.attention import decode_attention

    torch.manual_seed(0)
    b, hkv, g, d, t = 96, 8, 3, 128, 1025
    q = torch.randn(b, hkv, g, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b + 4, hkv, t, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    lens = torch.randint(1, t, (b,), device="cuda")
    mask = (torch.arange(t, device="cuda").view(1, -1) < lens.view(-1, 1)).view(b, 1, 1, t)
    ref = F.scaled_dot_product_attention(q.float(), k[:b].float(), v[:b].float(), attn_mask=mask, scale=d**-0.5)
    out = decode_attention(q, k, v, lens, d**-0.5).float()
    print(f"per-row attention vs fp32 SDPA: rel L2 {float((out - ref).norm() / ref.norm()):.2e}", flush=True)
    kv_bytes = 2 * int(lens.sum()) * hkv * d * 2
    ms = mean_device_ms(lambda: decode_attention(q, k, v, lens, d**-0.5))
    print(f"per-row attention: {ms:.3f} ms, {kv_bytes / ms / 1e9:.0f} GB/s of live KV", flush=True)


def main(argv=None) -> int:
    import argparse

    from ops.bench.orpheus.models import load_model
    from pipeline.engines.orpheus.model.sampling import SamplingParams
    from pipeline.engines.orpheus.serving.runner import ModelRunner
    from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("quant", nargs="?", default="none", help="weights: none, fp8, ...")
    ap.add_argument(
        "--kv-dtype", default="model", choices=("model", "fp8"), help="the KV cache's dtype: the model's, or fp8"
    )
    ap.add_argument("--rows", type=int, default=384)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 64, 192, 384])
    ap.add_argument(
        "--lengths",
        type=int,
        nargs="+",
        default=[256, 1024, 2048],
        help="positions every row holds (each row at the length or up to 10%% less)",
    )
    ap.add_argument("--no-codec", action="store_true")
    ap.add_argument(
        "--profile", action="store_true", help="also each graph's kernels under the torch profiler, in us per step"
    )
    args = ap.parse_args(argv)
    check_attention()
    lm = load_model("random-3b", "auto", "auto", args.quant)
    runner = ModelRunner(
        lm.model, args.rows, 2048, SamplingParams(ignore_eos=True), logits_lo=CUSTOM_TOKEN_BASE, kv_dtype=args.kv_dtype
    )
    print(f"decode graph, weights {args.quant}, KV cache {runner.cache.k[0].dtype}:", flush=True)
    runner.active.fill_(True)
    gen = torch.Generator().manual_seed(0)
    profiles = []
    for b in args.batches:
        cells = []
        for length in args.lengths:
            g = runner.graphs[(runner.padded_batch(b), runner.context)]  # one length: the row's
            spread = torch.randint(0, max(1, length // 10), (args.rows,), generator=gen)
            runner.pos.copy_(torch.clamp(length - 30 - spread, min=1).to(runner.pos.device))
            cells.append(f"L{length}={mean_device_ms(g.replay):.2f}")
            if args.profile:
                profiles.append((b, length, step_kernels(g.replay)))
        print(f"  B={b}: " + " ".join(cells) + " ms", flush=True)
    for b, length, kernels in profiles:
        print(f"kernels of one step, B={b}, L={length} (us; calls per step):", flush=True)
        for name, calls, us in kernels:
            print(f"  {us:8.1f} {calls:5.0f}  {name}", flush=True)
    if args.no_codec:
        return 0
    from pipeline.engines.orpheus.engine import batch_windows, realtime_windows

    rng = np.random.default_rng(0)
    for label in ("eager", "graphs"):
        if label == "graphs":
            lm.codec.capture_graphs(realtime_windows(), batch_windows(), lm.codec.fallbacks)
        for g, w in ((64, 4), (32, 19), (64, 19), (16, 7)):
            frames = rng.integers(0, 4096, size=(g, w, 7))
            keys = np.arange(g)
            urgent = w in realtime_windows() and w not in batch_windows()  # that lane's graphs
            t = mean_device_ms(lambda: lm.codec.decode_windows(frames, keys, urgent), reps=5)
            print(f"codec {label} {g} windows x {w} frames: {t:.2f} ms ({t / (g * w):.3f} ms per frame)", flush=True)
            if args.profile and label == "graphs" and (g, w) in ((64, 4), (32, 19)):
                print(f"kernels of one codec call, {g} windows x {w} frames (us; calls):")
                for name, calls, us in step_kernels(lambda: lm.codec.decode_windows(frames, keys), reps=5, top=15):
                    print(f"  {us:8.1f} {calls:5.0f}  {name}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
