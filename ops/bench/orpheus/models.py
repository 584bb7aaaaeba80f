"""Models to benchmark: the make-tiny checkpoint through the real loader, or Orpheus-3B shapes with
random weights built on the device (nothing is downloaded)."""

from __future__ import annotations

from pipeline.engines.orpheus.codec.snac import SnacCodec
from pipeline.engines.orpheus.config import Switches
from pipeline.engines.orpheus.model import device as devices
from pipeline.engines.orpheus.model.loading import LoadedModel, load
from pipeline.engines.orpheus.model.quant import quantize
from pipeline.engines.orpheus.tiny import ORPHEUS_3B, RANDOM_SERVING, SNAC_24KHZ, build_tokenizer, tiny_llama_config


def random_3b(
    device: str, dtype_name: str, quant: str, switches: Switches = Switches(), codec_dtype: str = "auto"
) -> LoadedModel:
    import torch
    from snac import SNAC
    from transformers import LlamaForCausalLM

    choice = devices.choose(device, dtype_name)
    dtype = devices.torch_dtype(choice.dtype_name)
    torch.manual_seed(0)
    with torch.device(choice.device):
        model = LlamaForCausalLM(tiny_llama_config(**ORPHEUS_3B)).to(dtype).eval()
    report = quantize(model, quant, choice.device, dtype, small_rows=switches.fp8_small_rows)
    codec = SnacCodec(
        SNAC(**SNAC_24KHZ), choice.device, fuse=None if switches.codec_fused else False, dtype=codec_dtype
    )
    return LoadedModel(
        "random Orpheus-3B shapes",
        build_tokenizer(),
        model,
        codec,
        choice,
        report,
        random_weights=True,
        serving=RANDOM_SERVING,
    )  # as make-tiny's checkpoint


def load_model(
    spec: str, device: str, dtype: str, quant: str, switches: Switches = Switches(), codec_dtype: str = "auto"
) -> LoadedModel:
    """``switches``: the faster paths the loader applies (the fp8 small-rows kernel, the fused
    codec), as the engine's own loader does; ``codec_dtype``: the codec's activations."""
    if spec == "random-3b":
        return random_3b(device, dtype, quant, switches, codec_dtype)
    return load(spec, None, dtype, quant, device, switches, codec_dtype)
