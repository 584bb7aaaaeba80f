"""``synth models make-tiny``: a tiny random-weight Orpheus checkpoint in the real on-disk layout.

The folder holds what a released checkpoint holds (config.json, generation_config.json,
model.safetensors, tokenizer.json + tokenizer_config.json) and a ``snac/`` folder (config.json,
pytorch_model.bin) that ``snac.SNAC.from_pretrained`` reads, so tests and a CPU demo exercise the
real loaders. The token layout is Orpheus' own (vocab.py): a byte-level tokenizer whose special and
custom tokens sit at the real ids, and a 156,940-row embedding. The config carries
``synth_random_weights: true``, so a job records that its output is noise, and ``synth_serving``,
what such a checkpoint asks of the engine (``RANDOM_SERVING``; model/loading.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from pipeline.constants import SNAC_SAMPLE_RATE
from pipeline.engines.orpheus.model.loading import ServingHints
from pipeline.engines.orpheus.vocab import (
    BEGIN_OF_TEXT,
    CUSTOM_TOKEN_BASE,
    END_OF_SPEECH,
    END_OF_TEXT,
    PAD,
    VOCAB_SIZE,
)

# What the released checkpoint's config.json says about positions and norms (Llama-3.2-3B's):
# llama3 RoPE scaling changes the low-frequency rotations, so a decoder that builds its tables
# without it is wrong only past a few hundred positions, which the tests must reach.
LLAMA3_ROPE = dict(
    rope_theta=500_000.0,
    rope_scaling={
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    max_position_embeddings=131_072,
    rms_norm_eps=1e-5,
)
TINY_LLAMA = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    **LLAMA3_ROPE,
    tie_word_embeddings=True,
    initializer_range=0.02,  # Llama's own; quantization errors then look like a real model's
)
TINY_SNAC = dict(
    sampling_rate=SNAC_SAMPLE_RATE,
    encoder_dim=8,
    encoder_rates=[2, 4, 8, 8],
    decoder_dim=64,
    decoder_rates=[8, 8, 4, 2],  # hop 512, as snac_24khz
    attn_window_size=None,
    codebook_size=4096,
    codebook_dim=8,
    vq_strides=[4, 2, 1],  # 3 levels at 11.7, 23.4, 46.9 Hz, as snac_24khz
    noise=True,
    depthwise=True,
)
LLAMA3_SPECIALS = {
    BEGIN_OF_TEXT: "<|begin_of_text|>",
    BEGIN_OF_TEXT + 1: "<|end_of_text|>",
    BEGIN_OF_TEXT + 6: "<|start_header_id|>",
    BEGIN_OF_TEXT + 7: "<|end_header_id|>",
    END_OF_TEXT: "<|eot_id|>",
}


def special_token_names() -> list[str]:
    """Names for ids BEGIN_OF_TEXT..VOCAB_SIZE-1, in id order."""
    names = [
        LLAMA3_SPECIALS.get(i, f"<|reserved_special_token_{i - BEGIN_OF_TEXT}|>")
        for i in range(BEGIN_OF_TEXT, CUSTOM_TOKEN_BASE)
    ]
    return names + [f"<custom_token_{i}>" for i in range(VOCAB_SIZE - CUSTOM_TOKEN_BASE)]


def build_tokenizer():
    """A byte-level BPE tokenizer (no merges) with Llama-3's BOS and Orpheus' ids; built offline."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    vocab.update({f"<|filler_{i}|>": i for i in range(len(alphabet), BEGIN_OF_TEXT)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(n, special=True, normalized=False) for n in special_token_names()])
    bos = LLAMA3_SPECIALS[BEGIN_OF_TEXT]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, BEGIN_OF_TEXT)]
    )
    if tok.token_to_id("<custom_token_10>") != CUSTOM_TOKEN_BASE + 10:
        raise RuntimeError("tiny tokenizer ids drifted from the Orpheus layout")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=bos,
        eos_token=LLAMA3_SPECIALS[END_OF_TEXT],
        pad_token=f"<custom_token_{PAD - CUSTOM_TOKEN_BASE}>",
    )


def tiny_llama_config(**overrides):
    from transformers import LlamaConfig

    fields = {**TINY_LLAMA, **overrides}
    return LlamaConfig(
        vocab_size=VOCAB_SIZE, bos_token_id=BEGIN_OF_TEXT, eos_token_id=END_OF_SPEECH, pad_token_id=PAD, **fields
    )


# ANCHORS.md's Orpheus-3B shapes (LlamaForCausalLM, tied) and hubertsiuzdak/snac_24khz's config:
# random weights at full size, for speed work on a GPU with nothing downloaded.
ORPHEUS_3B = dict(
    hidden_size=3072,
    intermediate_size=8192,
    num_hidden_layers=28,
    num_attention_heads=24,
    num_key_value_heads=8,
    head_dim=128,
    **LLAMA3_ROPE,
    tie_word_embeddings=True,
    initializer_range=0.02,
)
SNAC_24KHZ = dict(
    sampling_rate=24_000,
    encoder_dim=48,
    encoder_rates=[2, 4, 8, 8],
    decoder_dim=1024,
    decoder_rates=[8, 8, 4, 2],
    attn_window_size=None,
    codebook_size=4096,
    codebook_dim=8,
    vq_strides=[4, 2, 1],
    noise=True,
    depthwise=True,
)
SHAPES = ("tiny", "orpheus-3b")

# What a random checkpoint asks of the engine. Its weights never draw end of speech on purpose, so
# a job that reaches its budget ran no longer than it was let: it keeps its audio, and the budget is
# the text's expected speech length (slack 1), so a run does a real model's work, not twice the
# tokens a job. Its byte-level tokenizer makes a token a character, four times Llama-3's count (a
# 180-character stream's prompt: about 200 tokens), so the prefill graphs add 96 and 192 to the
# serving ladder, which would pad prompts of 129-192 tokens up to 256.
RANDOM_SERVING = ServingHints(budget_slack=1.0, budget_policy="keep", prefill_lengths=(32, 64, 96, 128, 192, 256))


def make_tiny(out_dir: str | Path, seed: int = 0, shape: str = "tiny") -> Path:
    """Write a random-weight checkpoint into ``out_dir`` (created) and return it: the tiny one,
    or Orpheus-3B shapes in bf16 (built on the GPU when there is one)."""
    import torch
    from snac import SNAC
    from transformers import LlamaForCausalLM

    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {SHAPES}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    big = shape == "orpheus-3b"
    config = tiny_llama_config(**ORPHEUS_3B) if big else tiny_llama_config()
    config.synth_random_weights = True
    config.synth_serving = asdict(RANDOM_SERVING)
    device = "cuda" if big and torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = LlamaForCausalLM(config).eval()
    if big:
        model = model.to(torch.bfloat16)
    model.generation_config.eos_token_id = END_OF_SPEECH
    model.generation_config.pad_token_id = PAD
    model.save_pretrained(out)
    build_tokenizer().save_pretrained(out)
    snac_dir = out / "snac"
    snac_dir.mkdir(exist_ok=True)
    snac_config = SNAC_24KHZ if big else TINY_SNAC
    codec = SNAC(**snac_config).eval()
    (snac_dir / "config.json").write_text(json.dumps(snac_config, indent=2))
    torch.save(codec.state_dict(), snac_dir / "pytorch_model.bin")
    return out
