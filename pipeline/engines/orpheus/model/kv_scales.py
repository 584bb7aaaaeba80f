"""Scales for an fp8 KV cache, from the checkpoint's own keys and values.

An e4m3 entry holds magnitudes up to 448. Llama's keys and values are mostly of order 1 to 10, and
with a scale of 1 they round by at most 2^-4 of an entry (kv_cache.KVCache); a checkpoint with
larger outliers would be clipped at 448 without a word. So at load the engine prefills a few probe
sequences (a prompt in each of several voices, then audio codes, as generation writes them) through
a model-dtype cache, reads the largest |K| and |V| the layers wrote, and scales a cache down only
where those exceed a quarter of e4m3's range: what the probe did not see keeps 4x headroom, and a
usual checkpoint keeps a scale of 1, which adds no subnormals.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from pipeline.engines.orpheus.kernels import FP8_MAX
from pipeline.engines.orpheus.model.decoder import Decoder
from pipeline.engines.orpheus.model.kv_cache import KVCache
from pipeline.engines.orpheus.prompt import prompt_ids
from pipeline.engines.orpheus.vocab import AUDIO_TOKEN_BASE, AUDIO_TOKEN_END

log = logging.getLogger(__name__)

HEADROOM = 4.0
PROBE_TEXTS = (
    ("tara", "Hello! The quarterly report is due on March 3rd, 2026, at 9:30 a.m. sharp."),
    ("leo", "Wait... did you really say forty-two thousand, six hundred and ten?"),
    ("mia", "<laugh> Oh, that's wonderful news; tell me everything about it."),
)
PROBE_AUDIO_TOKENS = 112  # 16 frames of codes after each prompt


@dataclass(frozen=True)
class KVRange:
    k_max: float  # the largest |K| the probe wrote (after RoPE)
    v_max: float
    k_scale: float  # what KVCache divides by before rounding to e4m3
    v_scale: float


def scale_for(largest: float) -> float:
    """1, unless ``largest`` comes within ``HEADROOM`` of e4m3's range."""
    return max(1.0, largest * HEADROOM / FP8_MAX)


def probe_ids(tokenizer, vocab: int) -> list[list[int]]:
    """Each probe text's prompt followed by audio codes in every position of a frame; ids past a
    small test model's vocabulary wrap into it."""
    gen = torch.Generator().manual_seed(0)
    codes = torch.randint(AUDIO_TOKEN_BASE, AUDIO_TOKEN_END, (PROBE_AUDIO_TOKENS,), generator=gen)
    return [[i % vocab for i in prompt_ids(tokenizer, text, voice) + codes.tolist()] for voice, text in PROBE_TEXTS]


def measure(model, sequences: list[list[int]], ops=None) -> KVRange:
    """Prefill ``sequences`` into a model-dtype cache of their own and read its largest entries."""
    cfg, device = model.config, model.device
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    n, length = len(sequences), max(len(s) for s in sequences)
    cache = KVCache(cfg.num_hidden_layers, n, cfg.num_key_value_heads, length, head_dim, model.dtype, device)
    ids = torch.zeros(n, length, dtype=torch.long)
    for i, seq in enumerate(sequences):
        ids[i, : len(seq)] = torch.tensor(seq)
    lens = torch.tensor([len(s) for s in sequences])
    decoder = Decoder(model, cache, fuse=False, ops=ops)  # leaves the modules' weights as they are
    with torch.inference_mode():
        decoder.prefill(
            ids.to(device),
            torch.zeros(n, dtype=torch.long, device=device),
            lens.to(device),
            torch.arange(n, device=device),
            length,
        )
        k_max = cache.k[..., :length, :].abs().amax().float().item()
        v_max = cache.v[..., :length, :].abs().amax().float().item()
    del decoder, cache
    if str(device).startswith("cuda"):
        torch.cuda.empty_cache()  # before the serving cache is sized from free memory
    return KVRange(k_max, v_max, scale_for(k_max), scale_for(v_max))


def fp8_scales(loaded, ops=None) -> KVRange:
    """The scales for ``loaded``'s fp8 cache (model/loading.py LoadedModel)."""
    found = measure(loaded.model, probe_ids(loaded.tokenizer, loaded.model.config.vocab_size), ops)
    log.info(
        "fp8 KV cache: largest |K| %.1f, |V| %.1f over the probe; scales %g, %g",
        found.k_max,
        found.v_max,
        found.k_scale,
        found.v_scale,
    )
    return found
