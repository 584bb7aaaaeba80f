"""The fp8 KV cache (KVCache(kv_dtype="fp8")) on the CPU, fp32: logits within a stated bound of the
plain cache, the torch rope_store against a direct computation, the halved row size, the engine end
to end, the setting, and the Triton kernels over fp8 in Triton's interpreter.

Bound: the relative L2 error of each position's logits over a prefill and eight decode steps (tiny
model, Llama's init) stays under 4%; measured about 1.2-1.4% overall and at most 2% for one position
(e4m3 rounds each K and V entry by up to 2^-4).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from pipeline.engines.base import SynthesisRequest
from pipeline.engines.orpheus.config import OrpheusConfig
from pipeline.engines.orpheus.engine import OrpheusEngine
from pipeline.engines.orpheus.kernels import fused
from pipeline.engines.orpheus.model.decoder import Decoder
from pipeline.engines.orpheus.model.kv_cache import KVCache, kv_storage_dtype
from pipeline.engines.orpheus.reference import ReferenceEngine
from pipeline.engines.orpheus.tiny import TINY_LLAMA

CONTEXT = 128
FP8_LOGITS_BOUND = 0.04


def small_model(seed: int):
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=512, **TINY_LLAMA)).eval()


def cache_for(model, kv_dtype=None, scales=(1.0, 1.0)):
    cfg = model.config
    return KVCache(cfg.num_hidden_layers, 4, cfg.num_key_value_heads, CONTEXT, cfg.head_dim,
                   model.dtype, model.device, kv_dtype, *scales)


def step_logits(decoder, ids, steps: int):
    """Prefill ``ids[:, :-steps]`` into rows 0..N-1, then decode the rest teacher-forced; the
    prefill's logits and each step's, [N, steps + 1, V]."""
    n, s = ids.shape
    with torch.inference_mode():
        out = [decoder.prefill(ids[:, :s - steps], torch.zeros(n, dtype=torch.long),
                               torch.full((n,), s - steps), torch.arange(n), s - steps)]
        for t in range(s - steps, s):
            out.append(decoder.decode(ids[:, t], torch.full((n,), t), t + 1))
    return torch.stack(out, 1)


# The decoder ----------------------------------------------------------------------------------

@pytest.mark.parametrize("scales", [(1.0, 1.0), (1 / 16, 1 / 4)], ids=["scale-1", "scaled"])
@pytest.mark.parametrize("seed", [0, 1])
def test_fp8_cache_logits_stay_within_bound_of_the_plain_cache(seed, scales):
    model = small_model(seed)
    ids = torch.randint(0, 512, (3, 24))
    want = step_logits(Decoder(model, cache_for(model)), ids, 8)
    decoder = Decoder(model, cache_for(model, "fp8", scales))
    got = step_logits(decoder, ids, 8)
    assert decoder.cache.k.dtype == decoder.cache.v.dtype == torch.float8_e4m3fn
    err = ((got - want).norm(dim=-1) / want.norm(dim=-1)).max().item()      # worst position
    assert 0 < err < FP8_LOGITS_BOUND, f"relative logits error {err:.4f}"
    # the cache holds what was written: rows 0..2 at positions 0..23, nothing anywhere else
    for c in (decoder.cache.k, decoder.cache.v):
        assert c[:, :3, :, :24].float().abs().sum(-1).gt(0).all()
        assert not c[:, 3].float().any() and not c[:, :, :, 24:].float().any()


def test_a_cache_in_the_model_dtype_is_unchanged_by_the_option():
    model = small_model(2)
    ids = torch.randint(0, 512, (2, 16))
    plain = Decoder(model, cache_for(model))
    auto = Decoder(model, cache_for(model, "auto"))
    assert auto.cache.k.dtype == torch.float32 and auto.qk_scale == plain.scale
    assert torch.equal(step_logits(plain, ids, 4), step_logits(auto, ids, 4))
    with pytest.raises(ValueError, match="fp8 KV cache only"):
        cache_for(model, None, (0.5, 1.0))
    with pytest.raises(ValueError, match="unknown KV cache dtype"):
        cache_for(model, "int4")


def test_bytes_per_row_halves_with_fp8():
    args = (28, 8, 2048, 128)                           # Orpheus-3B: layers, KV heads, context, D
    bf16 = KVCache.bytes_per_row(*args, kv_storage_dtype("auto", torch.bfloat16).itemsize)
    fp8 = KVCache.bytes_per_row(*args, kv_storage_dtype("fp8", torch.bfloat16).itemsize)
    assert bf16 == 2 * fp8 == 2 * 2 * 28 * 8 * 2049 * 128
    model = small_model(0)
    plain, small = cache_for(model), cache_for(model, "fp8")     # fp32 model: a quarter here
    assert plain.k.nbytes + plain.v.nbytes == 4 * (small.k.nbytes + small.v.nbytes)


def test_move_copies_fp8_bytes():
    cache = cache_for(small_model(0), "fp8")
    cache.k.view(torch.uint8)[:, 1, :, :5] = torch.randint(0, 255, cache.k[:, 1, :, :5].shape,
                                                           dtype=torch.uint8)
    cache.move(1, 3, 5)
    assert torch.equal(cache.k.view(torch.uint8)[:, 3], cache.k.view(torch.uint8)[:, 1])


# The torch reference of rope_store --------------------------------------------------------------

def test_rope_store_ref_into_fp8_is_the_rotation_scaled_saturated_and_rounded():
    torch.manual_seed(0)
    cfg = LlamaConfig(**TINY_LLAMA)
    b, hq, hkv, d = 3, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    cos, sin = (t[0] for t in LlamaRotaryEmbedding(cfg)(torch.zeros(1),
                                                        torch.arange(CONTEXT + 1).view(1, -1)))
    q, k, v = (torch.randn(b, h, d) * 4 for h in (hq, hkv, hkv))
    k[0, 0, :2] = torch.tensor([5000.0, -5000.0])                     # saturate
    v[1, 1, :2] = torch.tensor([-900.0, 900.0])
    wpos = torch.tensor([7, 0, CONTEXT])                                  # the last: scratch
    k_scale, v_scale = 0.5, 2.0
    kc, vc = (torch.zeros(b + 1, hkv, CONTEXT + 1, d, dtype=torch.float8_e4m3fn)
              for _ in range(2))
    with torch.inference_mode():
        got = fused.rope_store_ref(q, k, v, cos, sin, wpos, kc, vc, k_scale, v_scale)
    want_q, want_k = apply_rotary_pos_emb(q.unsqueeze(2), k.unsqueeze(2), cos[wpos].unsqueeze(1),
                                          sin[wpos].unsqueeze(1))          # [B, H, 1, D]
    assert torch.equal(got, want_q[:, :, 0])                              # q is not quantized
    for row, p in enumerate(wpos.tolist()):
        for cache, x, scale in ((kc, want_k[row, :, 0], k_scale), (vc, v[row], v_scale)):
            direct = torch.clamp(x / scale, -448.0, 448.0).to(torch.float8_e4m3fn)
            assert torch.equal(cache[row, :, p].view(torch.uint8), direct.view(torch.uint8))
    assert kc[0, 0, 7].float().abs().max() == 448                       # saturated, not NaN
    assert vc[1, 1, 0, :2].float().tolist() == [-448, 448]
    written = torch.zeros(b + 1, 1, CONTEXT + 1, 1, dtype=torch.bool)
    written[torch.arange(b), 0, wpos] = True
    for cache in (kc, vc):
        assert not cache.float().masked_fill(written, 0).any()


# The engine -----------------------------------------------------------------------------------

def test_engine_runs_end_to_end_with_an_fp8_cache(tiny):
    requests = [SynthesisRequest(i, t, "tara", seed=3 + i, realtime=i == 1)
                for i, t in enumerate(["Hello there.", "A second, longer line to speak.", "Hi"])]
    engine = OrpheusEngine(tiny, OrpheusConfig(kv_dtype="fp8"), max_batch=2, budget_slack=0.5,
                           budget_min=42)
    try:
        assert engine.info.extra["kv_dtype"] == "float8_e4m3fn"
        assert engine.loop.runner.cache.k.dtype == torch.float8_e4m3fn
        audio, finals = {}, {}
        for chunk in engine.synthesize(requests):
            assert chunk.error is None, chunk.error
            audio.setdefault(chunk.key, []).append(chunk.audio)
            if chunk.final:
                finals[chunk.key] = chunk
    finally:
        engine.close()
    assert set(finals) == {0, 1, 2}
    for key in finals:
        assert np.concatenate(audio[key]).size > 0


def test_engine_reports_the_model_dtype_cache_by_default_and_the_reference_refuses_fp8(tiny):
    engine = OrpheusEngine(tiny, OrpheusConfig(context=256), max_batch=1)
    try:
        assert engine.info.extra["kv_dtype"] == "float32"
    finally:
        engine.close()
    with pytest.raises(ValueError, match="transformers' cache"):
        ReferenceEngine(tiny, OrpheusConfig(kv_dtype="fp8"), max_batch=1)
    with pytest.raises(ValueError, match="kv_dtype"):
        OrpheusEngine(tiny, OrpheusConfig(kv_dtype="fp4"), max_batch=1)


def test_the_setting_reaches_the_engine(engine_settings, monkeypatch):
    from pipeline.engines.registry import load_engine
    from pipeline.settings import Settings

    monkeypatch.setenv("SYNTH_ORPHEUS_KV_DTYPE", "fp8")
    assert Settings().engine_settings().orpheus.kv_dtype == "fp8"
    monkeypatch.setenv("SYNTH_ORPHEUS_KV_DTYPE", "int8")
    with pytest.raises(ValueError):
        Settings()
    monkeypatch.delenv("SYNTH_ORPHEUS_KV_DTYPE")
    assert Settings().engine_settings().orpheus.kv_dtype == "auto"
    engine = load_engine(engine_settings(orpheus=OrpheusConfig(kv_dtype="fp8"), max_batch=2))
    try:
        assert engine.info.extra["kv_dtype"] == "float8_e4m3fn"
    finally:
        engine.close()
