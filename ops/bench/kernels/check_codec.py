"""kernels/codec.py against the modules it replaces, then SNAC decodes fused against unfused, and
(on CUDA) a codec call's time per lane and shape, fused against unfused, in the codec's graphs.

    .venv/bin/python -m ops.bench.kernels.check_codec                 # CUDA, SNAC 24 kHz shapes
    TRITON_INTERPRET=1 .venv/bin/python -m ops.bench.kernels.check_codec --device cpu --tiny

1. The kernels on fresh random inputs, against their torch references: ``snake_dw_snake`` at each
   dilation and at lengths shorter than its reach (the zero padding), ``keyed_normal`` (the same
   integers as rng.normal; the floats to rounding).
2. A SNAC decoder with random weights and random Snake alphas (its weight norms folded, as
   codec.py loads it): one decode of random codes by the fused codec against the module's own
   ops. On CUDA both are also compared with an exact fp32 decode (TF32 off): cuDNN runs the
   module's convolutions in TF32, and the fused pointwise GEMM takes TF32 products too.
3. On CUDA: the wall time of a ``decode_windows`` call (codes in, audio on the host: what a
   codec lane waits for), median of ``--reps``, each lane's graphs replayed, for the window counts
   and lengths the lanes see with streams beside batch work; then the kernels of one call, by name.

Exits 1 when an error passes its tolerance, 2 when the kernels cannot run here.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from pipeline.engines.orpheus.codec.snac import SnacCodec
from pipeline.engines.orpheus.kernels import codec as codec_kernels
from pipeline.engines.orpheus.tiny import SNAC_24KHZ, TINY_SNAC

from ops.bench.kernels.checking import Report, kernels_runnable, start

KERNEL_TOL = (1e-5, 1e-6)          # fp32 against fp32: reordered sums
NOISE_TOL = (1e-5, 1e-6)
TF32_TOL = (5e-3, 2e-3)            # the pointwise GEMM's TF32 products against torch's (TF32 too)
DECODE_TOL = {"cpu": (1e-4, 1e-5), "cuda": (2e-2, 1e-2)}   # cuda: TF32 convolutions in the module
# (lane, windows, frames a window): the realtime lane's first chunks (3 frames; 2 with a
# lookahead of 1) and ramp windows, the batch lane's slices of 16-frame chunks and first chunks
CELLS = ((True, 1, 3), (True, 4, 3), (True, 16, 5), (True, 32, 7), (True, 64, 7),
         (False, 32, 19), (False, 64, 19), (False, 64, 4))


def check_kernels(report: Report, device: str, tiny: bool) -> None:
    channels = (16, 8) if tiny else (512, 64)
    gemm_tol = KERNEL_TOL if not device.startswith("cuda") else TF32_TOL
    for c in channels:
        for dilation in (1, 3, 9):
            for t in ((5, 40) if tiny else (24, 1000)):      # 5: shorter than the taps' reach
                x = torch.randn(2, c, t, device=device) * 3
                a1, a2 = (torch.rand(c, device=device) * 1.7 + 0.3 for _ in range(2))
                w = torch.randn(c * 7, device=device) * 0.3
                wb, pb = torch.randn(c, device=device), torch.randn(c, device=device)
                h = codec_kernels.snake_dw_snake(x, a1, w, wb, a2, dilation)
                h_ref = codec_kernels.snake_dw_snake_ref(
                    x, a1.view(1, -1, 1), w.view(c, 1, 7), wb, a2.view(1, -1, 1), dilation)
                report.error(f"snake_dw_snake C={c} d={dilation} T={t}", h, h_ref, KERNEL_TOL)
            pw = torch.randn(c, c, device=device) / c ** 0.5
            out = codec_kernels.pointwise_residual(pw, h, pb, x)
            report.error(f"pointwise_residual C={c} T={t}", out,
                         codec_kernels.pointwise_residual_ref(pw, h, pb, x), gemm_tol)
    keys = torch.randint(0, 2**40, (3,), device=device)
    for first, length in ((0, 37), (3 << 20, 2000)):
        got = codec_kernels.keyed_normal(keys, first, length)
        want = codec_kernels.keyed_normal_ref(keys, first, length)
        report.error(f"keyed_normal start={first} T={length}", got, want, NOISE_TOL)


def codecs(device: str, tiny: bool):
    """(unfused, fused) codecs over copies of one random SNAC, alphas drawn from U(0.3, 2)."""
    from snac import SNAC

    def model():
        torch.manual_seed(1)
        m = SNAC(**(TINY_SNAC if tiny else SNAC_24KHZ)).eval()
        with torch.no_grad():
            for name, p in m.named_parameters():
                if name.endswith("alpha"):
                    p.copy_(torch.rand_like(p) * 1.7 + 0.3)
        return m

    return SnacCodec(model(), device, fuse=False), SnacCodec(model(), device, fuse=True)


def check_decode(report: Report, plain, fused, device: str) -> None:
    print(f"fused codec: {fused.fused_units} residual units swapped, fallbacks: "
          f"{fused.fallbacks}", flush=True)
    if not fused.fused_units:
        report.failures.append("no residual unit was swapped")
        return
    rng = np.random.default_rng(0)
    tol = DECODE_TOL["cuda" if device.startswith("cuda") else "cpu"]
    for g, w in ((3, 4), (2, 7)):
        frames = rng.integers(0, 4096, size=(g, w, 7))
        keys = rng.integers(0, 2**40, size=g)
        a, b = (torch.from_numpy(c.decode_windows(frames, keys)) for c in (plain, fused))
        report.error(f"decode {g} windows x {w} frames, fused vs module", b, a, tol)
        if device.startswith("cuda"):
            tf32 = torch.backends.cudnn.allow_tf32
            torch.backends.cudnn.allow_tf32 = False
            try:
                exact = torch.from_numpy(plain.decode_windows(frames, keys))
            finally:
                torch.backends.cudnn.allow_tf32 = tf32
            report.error("  module (TF32 convs) vs exact fp32", a, exact, tol)
            report.error("  fused vs exact fp32", b, exact, tol)


def wall_ms(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(1000 * (time.perf_counter() - t))
    return statistics.median(times)


def time_calls(plain, fused, reps: int) -> None:
    from pipeline.engines.orpheus.engine import batch_windows, realtime_windows

    for codec in (plain, fused):
        codec.capture_graphs(realtime_windows(), batch_windows(), codec.fallbacks)
    rng = np.random.default_rng(1)
    print(f"{'lane':>8} {'windows':>7} {'frames':>6} | {'module ms':>9} {'fused ms':>8} "
          f"{'x':>5} | {'fused us/frame':>14}", flush=True)
    for urgent, g, w in CELLS:
        frames = rng.integers(0, 4096, size=(g, w, 7))
        keys = rng.integers(0, 2**40, size=g)
        a = wall_ms(lambda: plain.decode_windows(frames, keys, urgent), reps)
        b = wall_ms(lambda: fused.decode_windows(frames, keys, urgent), reps)
        print(f"{'realtime' if urgent else 'batch':>8} {g:>7} {w:>6} | {a:>9.3f} {b:>8.3f} "
              f"{a / b:>5.2f} | {1000 * b / (g * w):>14.1f}", flush=True)
    from ops.bench.kernels.micro import step_kernels

    for codec, label in ((plain, "module"), (fused, "fused")):
        frames = rng.integers(0, 4096, size=(16, 5, 7))
        keys = np.arange(16)
        kernels = step_kernels(lambda: codec.decode_windows(frames, keys, True), reps=5, top=12)
        print(f"kernels of one realtime call, 16 windows x 5 frames, {label} "
              f"(us; calls per call):", flush=True)
        for name, calls, us in kernels:
            print(f"  {us:8.1f} {calls:5.0f}  {name}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="the tiny SNAC's widths (interpreter)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--no-time", action="store_true")
    args = ap.parse_args(argv)
    if not kernels_runnable(args.device):
        return 2
    on_cuda = start(args.device)
    report = Report()
    with torch.inference_mode():
        check_kernels(report, args.device, args.tiny)
    plain, fused = codecs(args.device, args.tiny)
    check_decode(report, plain, fused, args.device)
    if on_cuda and not args.no_time:
        time_calls(plain, fused, args.reps)
    return report.exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
