"""The kernels over the fp8 KV cache (KVCache(kv_dtype="fp8")) against the same kernels over the
cache it came from: decode attention over fp8 against the converted-back cache (the same bits)
and against the original (within what e4m3 costs), its fp16 dots, rope_store's fp8 write, and a
decoder's logits over an fp8 cache within a bound of a plain one. The interpreter loads e4m3
exactly, but its fp32 -> e4m3 cast drops the carry when a rounding overflows the mantissa (1.96 ->
1.0, not 2.0; triton-lang/triton#11897), so there rope_store is checked on data exact in e4m3 and
the decoder takes the torch rope_store (with the per-row kernel); the GPU checks random data too.
fp8's error at Orpheus-3B shapes or on a checkpoint, and the attention's speed:
``python -m ops.bench.kernels kv8``."""

from __future__ import annotations

import pytest
import torch

from pipeline.engines.orpheus.kernels import FP8_MAX
from pipeline.engines.orpheus.tiny import ORPHEUS_3B, tiny_llama_config
from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE

HEADS, KV_HEADS, HEAD_DIM = (ORPHEUS_3B[k] for k in ("num_attention_heads", "num_key_value_heads", "head_dim"))
THETA = ORPHEUS_3B["rope_theta"]
TOLERANCE = {torch.bfloat16: (2**-6, 4e-3), torch.float32: (1e-5, 1e-6)}
# fp16 dots over an fp8 cache round the query and the softmax weights to 11 bits, where bf16 has 8
# and the fp32 interpreter 24: against the fp32 dots it is off by about 2^-12 relative.
F16_TOLERANCE = {torch.bfloat16: TOLERANCE[torch.bfloat16], torch.float32: (2**-9, 2e-4)}
# e4m3 rounds each entry by up to 2^-4 (3.6% rms), so attention over random K and V (near-uniform
# weights) is off by about 4% from the cache it came from.
ATTENTION_FP8_REL = 0.06
# The logits of a random model over an fp8 cache against a plain one: every layer's attention
# outweighs its residual input, so the rounding reaches the logits undiluted (measured 0.07 at 2
# layers in fp32, 0.20-0.24 at 28 in bf16). A bound for bugs (a wrong scale or position is off by
# about 1), not for quality.
DECODER_FP8_REL = 0.35
# rope_store into fp8: the kernel rotates in fp32 and rounds once; the reference rounds to the
# model dtype on the way. On random data they differ by a step, rarely two (7e-6 of the entries on
# an H200).
ROPE_DIFFERING, ROPE_MAX_STEPS = 0.01, 2
SCALES = ((1.0, 1.0), (0.5, 2.0))  # (k_scale, v_scale): the default and powers of two


def assert_close(got, want, tol, what: str) -> None:
    g, w = got.float(), want.float()
    top = w.abs().max().item() or 1.0
    max_abs, rel = (g - w).abs().max().item(), ((g - w).norm() / w.norm().clamp_min(1e-30)).item()
    assert max_abs <= tol[0] * top and rel <= tol[1], (
        f"{what}: max abs {max_abs:.3e} (max |ref| {top:.2f}), rel L2 {rel:.3e}"
    )


def rel_l2(got, want) -> float:
    g, w = got.float(), want.float()
    return ((g - w).norm() / w.norm().clamp_min(1e-30)).item()


def quantized(cache, k_scale: float, v_scale: float, like):
    """An fp8 copy of a cache (fused.to_cache) and that copy back in ``like``'s dtype with the
    scales applied (exact for power-of-two scales)."""
    from pipeline.engines.orpheus.kernels import fused

    k8, v8 = fused.to_cache(cache[0], k_scale), fused.to_cache(cache[1], v_scale)
    return (k8, v8), ((k8.float() * k_scale).to(like), (v8.float() * v_scale).to(like))


def e4m3_steps(a, b) -> torch.Tensor:
    """|a - b| in e4m3 steps, per entry (sign-magnitude bytes as ordinals: +0 and -0 are equal)."""

    def ordinal(t):
        bits = t.view(torch.uint8).int()
        return torch.where(bits >= 128, -(bits - 128), bits)

    return (ordinal(a) - ordinal(b)).abs()


@pytest.fixture(scope="module")
def dtype(device):
    return torch.bfloat16 if device == "cuda" else torch.float32


@pytest.mark.parametrize("scales", SCALES, ids=["scale 1", "scales 0.5 and 2"])
def test_attention_over_fp8_is_attention_over_the_cache_converted_back(device, dtype, scales):
    """Dots in the query's dtype over fp8 and over its bf16 copy: the same arithmetic, so the same
    bits (that checks the fp8 loads and the folded scales); with the default launch, within what
    e4m3 costs of the cache it came from."""
    from pipeline.engines.orpheus.kernels import attention

    torch.manual_seed(0)
    length, ks, vs = (1000 if device == "cuda" else 100), *scales
    g, scale = HEADS // KV_HEADS, HEAD_DIM**-0.5
    for b in (1, 256) if device == "cuda" else (1, 3):
        q = torch.randn(b, KV_HEADS, g, HEAD_DIM, dtype=dtype, device=device)
        k, v = (
            torch.randn(b, KV_HEADS, length + 1, HEAD_DIM, dtype=dtype, device=device) for _ in range(2)
        )  # [B, Hkv, T+1, D]
        lens = torch.randint(length * 9 // 10, length + 1, (b,), device=device)
        plain = attention.decode_attention(q, k, v, lens, scale)
        same = attention.launch_for(1, b)[:3] + (False,)
        (k8, v8), (kb, vb) = quantized((k, v), ks, vs, dtype)
        assert_close(
            attention.decode_attention(q, k8, v8, lens, scale * ks, vs, launch=same),
            attention.decode_attention(q, kb, vb, lens, scale, launch=same),
            TOLERANCE[dtype],
            f"fp8 against its copy B={b}",
        )
        assert rel_l2(attention.decode_attention(q, k8, v8, lens, scale * ks, vs), plain) <= ATTENTION_FP8_REL


def test_fp16_dots_over_fp8_are_the_query_dtypes_dots_within_rounding(device, dtype):
    """The fp8 cache's default launch (fp16 dots) against dots in the query's dtype, rows from one
    token to the longest."""
    from pipeline.engines.orpheus.kernels import attention

    torch.manual_seed(1)
    b, length = (64, 1800) if device == "cuda" else (5, 80)
    g, scale = HEADS // KV_HEADS, HEAD_DIM**-0.5
    q = torch.randn(b, KV_HEADS, g, HEAD_DIM, dtype=dtype, device=device)
    k, v = (torch.randn(b + 1, KV_HEADS, length + 1, HEAD_DIM, dtype=dtype, device=device) for _ in range(2))
    lens = torch.linspace(1, length, b, device=device).long()
    (k8, v8), _ = quantized((k, v), 0.5, 2.0, dtype)
    launch = attention.launch_for(1, b)
    assert launch[3], "fp16 dots are the fp8 cache's default"
    assert_close(
        attention.decode_attention(q, k8, v8, lens, scale * 0.5, 2.0),
        attention.decode_attention(q, k8, v8, lens, scale * 0.5, 2.0, launch=launch[:3] + (False,)),
        F16_TOLERANCE[dtype],
        "fp16 dots",
    )


def rope_cases(device, dtype, context: int):
    """(name, cos, sin, scales): cos/sin of 0, 90, 180, 270 degrees, which only move and negate
    entries (so e4m3 values stay exact); on the GPU also the model's RoPE tables."""
    quarter = torch.arange(context + 1, device=device) % 4
    cos = torch.tensor([1.0, 0.0, -1.0, 0.0], device=device)[quarter].view(-1, 1).expand(-1, HEAD_DIM)
    sin = torch.tensor([0.0, 1.0, 0.0, -1.0], device=device)[quarter].view(-1, 1).expand(-1, HEAD_DIM)
    yield "grid", cos.to(dtype).contiguous(), sin.to(dtype).contiguous(), (0.5, 4.0)
    if device == "cuda":
        inv = 1.0 / THETA ** (torch.arange(0, HEAD_DIM, 2, device=device).float() / HEAD_DIM)
        emb = torch.arange(context + 1, device=device).float().view(-1, 1) * inv
        emb = torch.cat((emb, emb), dim=-1)
        yield "random", emb.cos().to(dtype), emb.sin().to(dtype), (1.0, 1.0)


def test_rope_store_into_fp8_writes_the_references_bytes(device, dtype):
    """On data exact in e4m3 every byte equals the reference's; on random data (GPU) few differ,
    by at most two steps, and values past 448 saturate."""
    from pipeline.engines.orpheus.kernels import fused

    torch.manual_seed(2)
    hq, hkv, d, context = HEADS, KV_HEADS, HEAD_DIM, 256
    for b in (1, 64) if device == "cuda" else (1, 5):
        wpos = torch.randperm(context, device=device)[:b]
        wpos[-1] = context  # an idle row writes the scratch slot
        for name, cos, sin, (ks, vs) in rope_cases(device, dtype, context):
            qkv = torch.randn(b, (hq + 2 * hkv) * d, device=device)
            if name == "grid":  # e4m3 values times the scales: exact
                qkv = fused.to_cache(qkv * 16, 1.0).float()
                qkv[:, hq * d : (hq + hkv) * d] *= ks
                qkv[:, (hq + hkv) * d :] *= vs
            else:  # some past 448: saturated
                qkv[:, ::97] *= 1000
            q, k, v = (t.view(b, -1, d) for t in qkv.to(dtype).split([hq * d, hkv * d, hkv * d], dim=-1))
            caches = [torch.zeros(b + 3, hkv, context + 1, d, dtype=fused.FP8, device=device) for _ in range(4)]
            q_ref = fused.rope_store_ref(q, k, v, cos, sin, wpos, caches[0], caches[1], ks, vs)
            q_out = fused.rope_store_triton(q, k, v, cos, sin, wpos, caches[2], caches[3], ks, vs)
            assert_close(q_out, q_ref, TOLERANCE[dtype], f"q ({name}) B={b}")
            for part, got, want in (("k", caches[2], caches[0]), ("v", caches[3], caches[1])):
                steps = e4m3_steps(got, want)
                if name == "grid":
                    assert steps.max().item() == 0, f"{part} cache B={b}"
                else:
                    assert (steps > 0).float().mean().item() <= ROPE_DIFFERING, f"{part} cache B={b}"
                    assert steps.max().item() <= ROPE_MAX_STEPS, f"{part} cache B={b}"
                    assert got.float().abs().max().item() == FP8_MAX  # NaN fails this too


def test_a_decoders_logits_over_an_fp8_cache_stay_within_bound_of_a_plain_cache(device, dtype):
    """Prefill and teacher-forced decode steps, on SDPA and on the per-row kernel: a random model
    (2 layers in the interpreter, 28 at Orpheus-3B shapes on the GPU)."""
    from transformers import LlamaForCausalLM

    from pipeline.engines.orpheus.kernels import fused
    from pipeline.engines.orpheus.model.decoder import Decoder
    from pipeline.engines.orpheus.model.kv_cache import KVCache

    big = device == "cuda"
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(tiny_llama_config(**ORPHEUS_3B) if big else tiny_llama_config())
    model = model.to(dtype).eval()
    cfg, ops = model.config, fused.TRITON if big else fused.REFERENCE
    batches, prompt, steps = ((8, 64), 200, 4) if big else ((2,), 24, 4)
    n = max(batches)

    def decoder(kv_dtype):
        cache = KVCache(
            cfg.num_hidden_layers,
            n + 1,
            cfg.num_key_value_heads,
            512,
            cfg.head_dim,
            model.dtype,
            model.device,
            kv_dtype,
        )
        return Decoder(model, cache, CUSTOM_TOKEN_BASE, ops=ops)

    def logits(dec, ids, per_row):
        rows, dev = ids.shape[0], ids.device
        out = [
            dec.prefill(
                ids[:, :prompt],
                torch.zeros(rows, dtype=torch.long, device=dev),
                torch.full((rows,), prompt, device=dev),
                torch.arange(rows, device=dev),
                prompt,
            )
        ]
        for t in range(prompt, ids.shape[1]):
            out.append(dec.decode(ids[:, t], torch.full((rows,), t, device=dev), t + 1, per_row))
        return out

    plain, fp8 = decoder(None), decoder("fp8")
    ids = torch.randint(CUSTOM_TOKEN_BASE, cfg.vocab_size, (n, prompt + steps), device=device)
    with torch.inference_mode():
        for b in batches:
            for per_row in (False, True):
                want, got = logits(plain, ids[:b], per_row), logits(fp8, ids[:b], per_row)
                err = max(rel_l2(g, w) for g, w in zip(got, want))
                assert err <= DECODER_FP8_REL, (b, per_row, err)
