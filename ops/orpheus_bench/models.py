"""Models to benchmark: the make-tiny checkpoint through the real loader, or Orpheus-3B shapes with
random weights built on the device (nothing is downloaded)."""

from __future__ import annotations

from pipeline.engines.orpheus import device as devices
from pipeline.engines.orpheus.codec import SnacCodec
from pipeline.engines.orpheus.loading import LoadedModel, load
from pipeline.engines.orpheus.quant import quantize
from pipeline.engines.orpheus.tiny import build_tokenizer, tiny_llama_config

# ANCHORS.md: LlamaForCausalLM, hidden 3072, 28 layers, 24/8 heads, head_dim 128, FFN 8192, tied.
ORPHEUS_3B = dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
                  num_attention_heads=24, num_key_value_heads=8, head_dim=128,
                  max_position_embeddings=8192, rope_theta=500_000.0, tie_word_embeddings=True,
                  initializer_range=0.02)
# hubertsiuzdak/snac_24khz's config.json (19.8 M parameters).
SNAC_24KHZ = dict(sampling_rate=24_000, encoder_dim=48, encoder_rates=[2, 4, 8, 8],
                  decoder_dim=1024, decoder_rates=[8, 8, 4, 2], attn_window_size=None,
                  codebook_size=4096, codebook_dim=8, vq_strides=[4, 2, 1], noise=True,
                  depthwise=True)


def random_3b(device: str, dtype_name: str, quant: str) -> LoadedModel:
    import torch
    from snac import SNAC
    from transformers import LlamaForCausalLM

    choice = devices.choose(device, dtype_name)
    dtype = devices.torch_dtype(choice.dtype_name)
    torch.manual_seed(0)
    with torch.device(choice.device):
        model = LlamaForCausalLM(tiny_llama_config(**ORPHEUS_3B)).to(dtype).eval()
    report = quantize(model, quant, choice.device, dtype)
    codec = SnacCodec(SNAC(**SNAC_24KHZ), choice.device)
    return LoadedModel("random Orpheus-3B shapes", build_tokenizer(), model, codec, choice, report,
                       random_weights=True)


def load_model(spec: str, device: str, dtype: str, quant: str) -> LoadedModel:
    if spec == "random-3b":
        return random_3b(device, dtype, quant)
    return load(spec, None, dtype, quant, device)
