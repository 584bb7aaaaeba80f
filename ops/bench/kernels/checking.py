"""What the kernel benchmarks share: Orpheus-3B's attention and MLP widths, a random model at those
widths, the RoPE tables, an fp8 copy of a cache, a CUDA graph of a call."""

from __future__ import annotations

import torch

from pipeline.engines.orpheus.kernels import fused
from pipeline.engines.orpheus.tiny import ORPHEUS_3B, tiny_llama_config

HIDDEN = ORPHEUS_3B["hidden_size"]  # 3072
HEADS = ORPHEUS_3B["num_attention_heads"]  # 24
KV_HEADS = ORPHEUS_3B["num_key_value_heads"]  # 8
HEAD_DIM = ORPHEUS_3B["head_dim"]  # 128
INTERMEDIATE = ORPHEUS_3B["intermediate_size"]  # 8192
THETA = ORPHEUS_3B["rope_theta"]
EPS = 1e-5  # Llama's rms_norm_eps
CONTEXT = 2048


def rope_tables(dtype, device):
    inv = 1.0 / THETA ** (torch.arange(0, HEAD_DIM, 2, device=device).float() / HEAD_DIM)
    freqs = torch.arange(CONTEXT + 1, device=device).float().view(-1, 1) * inv  # [T+1, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)  # [T+1, D]


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


def quantized(cache, k_scale: float, v_scale: float, like):
    """An fp8 copy of a bf16 cache (fused.to_cache) and that copy back in ``like``'s dtype with
    the scales applied (exact for power-of-two scales)."""
    k8, v8 = fused.to_cache(cache[0], k_scale), fused.to_cache(cache[1], v_scale)
    back = ((k8.float() * k_scale).to(like), (v8.float() * v_scale).to(like))
    return (k8, v8), back
