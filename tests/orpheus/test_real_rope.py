"""Checks that random weights would otherwise hide: the released checkpoint's RoPE (llama3 scaling)
at long positions, and the prompt's leading tokens.

With Llama's 0.02 initialization the attention scores are so small that a decoder with no rotation
at all picks the same greedy tokens as transformers. Here the weights are drawn with std 0.5, so
the scores (and the logits) depend on where each token sits; the comparison runs at positions 512
to 575, where llama3 scaling has changed the low-frequency rotations, and a negative control shows
that the same comparison fails when the tables ignore ``rope_scaling``.
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from pipeline.engines.orpheus.model.decoder import Decoder

from pipeline.engines.orpheus.model.kv_cache import KVCache
from pipeline.engines.orpheus.tiny import LLAMA3_ROPE, TINY_LLAMA, tiny_llama_config

PREFIX = 512  # tokens prefilled before the compared steps
STEPS = 64  # decode steps compared, at positions PREFIX .. PREFIX + STEPS - 1
CONTEXT = PREFIX + STEPS
# fp32 on the CPU: ours and transformers' differ only by summation order (measured 1.3e-5;
# without the scaling 1.3, without any rotation 1.7).
TIGHT = 1e-4
STD = 0.5


def large_model(seed: int = 0):
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=512, **TINY_LLAMA)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:  # norms stay at 1: the scale lives in the projections
                p.normal_(0.0, STD)
    return model


def relative_error(decoder: Decoder, model, ids) -> float:
    """Worst relative L2 distance between our logits and transformers' over the decode steps."""
    n, s = ids.shape
    zeros = torch.zeros(n, dtype=torch.long)
    with torch.inference_mode():
        decoder.prefill(ids[:, :PREFIX], zeros, torch.full((n,), PREFIX), torch.arange(n), PREFIX)
        ours = torch.stack(
            [decoder.decode(ids[:, t], torch.full((n,), t), t + 1) for t in range(PREFIX, s)], 1
        )  # [N, STEPS, V]
        theirs = model(ids).logits[:, PREFIX:].float()
    return ((ours - theirs).norm(dim=-1) / theirs.norm(dim=-1)).max().item()


def decoder_for(model) -> Decoder:
    cfg = model.config
    cache = KVCache(cfg.num_hidden_layers, 2, cfg.num_key_value_heads, CONTEXT, cfg.head_dim, model.dtype, model.device)
    return Decoder(model, cache, fuse=False)


@pytest.fixture(scope="module")
def model_and_ids():
    model = large_model()
    return model, torch.randint(0, 512, (2, CONTEXT), generator=torch.Generator().manual_seed(1))


def test_the_tiny_config_carries_the_released_checkpoints_rope_and_norm_settings():
    cfg = tiny_llama_config()
    rope = getattr(cfg, "rope_parameters", None) or cfg.rope_scaling
    assert rope["rope_type"] == "llama3" and rope["factor"] == 32.0
    assert rope["low_freq_factor"] == 1.0 and rope["high_freq_factor"] == 4.0
    assert rope["original_max_position_embeddings"] == 8192
    assert cfg.max_position_embeddings == 131_072 and cfg.rms_norm_eps == 1e-5


def test_make_tiny_writes_the_real_rope_into_config_json(tiny_dir):
    import json

    config = json.loads((tiny_dir / "config.json").read_text())
    rope = config.get("rope_parameters") or config["rope_scaling"]
    expected = LLAMA3_ROPE["rope_scaling"]
    assert {k: rope[k] for k in expected} == expected
    assert config["max_position_embeddings"] == 131_072 and config["rms_norm_eps"] == 1e-5


def test_our_logits_match_transformers_at_long_positions(model_and_ids):
    model, ids = model_and_ids
    err = relative_error(decoder_for(model), model, ids)
    assert err < TIGHT, f"relative logits error {err:.2e} at positions {PREFIX}..{CONTEXT - 1}"


def test_the_long_position_test_fails_when_the_tables_ignore_rope_scaling(model_and_ids):
    """The negative control: the same comparison with tables built as if the config had no
    ``rope_scaling`` (plain RoPE at theta 500,000) is far outside the bound."""
    model, ids = model_and_ids
    plain = LlamaConfig(vocab_size=512, **{**TINY_LLAMA, "rope_scaling": None})
    rotary = LlamaRotaryEmbedding(plain)
    decoder = decoder_for(model)
    positions = torch.arange(CONTEXT + 1).view(1, -1)
    cos, sin = rotary(torch.zeros(1), positions)
    assert not torch.allclose(cos[0], decoder.cos)  # the scaling does change the tables
    decoder.cos, decoder.sin = cos[0].contiguous(), sin[0].contiguous()
    err = relative_error(decoder, model, ids)
    assert err > 100 * TIGHT, f"a decoder without rope scaling passed ({err:.2e})"


def test_a_decoder_without_rotation_fails_the_long_position_test(model_and_ids):
    model, ids = model_and_ids
    decoder = decoder_for(model)
    decoder.cos, decoder.sin = torch.ones_like(decoder.cos), torch.zeros_like(decoder.sin)
    assert relative_error(decoder, model, ids) > 100 * TIGHT
