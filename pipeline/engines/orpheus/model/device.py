"""Device facts: which device, which dtype, how many jobs fit, and the names recorded per job."""

from __future__ import annotations

import logging
from pipeline.hostinfo import cpu_name
from dataclasses import dataclass

log = logging.getLogger(__name__)

CPU_MAX_BATCH = 8
GPU_MAX_BATCH_CAP = 128
GPU_MAX_ROWS = 512  # the continuous loop's cap on KV-cache rows
GPU_MEMORY_HEADROOM = 0.85  # fraction of free memory the KV cache may take
DTYPES = ("auto", "float32", "bfloat16", "float16")
KV_DTYPES = ("auto", "model", "fp8")  # what kv_cache.KVCache stores; resolve_kv_dtype
FP8_KV_CAPABILITY = (8, 9)  # Triton's e4m3 (fp8e4nv) loads and casts need Ada or Hopper


@dataclass(frozen=True)
class DeviceChoice:
    device: str  # "cuda:0" or "cpu"
    name: str  # GPU name or CPU model, recorded per job
    capability: tuple[int, int] | None
    dtype_name: str  # what the weights run in
    fallback: str | None  # why dtype differs from what was asked, if it does


def resolve_device(setting: str) -> str:
    import torch

    if setting == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if setting.startswith("cuda") and not torch.cuda.is_available():
        from pipeline.errors import EngineUnavailableError

        raise EngineUnavailableError(
            f"SYNTH_DEVICE={setting} asks for CUDA, which torch does not see here (no GPU, a CPU-only "
            "torch, or `synth worker --cpu`); set SYNTH_DEVICE=auto or cpu"
        )
    # The worker pins one GPU through CUDA_VISIBLE_DEVICES; inside the process it is always cuda:0.
    return "cuda:0" if setting.startswith("cuda") else setting


def choose(device_setting: str, dtype_setting: str) -> DeviceChoice:
    """Pick device and dtype: bf16 on GPUs that have it, fp16 on those that don't, fp32 on CPU."""
    import torch

    if dtype_setting not in DTYPES:
        from pipeline.errors import EngineUnavailableError

        raise EngineUnavailableError(f"unknown dtype {dtype_setting!r}; choose one of {DTYPES}")
    device = resolve_device(device_setting)
    if not device.startswith("cuda"):
        dtype = "float32" if dtype_setting == "auto" else dtype_setting
        return DeviceChoice(device, cpu_name(), None, dtype, None)
    cap = torch.cuda.get_device_capability(0)
    name = torch.cuda.get_device_name(0)
    wanted = "bfloat16" if dtype_setting == "auto" else dtype_setting
    fallback = None
    if wanted == "bfloat16" and not torch.cuda.is_bf16_supported():
        fallback = f"{name} (sm_{cap[0]}{cap[1]}) has no bf16: running float16"
        log.warning(fallback)
        wanted = "float16"
    return DeviceChoice(device, name, cap, wanted, fallback)


def resolve_kv_dtype(setting: str, capability: tuple[int, int] | None) -> str:
    """ "model" or "fp8" for a ``kv_dtype`` setting on a device of ``capability`` (None: the CPU).
    "auto" is fp8 where the GPU has the e4m3 kernels: the cache then takes half the bytes, so
    twice the rows fit, and a decode step's attention, which reads the whole cache of every row,
    reads half as much (kv_scales.py keeps the entries inside e4m3's range). Elsewhere it is the
    model's dtype."""
    if setting not in KV_DTYPES:
        raise ValueError(f"kv_dtype must be one of {KV_DTYPES}, not {setting!r}")
    if setting != "auto":
        return setting
    fp8 = capability is not None and tuple(capability) >= FP8_KV_CAPABILITY
    return "fp8" if fp8 else "model"


def torch_dtype(name: str):
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def kv_bytes_per_token(config, dtype_bytes: int) -> int:
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * dtype_bytes


def choose_max_batch(setting: int, device: str, per_sequence_bytes: int, cap: int = GPU_MAX_BATCH_CAP) -> int:
    """``setting`` if positive, else what the free memory holds (GPU) or a small CPU default."""
    if setting > 0:
        return setting
    if not device.startswith("cuda"):
        return CPU_MAX_BATCH
    import torch

    free, _total = torch.cuda.mem_get_info(0)
    fits = int(free * GPU_MEMORY_HEADROOM) // max(per_sequence_bytes, 1)
    return max(1, min(cap, fits))
