"""The SNAC codec's calls, fused (kernels/codec.py) against the module's own ops, on a random
SNAC 24 kHz (CUDA): the wall time of a ``decode_windows`` call (codes in, audio on the host: what a
codec lane waits for), median of ``--reps``, each lane's graphs replayed, for the window counts and
lengths the lanes see with streams beside batch work, and the fused codec with fp16 and bf16
activations (``SYNTH_CODEC_DTYPE``) beside them with their audio's signal-to-noise ratio against
the fp32 decode of the same codes (the fused fp32 one against the module's, for scale); then the
kernels of one call, by name. That they decode the same is tested in
tests/orpheus/kernels/test_codec_triton.py.

``--sweep`` then times the batch lane's calls at every window count from 1 to 64 (16-frame chunks'
windows, split over the captured counts as the lane splits them), fused fp32 and fp16, and a
stream's last chunk decoded eagerly in a window of its own length, as it was before last chunks
reached back to a full window.

    python -m ops.bench.kernels codec [--reps 20] [--sweep]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from ops.bench.kernels.micro import step_kernels
from pipeline.engines.orpheus.codec.snac import SnacCodec, snr_db
from pipeline.engines.orpheus.tiny import SNAC_24KHZ

# (lane, windows, frames a window): the realtime lane's first chunks (3 frames; 2 with a
# lookahead of 1) and ramp windows, the batch lane's slices of 16-frame chunks and first chunks
CELLS = (
    (True, 1, 3),
    (True, 4, 3),
    (True, 16, 5),
    (True, 32, 7),
    (True, 64, 7),
    (False, 1, 19),
    (False, 2, 19),
    (False, 13, 19),
    (False, 32, 19),
    (False, 64, 19),
    (False, 64, 4),
)


def codecs_model():
    """A random SNAC 24 kHz, alphas drawn from U(0.3, 2) (seeded: the same each call)."""
    from snac import SNAC

    torch.manual_seed(1)
    m = SNAC(**SNAC_24KHZ).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("alpha"):
                p.copy_(torch.rand_like(p) * 1.7 + 0.3)
    return m


def codecs(device: str):
    """(unfused, fused, fused with fp16 activations, with bf16) codecs over copies of one random
    SNAC (``codecs_model``)."""
    model = codecs_model
    return (
        SnacCodec(model(), device, fuse=False, dtype="float32"),
        SnacCodec(model(), device, fuse=True, dtype="float32"),
        SnacCodec(model(), device, fuse=True, dtype="float16"),
        SnacCodec(model(), device, fuse=True, dtype="bfloat16"),
    )


def wall_ms(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(1000 * (time.perf_counter() - t))
    return statistics.median(times)


def main(argv=None) -> int:
    from pipeline.engines.orpheus.engine import batch_windows, realtime_windows

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--sweep", action="store_true", help="the batch lane's calls at 1-64 windows")
    args = ap.parse_args(argv)
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}", flush=True)
    plain, fused, f16, half = codecs("cuda")
    print(f"fused codec: {fused.fused_units} residual units swapped, fallbacks: {fused.fallbacks}", flush=True)
    auto = SnacCodec(codecs_model(), "cuda", dtype="auto")
    print(f"dtype auto: {auto.dtype}; its check: {auto.half_check}; fallbacks: {auto.fallbacks}", flush=True)
    for codec in (plain, fused, f16, half):
        codec.capture_graphs(realtime_windows(), batch_windows(), codec.fallbacks)
    rng = np.random.default_rng(1)
    print(
        f"{'lane':>8} {'windows':>7} {'frames':>6} | {'module ms':>9} {'fused ms':>8} "
        f"{'x':>5} | {'fused us/frame':>14} | {'fp16 ms':>7} {'x':>5} {'fp16 SNR dB':>11} | "
        f"{'bf16 ms':>7} {'x':>5} {'bf16 SNR dB':>11} | {'fused SNR dB':>12}",
        flush=True,
    )
    for urgent, g, w in CELLS:
        frames = rng.integers(0, 4096, size=(g, w, 7))
        keys = rng.integers(0, 2**40, size=g)
        a = wall_ms(lambda: plain.decode_windows(frames, keys, urgent), args.reps)
        b = wall_ms(lambda: fused.decode_windows(frames, keys, urgent), args.reps)
        d = wall_ms(lambda: f16.decode_windows(frames, keys, urgent), args.reps)
        c = wall_ms(lambda: half.decode_windows(frames, keys, urgent), args.reps)
        module_audio, fp32 = plain.decode_windows(frames, keys, urgent), fused.decode_windows(frames, keys, urgent)
        fp16, bf16 = f16.decode_windows(frames, keys, urgent), half.decode_windows(frames, keys, urgent)
        print(
            f"{'realtime' if urgent else 'batch':>8} {g:>7} {w:>6} | {a:>9.3f} {b:>8.3f} "
            f"{a / b:>5.2f} | {1000 * b / (g * w):>14.1f} | {d:>7.3f} {b / d:>5.2f} {snr_db(fp16, fp32):>11.1f} | "
            f"{c:>7.3f} {b / c:>5.2f} {snr_db(bf16, fp32):>11.1f} | {snr_db(fp32, module_audio):>12.1f}",
            flush=True,
        )
    if args.sweep:
        sweep(fused, f16, batch_windows()[-1], args.reps, rng)
    for codec, label in ((plain, "module"), (fused, "fused")):
        frames = rng.integers(0, 4096, size=(16, 5, 7))
        keys = np.arange(16)
        kernels = step_kernels(lambda: codec.decode_windows(frames, keys, True), reps=5, top=12)
        print(f"kernels of one realtime call, 16 windows x 5 frames, {label} (us; calls per call):", flush=True)
        for name, calls, us in kernels:
            print(f"  {us:8.1f} {calls:5.0f}  {name}", flush=True)
    return 0


def sweep(fused: SnacCodec, half: SnacCodec, w: int, reps: int, rng) -> None:
    """The batch lane's call at each window count: its wall ms and ms a window, fp32 and fp16;
    then one eager call of a last chunk's odd window length."""
    print(f"batch lane, {w}-frame windows: windows, fp32 ms, ms a window, fp16 ms, ms a window", flush=True)
    for g in range(1, 65):
        frames = rng.integers(0, 4096, size=(g, w, 7))
        keys = rng.integers(0, 2**40, size=g)
        a = wall_ms(lambda: fused.decode_windows(frames, keys), reps)
        b = wall_ms(lambda: half.decode_windows(frames, keys), reps)
        print(f"  {g:3d} {a:8.3f} {a / g:7.3f} {b:8.3f} {b / g:7.3f}", flush=True)
    for g, n in ((1, 9), (3, 12)):
        frames = rng.integers(0, 4096, size=(g, n, 7))
        keys = rng.integers(0, 2**40, size=g)
        before = fused.eager[False][0]
        ms = wall_ms(lambda: fused.decode_windows(frames, keys), reps)
        assert fused.eager[False][0] > before, "expected an eager call"
        print(f"eager call, {g} x {n} frames: {ms:.3f} ms", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
