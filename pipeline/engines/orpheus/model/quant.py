"""Weight quantization by swapping modules (gpt-fast style): none | int8 | nf4 | fp8.

- ``int8``: bitsandbytes LLM.int8 (``Linear8bitLt``, outlier threshold 6.0).
- ``nf4``: bitsandbytes 4-bit NormalFloat (``Linear4bit``, blocksize 64), computing in the model dtype.
- ``fp8``: our own ``Float8Linear``: e4m3 weights with one scale per output channel. On GPUs with fp8
  matrix units (compute capability >= 8.9: Ada, Hopper) it runs ``torch._scaled_mm`` with row-wise
  scales and activations quantized per token; elsewhere it dequantizes the weight per call (correct,
  slow; recorded as ``fp8_kernel=dequant``).

Only the decoder layers' linear layers are swapped; embeddings and the tied LM head stay in the model
dtype. Each swap is probed with one forward before it is kept: when the package or kernel is missing or
fails, the model stays unquantized and the reason is logged and recorded (``QuantReport``), never
silently.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.engines.orpheus.kernels import FP8_MAX

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

MODES = ("none", "int8", "nf4", "fp8")
INT8_OUTLIER_THRESHOLD = 6.0
NF4_BLOCKSIZE = 64
SCALED_MM_ALIGN = 16  # _scaled_mm wants rows in multiples of 16


@dataclass(frozen=True)
class QuantReport:
    requested: str
    applied: str
    kernel: str  # "bf16", "bitsandbytes", "scaled_mm", "dequant"
    fallback: str | None = None  # why applied != requested


def _float8_linear_class():
    import torch
    import torch.nn.functional as F

    class Float8Linear(torch.nn.Module):
        weight: torch.Tensor  # buffers, registered below
        scale: torch.Tensor

        def __init__(self, weight, scale, bias, out_dtype, use_scaled_mm: bool, small_rows: bool = True):
            super().__init__()
            self.register_buffer("weight", weight)  # [N, K] e4m3
            self.register_buffer("scale", scale)  # [N] fp32
            self.bias = bias
            self.out_dtype = out_dtype
            self.use_scaled_mm = use_scaled_mm
            self.quantize_rows = _quantize_rows() if use_scaled_mm else None
            self.small_rows = _small_rows_kernel() if use_scaled_mm and small_rows else None

        @classmethod
        def quantize(cls, linear, use_scaled_mm: bool, small_rows: bool = True):
            w = linear.weight.detach().float()  # [N, K]
            scale = w.abs().amax(dim=1).clamp(min=1e-12) / FP8_MAX  # [N]
            return cls(
                (w / scale[:, None]).to(torch.float8_e4m3fn),
                scale,
                linear.bias,
                linear.weight.dtype,
                use_scaled_mm,
                small_rows,
            )

        def forward(self, x):  # x: [..., K]
            if not self.use_scaled_mm:
                w = (self.weight.float() * self.scale[:, None]).to(x.dtype)
                return F.linear(x, w, self.bias)
            return self._scaled(x)

        def _scaled(self, x):
            lead, k = x.shape[:-1], x.shape[-1]
            x2 = x.reshape(-1, k)
            m = x2.shape[0]
            if self.small_rows is not None and x.dtype in (torch.bfloat16, torch.float16):
                launch = self.small_rows[0](m)
                if launch is not None:  # few rows: the weight-only kernel (kernels/fp8.py)
                    out = self.small_rows[1](x2, self.weight, self.scale, launch)
                    out = out.to(self.out_dtype).reshape(*lead, -1)
                    return out if self.bias is None else out + self.bias
            rows = m + (-m) % SCALED_MM_ALIGN
            assert self.quantize_rows is not None  # made with use_scaled_mm, which _scaled runs under
            xq, x_scale = self.quantize_rows(x2, rows)
            out = torch._scaled_mm(
                xq, self.weight.t(), scale_a=x_scale, scale_b=self.scale.view(1, -1), out_dtype=self.out_dtype
            )
            out = out[:m].reshape(*lead, -1)
            return out if self.bias is None else out + self.bias

    return Float8Linear


def fuse_float8(modules):
    """One fp8 module for several fp8 projections of the same input (q/k/v, gate/up): their
    weights and per-channel scales stacked, so the activations are quantized once and one GEMM
    runs. The parts' buffers become views into the stacked ones (one copy stays allocated). None
    for anything that is not our bias-free Float8Linear."""
    import torch

    if not all(type(m).__name__ == "Float8Linear" and m.bias is None for m in modules):
        return None
    weight = torch.cat([m.weight.view(torch.uint8) for m in modules]).view(torch.float8_e4m3fn)
    scale = torch.cat([m.scale for m in modules])
    start = 0
    for m in modules:
        n = m.weight.shape[0]
        m.weight, m.scale = weight[start : start + n], scale[start : start + n]
        start += n
    first = modules[0]
    return type(first)(weight, scale, None, first.out_dtype, first.use_scaled_mm, first.small_rows is not None)


def quantize_rows_reference(x, rows: int):
    """Per-token e4m3 activations for ``_scaled_mm`` in plain torch: x [m, k] -> (e4m3 [rows, k],
    fp32 scales [rows, 1]), rows >= m padded with zeros. kernels/fp8.py does it in one kernel."""
    import torch
    import torch.nn.functional as F

    x = F.pad(x, (0, 0, 0, rows - x.shape[0]))
    scale = x.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12) / FP8_MAX
    return (x / scale).to(torch.float8_e4m3fn), scale


def _quantize_rows():
    """The one-kernel Triton version where Triton is installed, else plain torch."""
    try:
        from pipeline.engines.orpheus.kernels.fp8 import quantize_rows
    except ImportError:  # no Triton (the CPU install)
        return quantize_rows_reference
    return quantize_rows


def _small_rows_kernel():
    """(launch settings by rows, the kernel) of kernels/fp8.py's weight-only GEMM for the few
    rows of a decode step; None (``_scaled_mm`` at every batch) without Triton.

    A decode step's few rows make the GEMM a read of the weights: the weight-only kernel reads
    the fp8 weights once and skips quantizing the activations, where ``_scaled_mm`` is tuned for
    many rows and pads them to 16; with its K split it beats ``_scaled_mm`` and even bf16 weights
    at a few rows (docs/performance.md). ``SYNTH_ORPHEUS_DISABLE=fp8_small_rows`` keeps
    ``_scaled_mm`` at every batch."""
    try:
        from pipeline.engines.orpheus.kernels.fp8 import linear_w8a16, w8a16_launch
    except ImportError:  # no Triton (the CPU install)
        return None
    return w8a16_launch, linear_w8a16


def _fp8_has_kernel(device: str) -> bool:
    import torch

    return device.startswith("cuda") and torch.cuda.get_device_capability(0) >= (8, 9)


def _make_swapper(mode: str, device: str, dtype, small_rows: bool = True):
    """A function nn.Linear -> quantized module on ``device``; raises ImportError if unavailable.
    ``small_rows``: fp8 uses the weight-only kernel for a few rows (``_small_rows_kernel``)."""
    if mode == "fp8":
        cls = _float8_linear_class()
        fast = _fp8_has_kernel(device)
        return (lambda lin: cls.quantize(lin, fast, small_rows).to(device)), ("scaled_mm" if fast else "dequant")
    import bitsandbytes as bnb  # ImportError is the fallback signal

    def swap_bnb(lin):
        w = lin.weight.detach().to(dtype)
        q: torch.nn.Module
        if mode == "int8":
            q = bnb.nn.Linear8bitLt(
                lin.in_features,
                lin.out_features,
                bias=lin.bias is not None,
                has_fp16_weights=False,
                threshold=INT8_OUTLIER_THRESHOLD,
            )
            q.weight = bnb.nn.Int8Params(w.cpu(), requires_grad=False, has_fp16_weights=False)
        else:
            q = bnb.nn.Linear4bit(
                lin.in_features, lin.out_features, bias=lin.bias is not None, compute_dtype=dtype, quant_type="nf4"
            )
            q.weight = bnb.nn.Params4bit(w.cpu(), requires_grad=False, quant_type="nf4", blocksize=NF4_BLOCKSIZE)
        if lin.bias is not None:
            q.bias = lin.bias
        return q.to(device)  # bitsandbytes quantizes on the move

    return swap_bnb, "bitsandbytes"


def _decoder_linears(model):
    import torch

    for layer in model.model.layers:
        for parent in layer.modules():
            for name, child in parent.named_children():
                if isinstance(child, torch.nn.Linear):
                    yield parent, name, child


def quantize(model, mode: str, device: str, dtype, small_rows: bool = True) -> QuantReport:
    """Swap the decoder's linear layers in place (the model is already on ``device``);
    ``small_rows`` as ``_make_swapper``'s."""
    import torch

    if mode not in MODES:
        from pipeline.errors import EngineUnavailableError

        raise EngineUnavailableError(f"unknown quantization {mode!r}; choose one of {MODES}")
    plain = "bf16" if dtype == torch.bfloat16 else str(dtype).removeprefix("torch.")
    if mode == "none":
        return QuantReport("none", "none", plain)
    try:
        swap, kernel = _make_swapper(mode, device, dtype, small_rows)
        targets = list(_decoder_linears(model))
        _probe(swap, targets[0][2], device, dtype)
    except Exception as e:  # noqa: BLE001 - any failure here means "run unquantized, say why"
        reason = f"{mode} unavailable on {device} ({type(e).__name__}: {e}); running unquantized"
        log.warning(reason)
        return QuantReport(mode, "none", plain, reason)
    for parent, name, lin in targets:
        setattr(parent, name, swap(lin))
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    log.info("quantized %d linear layers to %s (%s)", len(targets), mode, kernel)
    return QuantReport(mode, mode, kernel)


def _probe(swap, linear, device: str, dtype) -> None:
    """One forward of a quantized copy: a kernel that cannot run fails here, not on a job."""
    import torch

    q = swap(linear)
    x = torch.randn(3, linear.in_features, device=device, dtype=dtype)
    with torch.inference_mode():
        y = q(x)
    if not torch.isfinite(y).all():
        raise RuntimeError("quantized probe produced non-finite output")
    del q
