"""kernels/fused.py's Triton kernels against their torch references (the add-and-norm, RoPE with
the cache write, silu-times-up), then a 2-layer decoder's fused step against the unfused torch one:
prefill and decode logits and the cache, and on CUDA the step replayed as a graph. In the
interpreter: small widths in fp32 (it truncates fp32 -> bf16 where the GPU rounds to nearest even,
so in bf16 it would show half-ulp differences the GPU does not have); on the GPU: Orpheus-3B's
widths in bf16. Their times: ``python -m ops.bench.kernels fused-ops``."""

from __future__ import annotations

import pytest
import torch

from pipeline.engines.orpheus.tiny import ORPHEUS_3B, tiny_llama_config
from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE

EPS = 1e-5  # Llama's rms_norm_eps
# (max abs error / max |reference|, relative L2 error). A kernel rounds where its reference rounds,
# so they differ by a rounding flip of the fp32 reductions: one bf16 ulp is 2^-8 relative.
TOLERANCE = {torch.bfloat16: (2**-6, 4e-3), torch.float32: (1e-5, 1e-6)}
# The decoder's logits: rounding differences (GEMM tiling of fused weights too) through 2 layers.
DECODER_TOLERANCE = {torch.bfloat16: (0.05, 2e-2), torch.float32: (1e-4, 1e-5)}
SMALL = dict(
    hidden_size=256,
    intermediate_size=512,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    rope_theta=ORPHEUS_3B["rope_theta"],
)


def assert_close(got, want, tol, what: str) -> None:
    g, w = got.float(), want.float()
    top = w.abs().max().item() or 1.0
    max_abs = (g - w).abs().max().item()
    rel = ((g - w).norm() / w.norm().clamp_min(1e-30)).item()
    assert max_abs <= tol[0] * top and rel <= tol[1], (
        f"{what}: max abs {max_abs:.3e} (max |ref| {top:.2f}), rel L2 {rel:.3e}"
    )


@pytest.fixture(scope="module")
def shape(device):
    """(widths, batches, context, dtype) for where the kernels run."""
    if device == "cuda":
        return ORPHEUS_3B, (1, 64, 256), 2048, torch.bfloat16
    return SMALL, (1, 5), 128, torch.float32


def rope_tables(widths, context, dtype, device):
    d = widths["head_dim"]
    inv = 1.0 / widths["rope_theta"] ** (torch.arange(0, d, 2, device=device).float() / d)
    freqs = torch.arange(context + 1, device=device).float().view(-1, 1) * inv  # [T+1, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)  # [T+1, D]


def test_the_norm_rope_and_silu_kernels_match_their_references(device, shape):
    from pipeline.engines.orpheus.kernels import fused

    widths, batches, context, dtype = shape
    tol, rnd = TOLERANCE[dtype], dict(dtype=dtype, device=device)
    hidden, d = widths["hidden_size"], widths["head_dim"]
    heads, kv_heads = widths["num_attention_heads"], widths["num_key_value_heads"]
    torch.manual_seed(0)
    for b in batches:
        x, delta = torch.randn(b, hidden, **rnd), torch.randn(b, hidden, **rnd)
        w = (1 + 0.1 * torch.randn(hidden, device=device)).to(dtype)
        s_ref, h_ref = fused.add_rms_norm_ref(x, delta, w, EPS)
        s, h = fused.add_rms_norm_triton(x, delta, w, EPS)
        assert_close(s, s_ref, tol, f"add_rms_norm sum B={b}")
        assert_close(h, h_ref, tol, f"add_rms_norm norm B={b}")
        assert_close(
            fused.add_rms_norm_triton(x, None, w, EPS)[1],
            fused.add_rms_norm_ref(x, None, w, EPS)[1],
            tol,
            f"rms_norm B={b}",
        )

        # q, k, v as the decoder has them: column slices of the fused projection's output
        qkv = torch.randn(b, (heads + 2 * kv_heads) * d, **rnd)
        q, k, v = (t.view(b, -1, d) for t in qkv.split([heads * d, kv_heads * d, kv_heads * d], dim=-1))
        cos, sin = rope_tables(widths, context, dtype, device)
        wpos = torch.randperm(context, device=device)[:b]
        wpos[-1] = context  # an idle row writes the scratch slot
        caches = [torch.zeros(b + 3, kv_heads, context + 1, d, **rnd) for _ in range(4)]
        q_ref = fused.rope_store_ref(q, k, v, cos, sin, wpos, caches[0], caches[1])
        q_out = fused.rope_store_triton(q, k, v, cos, sin, wpos, caches[2], caches[3])
        assert_close(q_out, q_ref, tol, f"rope_store q B={b}")
        assert_close(caches[2], caches[0], tol, f"rope_store k cache B={b}")
        assert_close(caches[3], caches[1], TOLERANCE[torch.float32], f"rope_store v cache B={b}")

        gate_up = 2 * torch.randn(b, 2 * widths["intermediate_size"], **rnd)
        assert_close(fused.silu_mul_triton(gate_up), fused.silu_mul_ref(gate_up), tol, f"silu_mul B={b}")


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


def test_the_fused_decoder_matches_the_unfused_torch_decoder(device, shape):
    """Prefill then decode with teacher-forced tokens, one row idle (writing the scratch slot)."""
    from transformers import LlamaForCausalLM

    from pipeline.engines.orpheus.kernels import attention, fused
    from pipeline.engines.orpheus.model.decoder import Decoder
    from pipeline.engines.orpheus.model.kv_cache import KVCache

    widths, batches, _, dtype = shape
    tol = DECODER_TOLERANCE[dtype]
    torch.manual_seed(0)
    config = tiny_llama_config(**{**ORPHEUS_3B, "num_hidden_layers": 2}) if device == "cuda" else tiny_llama_config()
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype).eval()
    n, prompt, steps, context = max(batches), 40, 4, 512
    cfg = model.config

    def cache():
        return KVCache(
            cfg.num_hidden_layers, n + 1, cfg.num_key_value_heads, context, cfg.head_dim, model.dtype, model.device
        )

    plain = Decoder(model, cache(), CUSTOM_TOKEN_BASE, fuse=False, ops=fused.REFERENCE)
    fast = Decoder(model, cache(), CUSTOM_TOKEN_BASE, ops=fused.TRITON)
    assert fast.qkv_w[0] is not None and fast.gate_up_w[0] is not None
    ids = torch.randint(CUSTOM_TOKEN_BASE, cfg.vocab_size, (n, prompt + steps), device=device)
    zero = torch.zeros(n, dtype=torch.long, device=device)
    full, rows = torch.full((n,), prompt, device=device), torch.arange(n, device=device)
    with torch.inference_mode():
        assert_close(
            fast.prefill(ids[:, :prompt], zero, full, rows, prompt),
            plain.prefill(ids[:, :prompt], zero, full, rows, prompt),
            tol,
            "prefill logits",
        )
        for t in range(prompt, prompt + steps):
            wpos = torch.full((n,), t, device=device)
            wpos[-1] = fast.cache.scratch  # one idle row
            for b in batches:
                per_row = attention.available(device)
                assert_close(
                    fast.decode(ids[:b, t], wpos[:b], context, per_row),
                    plain.decode(ids[:b, t], wpos[:b], context, per_row),
                    tol,
                    f"decode logits t={t} B={b}",
                )
        assert_close(fast.cache.k[:, :n], plain.cache.k[:, :n], tol, "k cache after decode")
        assert_close(fast.cache.v[:, :n], plain.cache.v[:, :n], tol, "v cache after decode")
        if device == "cuda":
            for b in batches:
                wpos = torch.full((b,), prompt + steps, device=device)
                eager = fast.decode(ids[:b, -1], wpos, context, per_row=True)
                replay, out = graphed(lambda: fast.decode(ids[:b, -1], wpos, context, per_row=True))
                replay()
                assert_close(out, eager, TOLERANCE[dtype], f"graph replay against eager B={b}")
