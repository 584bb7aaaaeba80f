"""fused.py's references against transformers' own Llama pieces, and the decoder with fused weights
against the unfused one, transformers' forward and generate(), and a quantized model (CPU, fp32)."""

from __future__ import annotations

import os
import weakref

import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import (
    LlamaMLP,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)

from pipeline.engines.orpheus.kernels import fused
from pipeline.engines.orpheus.model.decoder import Decoder, fuse_weights
from pipeline.engines.orpheus.model.kv_cache import KVCache
from pipeline.engines.orpheus.tiny import TINY_LLAMA

CONTEXT = 128


def small_model(seed: int = 0, init: float = TINY_LLAMA["initializer_range"]):
    """The tiny checkpoint's shapes with a 512-id vocabulary: a fresh model per test."""
    torch.manual_seed(seed)
    fields = {**TINY_LLAMA, "initializer_range": init}
    return LlamaForCausalLM(LlamaConfig(vocab_size=512, **fields)).eval()


def cache_for(model, rows: int = 4, context: int = CONTEXT):
    cfg = model.config
    return KVCache(
        cfg.num_hidden_layers, rows, cfg.num_key_value_heads, context, cfg.head_dim, model.dtype, model.device
    )


def step_logits(decoder, ids, steps: int):
    """Prefill ``ids`` [N, S] (no padding) into rows 0..N-1, then decode ``steps`` tokens from
    ``ids`` themselves (teacher forcing); returns the prefill logits and the logits of each step."""
    n, s = ids.shape
    zeros = torch.zeros(n, dtype=torch.long)
    with torch.inference_mode():
        first = decoder.prefill(ids[:, : s - steps], zeros, torch.full((n,), s - steps), torch.arange(n), s - steps)
        out = [first]
        for t in range(s - steps, s):
            out.append(decoder.decode(ids[:, t], torch.full((n,), t), t + 1))
    return torch.stack(out, 1)  # [N, steps + 1, V]


# The references -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_add_rms_norm_ref_is_llama_rms_norm(dtype):
    torch.manual_seed(0)
    norm = LlamaRMSNorm(64, eps=1e-5).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(64) * 0.1 + 1)
    x, delta = torch.randn(3, 5, 64, dtype=dtype), torch.randn(3, 5, 64, dtype=dtype)
    with torch.inference_mode():
        s, h = fused.add_rms_norm_ref(x, delta, norm.weight, norm.variance_epsilon)
        assert torch.equal(s, x + delta) and torch.equal(h, norm(x + delta))
        same, h = fused.add_rms_norm_ref(x, None, norm.weight, norm.variance_epsilon)
        assert same is x and torch.equal(h, norm(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_store_ref_is_apply_rotary_pos_emb_and_writes_the_cache(dtype):
    torch.manual_seed(0)
    cfg = LlamaConfig(**TINY_LLAMA)
    b, hq, hkv, d = 3, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    probe = torch.zeros(1, dtype=dtype)
    cos, sin = (t[0] for t in LlamaRotaryEmbedding(cfg)(probe, torch.arange(CONTEXT + 1).view(1, -1)))
    q, k, v = (torch.randn(b, h, d, dtype=dtype) for h in (hq, hkv, hkv))
    wpos = torch.tensor([7, 0, CONTEXT])  # the last: scratch
    kc, vc = (torch.zeros(b + 1, hkv, CONTEXT + 1, d, dtype=dtype) for _ in range(2))
    with torch.inference_mode():
        got = fused.rope_store_ref(q, k, v, cos, sin, wpos, kc, vc)
    want_q, want_k = apply_rotary_pos_emb(
        q.unsqueeze(2), k.unsqueeze(2), cos[wpos].unsqueeze(1), sin[wpos].unsqueeze(1)
    )  # [B, H, 1, D]
    assert torch.equal(got, want_q[:, :, 0])
    for row, p in enumerate(wpos.tolist()):
        assert torch.equal(kc[row, :, p], want_k[row, :, 0]) and torch.equal(vc[row, :, p], v[row])
    written = torch.zeros(b + 1, 1, CONTEXT + 1, 1, dtype=torch.bool)
    written[torch.arange(b), 0, wpos] = True
    assert not kc.masked_fill(written, 0).any() and not vc.masked_fill(written, 0).any()


def test_silu_mul_ref_is_llama_mlp():
    torch.manual_seed(0)
    mlp = LlamaMLP(LlamaConfig(**TINY_LLAMA))
    x = torch.randn(4, 64)
    with torch.inference_mode():
        gate, up = mlp.gate_proj(x), mlp.up_proj(x)
        assert torch.equal(fused.silu_mul_ref(torch.cat([gate, up], -1)), mlp.act_fn(gate) * up)
        w = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
        torch.testing.assert_close(mlp.down_proj(fused.silu_mul_ref(F.linear(x, w))), mlp(x), rtol=1e-5, atol=1e-6)


# Weight fusion --------------------------------------------------------------------------------


def test_fused_weights_share_one_copy_and_free_the_originals():
    model = small_model()
    attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    original = weakref.ref(attn.q_proj.weight)
    decoder = Decoder(model, cache_for(model))
    assert original() is None  # the old copy is gone
    for i, layer in enumerate(model.model.layers):
        for whole, mods in (
            (decoder.qkv_w[i], [layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj]),
            (decoder.gate_up_w[i], [layer.mlp.gate_proj, layer.mlp.up_proj]),
        ):
            assert whole.untyped_storage().nbytes() == whole.nbytes  # nothing past the weights
            at = whole.data_ptr()
            for m in mods:
                w = m.weight
                assert isinstance(w, torch.nn.Parameter)
                assert w.untyped_storage().data_ptr() == whole.untyped_storage().data_ptr()
                assert w.data_ptr() == at
                at += w.nbytes
            assert at == whole.data_ptr() + whole.nbytes
    for n, p in model.named_parameters():  # values unchanged
        assert torch.equal(p, before[n]), n
    storages = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in model.parameters()}
    assert sum(storages.values()) == sum(p.nbytes for p in model.parameters())
    # a second decoder over the same model (a runner rebuilt smaller) reuses the fused weights
    again = Decoder(model, cache_for(model))
    assert again.qkv_w[0].data_ptr() == decoder.qkv_w[0].data_ptr()
    assert torch.equal(again.gate_up_w[1], decoder.gate_up_w[1])
    assert mlp.gate_proj.weight.data_ptr() == decoder.gate_up_w[0].data_ptr()


def test_only_plain_bias_free_linears_are_fused():
    class Sub(torch.nn.Linear):  # bitsandbytes' modules subclass Linear
        pass

    plain = [torch.nn.Linear(8, 4, bias=False), torch.nn.Linear(8, 2, bias=False)]
    assert fuse_weights(plain).shape == (6, 8)
    sub = Sub(8, 4, bias=False)
    for mods in (
        [plain[0], sub],
        [torch.nn.Linear(8, 4), plain[1]],
        [torch.nn.Linear(8, 4, bias=False).double(), torch.nn.Linear(8, 2, bias=False)],
    ):
        weights = [m.weight for m in mods]
        assert fuse_weights(mods) is None
        assert all(m.weight is w for m, w in zip(mods, weights))


# The decoder ----------------------------------------------------------------------------------


def test_fused_decoder_logits_equal_the_unfused_and_transformers():
    model = small_model(seed=1)
    torch.manual_seed(2)
    ids = torch.randint(0, 512, (3, 24))
    with torch.inference_mode():
        want = model(ids).logits[:, -9:].float()  # [N, 9, V]
    plain = step_logits(Decoder(model, cache_for(model), fuse=False), ids, 8)
    decoder = Decoder(model, cache_for(model))
    assert all(w is not None for w in decoder.qkv_w + decoder.gate_up_w)
    got = step_logits(decoder, ids, 8)
    torch.testing.assert_close(got, plain, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_fp8_projections_are_fused_as_fp8_modules_sharing_their_bytes():
    from pipeline.engines.orpheus.model.quant import quantize

    model = small_model(seed=3)
    report = quantize(model, "fp8", "cpu", torch.float32)
    assert report.applied == "fp8"
    torch.manual_seed(4)
    ids = torch.randint(0, 512, (2, 16))
    with torch.inference_mode():
        want = model(ids).logits[:, -5:].float()
    plain = step_logits(Decoder(model, cache_for(model), fuse=False), ids, 4)
    decoder = Decoder(model, cache_for(model))
    assert decoder.qkv_w == [None, None] and decoder.gate_up_w == [None, None]  # not plain Linear
    attn, fused_qkv = model.model.layers[0].self_attn, decoder.qkv_fp8[0]
    assert fused_qkv is not None and decoder.gate_up_fp8[0] is not None
    assert fused_qkv.weight.shape[0] == sum(p.weight.shape[0] for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    assert attn.q_proj.weight.untyped_storage().data_ptr() == fused_qkv.weight.untyped_storage().data_ptr()
    got = step_logits(decoder, ids, 4)
    torch.testing.assert_close(got, plain, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_bitsandbytes_style_projections_keep_the_unfused_path():
    class Wrapped(torch.nn.Linear):  # a subclass, as bitsandbytes' modules are
        pass

    model = small_model(seed=3)
    attn = model.model.layers[0].self_attn
    wrapped = Wrapped(attn.q_proj.in_features, attn.q_proj.out_features, bias=False)
    wrapped.weight = attn.q_proj.weight
    attn.q_proj = wrapped
    decoder = Decoder(model, cache_for(model))
    assert decoder.qkv_w[0] is None and decoder.qkv_fp8[0] is None and decoder.qkv_w[1] is not None


def test_greedy_tokens_of_the_fused_decoder_equal_generate():
    model = small_model(seed=5, init=0.2)  # at Llama's 0.02 greedy repeats one token
    model.generation_config.eos_token_id = None  # random weights: run the full budget
    torch.manual_seed(6)
    ids = torch.randint(0, 512, (2, 12))
    new = 30
    with torch.inference_mode():
        want = model.generate(ids, do_sample=False, max_new_tokens=new, pad_token_id=0)[:, 12:]
    decoder = Decoder(model, cache_for(model, rows=2))
    assert decoder.qkv_w[0] is not None and decoder.gate_up_w[0] is not None
    n = ids.shape[0]
    with torch.inference_mode():
        tok = decoder.prefill(ids, torch.zeros(n, dtype=torch.long), torch.full((n,), 12), torch.arange(n), 12).argmax(
            -1
        )
        got = [tok]
        for t in range(12, 12 + new - 1):
            tok = decoder.decode(tok, torch.full((n,), t), t + 1).argmax(-1)
            got.append(tok)
    assert torch.equal(torch.stack(got, 1), want)
    assert all(len(set(row.tolist())) > new // 2 for row in want)  # not one token repeated


def test_a_fused_sampler_that_cannot_run_falls_back_to_the_torch_draw():
    """Asked for where its kernel cannot run (Triton with no GPU and no interpreter), the sampler
    says why and draws with torch: the same tokens as one never asked."""
    pytest.importorskip("triton")
    from pipeline.engines.orpheus.model.sampling import RowSampler, SamplingParams
    from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE, END_OF_SPEECH

    if os.environ.get("TRITON_INTERPRET") == "1" or torch.cuda.is_available():
        pytest.skip("the kernel can run here")
    width = 7 * 4096 + 10 + (END_OF_SPEECH - CUSTOM_TOKEN_BASE + 1)
    fallbacks: list[str] = []
    asked = RowSampler(SamplingParams(), width, CUSTOM_TOKEN_BASE, "cpu", fused=True, fallbacks=fallbacks)
    plain = RowSampler(SamplingParams(), width, CUSTOM_TOKEN_BASE, "cpu", fallbacks=fallbacks)
    assert asked.fused is None and plain.fused is None
    assert len(fallbacks) == 1 and "fused sampler failed" in fallbacks[0]
    gen = torch.Generator().manual_seed(0)
    args = (
        torch.randn(5, width, generator=gen),
        torch.zeros(5, width + 1, dtype=torch.bool),
        torch.arange(5),
        torch.arange(5) * 1000,
    )
    assert torch.equal(asked(*args), plain(*args))
