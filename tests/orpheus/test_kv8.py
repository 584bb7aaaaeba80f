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
from pipeline.engines.orpheus.model import kv_scales
from pipeline.engines.orpheus.model.device import resolve_kv_dtype
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
    return KVCache(
        cfg.num_hidden_layers,
        4,
        cfg.num_key_value_heads,
        CONTEXT,
        cfg.head_dim,
        model.dtype,
        model.device,
        kv_dtype,
        *scales,
    )


def step_logits(decoder, ids, steps: int):
    """Prefill ``ids[:, :-steps]`` into rows 0..N-1, then decode the rest teacher-forced; the
    prefill's logits and each step's, [N, steps + 1, V]."""
    n, s = ids.shape
    with torch.inference_mode():
        out = [
            decoder.prefill(
                ids[:, : s - steps],
                torch.zeros(n, dtype=torch.long),
                torch.full((n,), s - steps),
                torch.arange(n),
                s - steps,
            )
        ]
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
    err = ((got - want).norm(dim=-1) / want.norm(dim=-1)).max().item()  # worst position
    assert 0 < err < FP8_LOGITS_BOUND, f"relative logits error {err:.4f}"
    # the cache holds what was written: rows 0..2 at positions 0..23, nothing anywhere else
    for c in (decoder.cache.k, decoder.cache.v):
        assert c[:, :3, :, :24].float().abs().sum(-1).gt(0).all()
        assert not c[:, 3].float().any() and not c[:, :, :, 24:].float().any()


def test_a_cache_in_the_model_dtype_is_unchanged_by_the_option():
    model = small_model(2)
    ids = torch.randint(0, 512, (2, 16))
    plain = Decoder(model, cache_for(model))
    named = Decoder(model, cache_for(model, "model"))
    assert named.cache.k.dtype == torch.float32 and named.qk_scale == plain.scale
    assert torch.equal(step_logits(plain, ids, 4), step_logits(named, ids, 4))
    with pytest.raises(ValueError, match="fp8 KV cache only"):
        cache_for(model, None, (0.5, 1.0))
    with pytest.raises(ValueError, match="unknown KV cache dtype"):
        cache_for(model, "int4")
    with pytest.raises(ValueError, match="resolve it first"):
        cache_for(model, "auto")


@pytest.mark.parametrize(
    ("setting", "capability", "want"),
    [
        ("auto", None, "model"),  # the CPU
        ("auto", (8, 0), "model"),  # A100: no e4m3 kernels
        ("auto", (8, 6), "model"),
        ("auto", (8, 9), "fp8"),  # Ada
        ("auto", (9, 0), "fp8"),  # Hopper
        ("auto", (10, 0), "fp8"),
        ("model", (9, 0), "model"),
        ("fp8", None, "fp8"),  # asked for: the engine then says where it cannot run
    ],
)
def test_auto_is_fp8_where_the_gpu_has_its_kernels(setting, capability, want):
    assert resolve_kv_dtype(setting, capability) == want


def test_an_unknown_kv_dtype_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="'auto', 'model', 'fp8'"):
        resolve_kv_dtype("int8", (9, 0))


# The scales -----------------------------------------------------------------------------------


def outlier_model(seed: int, factor: float):
    """A small model whose keys and values are ``factor`` times larger, past e4m3's range, and
    whose function is unchanged: queries and the output projection are as much smaller."""
    model = small_model(seed)
    with torch.no_grad():
        for layer in model.model.layers:
            attn = layer.self_attn
            attn.k_proj.weight.mul_(factor)
            attn.q_proj.weight.div_(factor)
            attn.v_proj.weight.mul_(factor)
            attn.o_proj.weight.div_(factor)
    return model


def test_probe_keeps_scale_1_for_usual_entries_and_scales_outliers_back_into_range():
    ids = [list(range(3, 40)), list(range(100, 130))]
    usual = kv_scales.measure(small_model(0), ids)
    assert 0 < usual.k_max < kv_scales.FP8_MAX / kv_scales.HEADROOM
    assert (usual.k_scale, usual.v_scale) == (1.0, 1.0)
    big = kv_scales.measure(outlier_model(0, 2000.0), ids)
    assert big.k_max > kv_scales.FP8_MAX and big.v_max > kv_scales.FP8_MAX
    assert big.k_scale == pytest.approx(big.k_max * kv_scales.HEADROOM / kv_scales.FP8_MAX)
    assert big.v_scale == pytest.approx(big.v_max * kv_scales.HEADROOM / kv_scales.FP8_MAX)


def test_measured_scales_keep_an_outlier_checkpoint_within_the_bound_where_scale_1_clips():
    model = outlier_model(1, 2000.0)
    ids = torch.randint(0, 512, (3, 24))
    found = kv_scales.measure(model, ids.tolist())
    want = step_logits(Decoder(model, cache_for(model)), ids, 8)

    def worst(scales):
        got = step_logits(Decoder(model, cache_for(model, "fp8", scales)), ids, 8)
        return ((got - want).norm(dim=-1) / want.norm(dim=-1)).max().item()

    assert worst((found.k_scale, found.v_scale)) < FP8_LOGITS_BOUND
    assert worst((1.0, 1.0)) > 5 * FP8_LOGITS_BOUND  # clipped at 448


def test_probe_sequences_are_prompts_then_audio_codes_inside_the_vocabulary(tiny):
    vocab = tiny.model.config.vocab_size
    seqs = kv_scales.probe_ids(tiny.tokenizer, vocab)
    assert len(seqs) == len(kv_scales.PROBE_TEXTS)
    for seq in seqs:
        assert all(0 <= i < vocab for i in seq)
        assert len(seq) > kv_scales.PROBE_AUDIO_TOKENS


def test_bytes_per_row_halves_with_fp8():
    args = (28, 8, 2048, 128)  # Orpheus-3B: layers, KV heads, context, D
    bf16 = KVCache.bytes_per_row(*args, kv_storage_dtype("model", torch.bfloat16).itemsize)
    fp8 = KVCache.bytes_per_row(*args, kv_storage_dtype("fp8", torch.bfloat16).itemsize)
    assert bf16 == 2 * fp8 == 2 * 2 * 28 * 8 * 2049 * 128
    model = small_model(0)
    plain, small = cache_for(model), cache_for(model, "fp8")  # fp32 model: a quarter here
    assert plain.k.nbytes + plain.v.nbytes == 4 * (small.k.nbytes + small.v.nbytes)


def test_move_copies_fp8_bytes():
    cache = cache_for(small_model(0), "fp8")
    cache.k.view(torch.uint8)[:, 1, :, :5] = torch.randint(0, 255, cache.k[:, 1, :, :5].shape, dtype=torch.uint8)
    cache.move(1, 3, 5)
    assert torch.equal(cache.k.view(torch.uint8)[:, 3], cache.k.view(torch.uint8)[:, 1])


# The torch reference of rope_store --------------------------------------------------------------


def test_rope_store_ref_into_fp8_is_the_rotation_scaled_saturated_and_rounded():
    torch.manual_seed(0)
    cfg = LlamaConfig(**TINY_LLAMA)
    b, hq, hkv, d = 3, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    cos, sin = (t[0] for t in LlamaRotaryEmbedding(cfg)(torch.zeros(1), torch.arange(CONTEXT + 1).view(1, -1)))
    q, k, v = (torch.randn(b, h, d) * 4 for h in (hq, hkv, hkv))
    k[0, 0, :2] = torch.tensor([5000.0, -5000.0])  # saturate
    v[1, 1, :2] = torch.tensor([-900.0, 900.0])
    wpos = torch.tensor([7, 0, CONTEXT])  # the last: scratch
    k_scale, v_scale = 0.5, 2.0
    kc, vc = (torch.zeros(b + 1, hkv, CONTEXT + 1, d, dtype=torch.float8_e4m3fn) for _ in range(2))
    with torch.inference_mode():
        got = fused.rope_store_ref(q, k, v, cos, sin, wpos, kc, vc, k_scale, v_scale)
    want_q, want_k = apply_rotary_pos_emb(
        q.unsqueeze(2), k.unsqueeze(2), cos[wpos].unsqueeze(1), sin[wpos].unsqueeze(1)
    )  # [B, H, 1, D]
    assert torch.equal(got, want_q[:, :, 0])  # q is not quantized
    for row, p in enumerate(wpos.tolist()):
        for cache, x, scale in ((kc, want_k[row, :, 0], k_scale), (vc, v[row], v_scale)):
            direct = torch.clamp(x / scale, -448.0, 448.0).to(torch.float8_e4m3fn)
            assert torch.equal(cache[row, :, p].view(torch.uint8), direct.view(torch.uint8))
    assert kc[0, 0, 7].float().abs().max() == 448  # saturated, not NaN
    assert vc[1, 1, 0, :2].float().tolist() == [-448, 448]
    written = torch.zeros(b + 1, 1, CONTEXT + 1, 1, dtype=torch.bool)
    written[torch.arange(b), 0, wpos] = True
    for cache in (kc, vc):
        assert not cache.float().masked_fill(written, 0).any()


# The engine -----------------------------------------------------------------------------------


def test_engine_runs_end_to_end_with_an_fp8_cache(tiny):
    requests = [
        SynthesisRequest(i, t, "tara", seed=3 + i, realtime=i == 1)
        for i, t in enumerate(["Hello there.", "A second, longer line to speak.", "Hi"])
    ]
    engine = OrpheusEngine(tiny, OrpheusConfig(kv_dtype="fp8"), max_batch=2, budget_slack=0.5, budget_min=42)
    try:
        assert engine.info.extra["kv_dtype"] == "float8_e4m3fn"
        assert engine.info.extra["kv_scales"] == [1.0, 1.0]  # measured: the tiny model's
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


def test_engine_on_the_cpu_keeps_the_model_dtype_by_default_and_the_reference_refuses_fp8(tiny):
    engine = OrpheusEngine(tiny, OrpheusConfig(context=256), max_batch=1)
    try:
        assert engine.info.extra["kv_dtype"] == "float32"
        assert "kv_scales" not in engine.info.extra
    finally:
        engine.close()
    ReferenceEngine(tiny, OrpheusConfig(kv_dtype="model"), max_batch=1).close()
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
    monkeypatch.setenv("SYNTH_ORPHEUS_KV_DTYPE", "model")
    assert Settings().engine_settings().orpheus.kv_dtype == "model"
    monkeypatch.delenv("SYNTH_ORPHEUS_KV_DTYPE")
    assert Settings().engine_settings().orpheus.kv_dtype == "auto"
    engine = load_engine(engine_settings(orpheus=OrpheusConfig(kv_dtype="fp8"), max_batch=2))
    try:
        assert engine.info.extra["kv_dtype"] == "float8_e4m3fn"
    finally:
        engine.close()
