"""What one decode step must move and compute, against what it takes, for the roofline table of
docs/performance.md. Run: python -m ops.bench.kernels.roofline (GPU).

For each batch size the step's floor is the larger of its bytes over the card's measured copy
bandwidth and its FLOPs over the card's measured bf16 GEMM rate; both peaks are measured in the
same run, so the table is of this card, not of its data sheet. The step itself is the engine's
own CUDA graph for that shape, and the profiler splits it by kind (ops/bench/orpheus/profile.py).

What is counted:
- weights: every linear layer of the decoder, and the language-model head over the slice of the
  vocabulary the engine scores (the audio codes), read once a step whatever the batch;
- KV: each row's cache up to its length, read once a step;
- logits: written by the head, read by the sampler, with its seen-token mask;
- activations are left out: at these batch sizes a layer's fit in the 50 MB L2 cache.
The codec runs on its own streams beside the step; its share per step is its measured time per
window times the windows a step's tokens fill (7 tokens a frame, 16 new frames a window).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

FRAME_TOKENS = 7
FRAME_S = 2048 / 24_000


@dataclass(frozen=True)
class Shapes:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    logits_width: int

    @classmethod
    def of(cls, config, logits_width: int) -> Shapes:
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return cls(
            config.hidden_size,
            config.intermediate_size,
            config.num_hidden_layers,
            config.num_attention_heads,
            config.num_key_value_heads,
            head_dim,
            logits_width,
        )

    def linear_params(self) -> int:
        q_o = 2 * self.hidden * self.heads * self.head_dim
        k_v = 2 * self.hidden * self.kv_heads * self.head_dim
        mlp = 3 * self.hidden * self.intermediate
        return self.layers * (q_o + k_v + mlp) + self.logits_width * self.hidden


@dataclass(frozen=True)
class StepCost:
    rows: int
    length: int
    weight_gb: float
    kv_gb: float
    logits_gb: float
    tflop: float

    @property
    def gb(self) -> float:
        return self.weight_gb + self.kv_gb + self.logits_gb


def step_cost(shapes: Shapes, rows: int, length: int, weight_bytes: float = 2.0, kv_bytes: float = 1.0) -> StepCost:
    """Bytes and FLOPs of one decode step over ``rows`` rows that each hold ``length`` positions."""
    weights = shapes.linear_params() * weight_bytes
    kv = rows * length * shapes.layers * 2 * shapes.kv_heads * shapes.head_dim * kv_bytes
    logits = rows * shapes.logits_width * (2 + 2 + 1)  # bf16 written and read, the seen mask
    flops = 2 * shapes.linear_params() * rows + 4 * rows * length * shapes.layers * shapes.heads * shapes.head_dim
    return StepCost(rows, length, weights / 1e9, kv / 1e9, logits / 1e9, flops / 1e12)


def audio_s_per_step(rows: int) -> float:
    """Seconds of audio one step over ``rows`` busy rows makes."""
    return rows / FRAME_TOKENS * FRAME_S


def measure_peaks() -> tuple[float, float]:
    """This card's copy bandwidth (GB/s, bytes read plus written) and bf16 GEMM rate (TFLOP/s)."""
    import torch

    from ops.bench.timing import mean_device_ms

    src = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = mean_device_ms(lambda: dst.copy_(src))
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    mm_ms = mean_device_ms(lambda: a @ b)
    return 2 * (2 << 30) / copy_ms / 1e6, 2 * n**3 / mm_ms / 1e9


def table(rows: list[dict], peaks: tuple[float, float]) -> str:
    bw, tf = peaks
    head = (
        "| rows | weights GB | KV GB | logits GB | TFLOP | floor ms | step ms | of floor | "
        "GEMM ms | attention ms | norm/rope/silu ms | other ms | codec ms | x real time |"
    )
    lines = [
        f"Peaks measured in this run: copy {bw:.0f} GB/s, bf16 GEMM {tf:.0f} TFLOP/s.",
        "",
        head,
        "|" + "---|" * (head.count("|") - 1),
    ]
    for r in rows:
        k = r["by_kind_ms"]
        other = r["step_ms"] - k.get("GEMM", 0) - k.get("decode attention", 0) - k.get("norm, rope, silu (Triton)", 0)
        lines.append(
            f"| {r['rows']} | {r['weight_gb']:.2f} | {r['kv_gb']:.2f} | {r['logits_gb']:.3f} | "
            f"{r['tflop']:.2f} | {r['floor_ms']:.2f} | {r['step_ms']:.2f} | {r['of_floor']:.2f} | "
            f"{k.get('GEMM', 0):.2f} | {k.get('decode attention', 0):.2f} | "
            f"{k.get('norm, rope, silu (Triton)', 0):.2f} | {max(other, 0):.2f} | {r['codec_ms']:.2f} | "
            f"{r['x_real_time']:.0f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse
    import json

    import numpy as np
    import torch

    from ops.bench.kernels.micro import step_kernels
    from ops.bench.orpheus.models import load_model
    from ops.bench.orpheus.profile import kind
    from ops.bench.timing import mean_device_ms
    from pipeline.engines.orpheus.engine import batch_windows
    from pipeline.engines.orpheus.model.sampling import SamplingParams
    from pipeline.engines.orpheus.serving.runner import ModelRunner
    from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("quant", nargs="?", default="none", help="weights: none (bf16), fp8, ...")
    ap.add_argument("--kv-dtype", default="fp8", choices=("model", "fp8"))
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 64, 256, 512])
    ap.add_argument(
        "--length", type=int, default=350, help="positions each row holds (350: the batch workload's mean at 255 rows)"
    )
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args(argv)
    peaks = measure_peaks()
    lm = load_model("random-3b", "auto", "auto", args.quant)
    runner = ModelRunner(
        lm.model,
        max(args.batches),
        args.context,
        SamplingParams(ignore_eos=True),
        logits_lo=CUSTOM_TOKEN_BASE,
        kv_dtype=args.kv_dtype,
    )
    shapes = Shapes.of(lm.model.config, runner.width)
    weight_bytes = 1.0 if args.quant.startswith("fp8") else 2.0
    kv_bytes = float(runner.cache.k[0].element_size())
    frames = np.random.default_rng(0).integers(0, 4096, size=(32, batch_windows()[-1], 7))
    lm.codec.capture_graphs((), batch_windows(), lm.codec.fallbacks)
    window_ms = mean_device_ms(lambda: lm.codec.decode_windows(frames, np.arange(32)), reps=5) / 32
    runner.active.fill_(True)
    out = []
    for b in args.batches:
        pb = runner.padded_batch(b)
        graph = runner.graphs[(pb, runner.context)]  # on CUDA every graph runs the whole row
        runner.pos.copy_(torch.full((runner.rows,), args.length - 1, device=runner.pos.device))
        step_ms = mean_device_ms(graph.replay, reps=50)
        by_kind: dict[str, float] = {}
        for name, _calls, us in step_kernels(graph.replay, top=10_000)[:-1]:
            by_kind[kind(name)] = by_kind.get(kind(name), 0.0) + us / 1000
        cost = step_cost(shapes, b, args.length, weight_bytes, kv_bytes)
        floor_ms = max(cost.gb / peaks[0] * 1000, cost.tflop / peaks[1] * 1000)
        codec_ms = b / (FRAME_TOKENS * 16) * window_ms
        out.append(
            {
                **asdict(cost),
                "graph_rows": pb,
                "floor_ms": floor_ms,
                "step_ms": step_ms,
                "of_floor": floor_ms / step_ms,
                "by_kind_ms": by_kind,
                "codec_ms": codec_ms,
                "x_real_time": audio_s_per_step(b) / ((step_ms + codec_ms) / 1000),
            }
        )
        print(f"rows {b}: step {step_ms:.2f} ms, floor {floor_ms:.2f} ms", flush=True)
    print(
        f"\n{torch.cuda.get_device_name()}, weights {args.quant}, KV {runner.cache.k[0].dtype}, "
        f"each row at {args.length} positions:\n"
    )
    print(table(out, peaks), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "peaks": peaks, "rows": out}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
