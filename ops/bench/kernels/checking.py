"""What the kernel checks still in ops/bench/kernels (check_*.py, on their way to tests/orpheus/kernels)
and the timings share: Orpheus-3B's attention and MLP widths, a random model at those widths, the
RoPE tables, a CUDA graph of a call, and the checks' tolerances and report."""

from __future__ import annotations

import os
import sys

import torch

from pipeline.engines.orpheus.kernels import fused
from pipeline.engines.orpheus.tiny import ORPHEUS_3B, tiny_llama_config

HIDDEN = ORPHEUS_3B["hidden_size"]                   # 3072
HEADS = ORPHEUS_3B["num_attention_heads"]            # 24
KV_HEADS = ORPHEUS_3B["num_key_value_heads"]         # 8
HEAD_DIM = ORPHEUS_3B["head_dim"]                    # 128
INTERMEDIATE = ORPHEUS_3B["intermediate_size"]       # 8192
THETA = ORPHEUS_3B["rope_theta"]
EPS = 1e-5                                           # Llama's rms_norm_eps
CONTEXT = 2048
# (max abs error / max |reference|, relative L2 error). A kernel rounds where its reference rounds,
# so they differ by a rounding flip of the fp32 reductions: one bf16 ulp is 2^-8 relative.
TOLERANCE = {torch.bfloat16: (2 ** -6, 4e-3), torch.float32: (1e-5, 1e-6)}
# The decoder's logits: rounding differences (GEMM tiling of fused weights too) through 2 layers.
DECODER_TOLERANCE = {torch.bfloat16: (0.05, 2e-2), torch.float32: (1e-4, 1e-5)}


class Report:
    def __init__(self):
        self.failures: list[str] = []

    def error(self, name: str, got, want, tol) -> None:
        g, w = got.float(), want.float()
        top = w.abs().max().item() or 1.0
        max_abs = (g - w).abs().max().item()
        rel = ((g - w).norm() / w.norm().clamp_min(1e-30)).item()
        ok = max_abs <= tol[0] * top and rel <= tol[1]
        print(f"  {name:<34} max abs {max_abs:.3e} (max |ref| {top:.2f})  rel L2 {rel:.3e}"
              f"  {'ok' if ok else 'FAIL'}", flush=True)
        if not ok:
            self.failures.append(name)

    def exit_code(self) -> int:
        """Says how the checks went: 1 if any failed, else 0."""
        if self.failures:
            print(f"FAILED: {', '.join(self.failures)}", flush=True)
            return 1
        print("all errors within tolerance", flush=True)
        return 0


def kernels_runnable(device: str) -> bool:
    """The Triton kernels can run on ``device``: CUDA, or the CPU in Triton's interpreter. If not,
    says why on stderr."""
    if fused.TRITON is None:
        print("Triton is not installed: nothing to check", file=sys.stderr)
        return False
    if not device.startswith("cuda") and os.environ.get("TRITON_INTERPRET") != "1":
        print("off CUDA the kernels run only in Triton's interpreter: set TRITON_INTERPRET=1",
              file=sys.stderr)
        return False
    return True


def start(device: str) -> bool:
    """A check's start, once ``kernels_runnable``: names a CUDA device and torch's version, seeds
    torch. Returns whether ``device`` is CUDA."""
    on_cuda = device.startswith("cuda")
    if on_cuda:
        print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}", flush=True)
    torch.manual_seed(0)
    return on_cuda


def rope_tables(dtype, device):
    inv = 1.0 / THETA ** (torch.arange(0, HEAD_DIM, 2, device=device).float() / HEAD_DIM)
    freqs = torch.arange(CONTEXT + 1, device=device).float().view(-1, 1) * inv   # [T+1, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)                              # [T+1, D]


def random_model(layers: int, dtype, device):
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(tiny_llama_config(**{**ORPHEUS_3B, "num_hidden_layers": layers}))
    return model.to(dtype).eval()


def graphed(fn):
    """``fn`` captured as a CUDA graph (after a warm-up on a side stream); returns (replay, out)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph.replay, out


# fp16 dots over an fp8 cache round the query and the softmax weights to 11 bits, where bf16 has 8
# and the fp32 interpreter 24: against the fp32 dots it is off by about 2^-12 relative.
F16_TOLERANCE = {torch.bfloat16: TOLERANCE[torch.bfloat16], torch.float32: (2 ** -9, 2e-4)}


def quantized(cache, k_scale: float, v_scale: float, like):
    """An fp8 copy of a bf16 cache (fused.to_cache) and that copy back in ``like``'s dtype with
    the scales applied (exact for power-of-two scales)."""
    k8, v8 = fused.to_cache(cache[0], k_scale), fused.to_cache(cache[1], v_scale)
    back = ((k8.float() * k_scale).to(like), (v8.float() * v_scale).to(like))
    return (k8, v8), back
