"""SNAC's decoder in fewer passes: its residual units and keyed noise as Triton kernels.

A SNAC 24 kHz decode call is about 420 kernels, most of them elementwise over [windows, channels,
samples] in fp32: each residual unit is Snake -> dilated depthwise convolution (7 taps) -> Snake
-> pointwise convolution -> + the unit's input, five kernels and eleven passes over memory, and
each noise block draws its noise through some thirty small integer kernels (rng.normal). So the
codec takes a large share of the device time of a batch workload, and with streams beside batch
work its realtime windows, many small calls at the highest priority, stretch every step of the
language model beside them.

Here a residual unit is two kernels: ``snake_dw_snake`` (one pass: it reads the input, applies the
first Snake to each of the seven taps it needs, convolves, adds the bias and applies the second
Snake), then ``pointwise_residual``, the pointwise convolution as a GEMM whose epilogue adds the
bias and the unit's input. A noise block's noise is one kernel (``keyed_normal``): about 100
kernels a call in all. The arithmetic
is the module's: Snake as SNAC computes it (``x + 1/(alpha + 1e-9) * sin(alpha x)^2``, with
libdevice's sine, not the approximate one), zero padding at the edges (Snake maps 0 to 0, so
padding before it or after it is the same), the pointwise GEMM in TF32 as cuDNN runs the module's
convolutions, the same counter-based noise (rng.py: the same integers; the floats to rounding).

Why our own GEMM and not cuBLAS (``torch.baddbmm``, the first version): PyTorch keys cuBLAS
workspaces by (handle, stream), graphs are captured on pool streams that repeat after 32
(pytorch#193402), and the codec's lanes replay their graphs beside the language model's. The fp32
``baddbmm`` hung the device during a long batch workload in every run (SIMT kernels, presumably
split-K over a shared workspace; the module's own TF32 GEMMs never did); with no cuBLAS call in
the codec's graphs nothing is shared.

With bf16 activations (``SnacCodec(dtype="bfloat16")``, ``SYNTH_CODEC_DTYPE``) the kernels read
and write bf16, half the bytes, and keep fp32 weights and fp32 arithmetic between; the pointwise
GEMM takes bf16 products with fp32 sums.

``fuse_codec(decoder)`` swaps each ResidualUnit of a SNAC decoder for a ``FusedResidualUnit``,
after the weight norms are folded (codec/snac.py). On the CPU nothing is swapped: the module's own
ops run.
"""

from __future__ import annotations

import torch

from pipeline.engines.orpheus import rng

try:
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:  # the CPU install has no Triton: the modules' own ops run
    triton = None

SNAKE_EPS = 1e-9  # snac.layers.snake: 1 / (alpha + 1e-9)


def snake_ref(x, alpha):
    """snac.layers.snake: x + 1/(alpha + 1e-9) * sin(alpha x)^2; alpha [1, C, 1]."""
    return x + (alpha + SNAKE_EPS).reciprocal() * torch.sin(alpha * x).pow(2)


def snake_dw_snake_ref(x, alpha1, dw_w, dw_b, alpha2, dilation: int):
    """The first three layers of a residual unit: x [B, C, T] -> snake(dwconv(snake(x)))."""
    k = dw_w.shape[-1]
    h = torch.nn.functional.conv1d(
        snake_ref(x, alpha1), dw_w, dw_b, padding=(k - 1) * dilation // 2, dilation=dilation, groups=x.shape[1]
    )
    return snake_ref(h, alpha2)


def pointwise_residual_ref(w, h, bias, x):
    """The last layer and the residual: x + conv1x1(h) = x + bias + W h; w [C, C], h, x
    [B, C, T]."""
    return x + torch.nn.functional.conv1d(h, w.unsqueeze(-1), bias)


def keyed_normal_ref(keys, start: int, length: int):
    """rng.normal for window keys [B] (int64) at counters start .. start + length - 1: [B, 1, T]."""
    t = torch.arange(length, device=keys.device, dtype=torch.int64) + start
    return rng.normal(keys.view(-1, 1, 1), t.view(1, 1, -1))


if triton is not None:
    # LIBDEVICE (a constexpr): libdevice's correctly range-reduced functions on the GPU; Triton's
    # interpreter runs only triton.language's own (numpy's), so the tests take those.
    @triton.jit
    def _sin(x, LIBDEVICE: tl.constexpr):
        if LIBDEVICE:
            return libdevice.sin(x)
        else:
            return tl.sin(x)

    @triton.jit
    def _snake(x, alpha, inv, LIBDEVICE: tl.constexpr):
        s = _sin(alpha * x, LIBDEVICE)
        return x + inv * (s * s)

    @triton.jit
    def _snake_dw_snake_kernel(
        x_ptr,
        h_ptr,
        a1_ptr,
        w_ptr,
        wb_ptr,
        a2_ptr,
        T,
        C,
        DIL: tl.constexpr,
        K: tl.constexpr,
        BLOCK: tl.constexpr,
        LIBDEVICE: tl.constexpr,
    ):
        """Program (row b * C + c, block of samples); x, h contiguous [B, C, T]."""
        row = tl.program_id(0).to(tl.int64)
        c = row % C
        t = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        live = t < T
        base = row * T
        a1 = tl.load(a1_ptr + c)
        inv1 = 1.0 / (a1 + 1e-9)
        acc = tl.zeros([BLOCK], tl.float32)
        for k in tl.static_range(K):
            tt = t + (k - K // 2) * DIL
            inside = (tt >= 0) & (tt < T)
            xv = tl.load(x_ptr + base + tt, mask=inside, other=0.0).to(tl.float32)
            acc += tl.load(w_ptr + c * K + k) * _snake(xv, a1, inv1, LIBDEVICE)  # snake(0) = 0
        acc += tl.load(wb_ptr + c)
        a2 = tl.load(a2_ptr + c)
        h = _snake(acc, a2, 1.0 / (a2 + 1e-9), LIBDEVICE)
        tl.store(h_ptr + base + t, h.to(h_ptr.dtype.element_ty), mask=live)

    @triton.jit
    def _pointwise_residual_kernel(
        w_ptr,
        h_ptr,
        b_ptr,
        x_ptr,
        o_ptr,
        C,
        T,
        BM: tl.constexpr,
        BN: tl.constexpr,
        BK: tl.constexpr,
        TF32: tl.constexpr,
        COMPILED: tl.constexpr,
    ):
        """Program (block of output channels, block of samples, window): o = x + bias + W h over
        contiguous [B, C, T]; W [C, C] row-major."""
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        base = tl.program_id(2).to(tl.int64) * C * T
        rk = tl.arange(0, BK)
        acc = tl.zeros([BM, BN], tl.float32)
        for k0 in range(0, C, BK):
            kk = k0 + rk
            a = tl.load(
                w_ptr + rm[:, None] * C + kk[None, :], mask=(rm[:, None] < C) & (kk[None, :] < C), other=0.0
            )  # [BM, BK]
            b = tl.load(
                h_ptr + base + kk[:, None] * T + rn[None, :], mask=(kk[:, None] < C) & (rn[None, :] < T), other=0.0
            )  # [BK, BN]
            if h_ptr.dtype.element_ty != tl.float32 and COMPILED:  # bf16 activations: bf16 products
                acc = tl.dot(a.to(b.dtype), b, acc)
            elif h_ptr.dtype.element_ty != tl.float32:  # the interpreter's dot has no bf16 products
                acc = tl.dot(a, b.to(tl.float32), acc, input_precision="ieee")
            elif TF32:
                acc = tl.dot(a, b, acc, input_precision="tf32")
            else:
                acc = tl.dot(a, b, acc, input_precision="ieee")
        out = base + rm[:, None] * T + rn[None, :]
        live = (rm[:, None] < C) & (rn[None, :] < T)
        x = tl.load(x_ptr + out, mask=live, other=0.0).to(tl.float32)
        bias = tl.load(b_ptr + rm, mask=rm < C, other=0.0)
        tl.store(o_ptr + out, (x + bias[:, None] + acc).to(o_ptr.dtype.element_ty), mask=live)

    @triton.jit
    def _hash32(x):
        # rng.hash32 on uint32 (its int64 products, masked to 32 bits, are these wrapping ones)
        x = x ^ (x >> 16)
        x = x * 0x7FEB352D
        x = x ^ (x >> 15)
        x = x * 0x2C1B3C6D
        return x ^ (x >> 16)

    @triton.jit
    def _uniform(h, counter):
        x = _hash32(h + counter * 0x9E3779B1)
        return ((x >> 9).to(tl.float32) + 0.5) * (1.0 / 8388608.0)

    @triton.jit
    def _keyed_normal_kernel(keys_ptr, out_ptr, start, T, BLOCK: tl.constexpr, LIBDEVICE: tl.constexpr):
        """Program (window b, block of counters): out [B, T] fp32."""
        b = tl.program_id(0).to(tl.int64)
        t = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        key = (tl.load(keys_ptr + b) & 0xFFFFFFFF).to(tl.uint32)
        h = _hash32(key)
        counter = (t + start).to(tl.uint32)
        u1 = _uniform(h, counter * 2)
        u2 = _uniform(h, counter * 2 + 1)
        if LIBDEVICE:
            n = libdevice.sqrt(-2.0 * libdevice.log(u1)) * libdevice.cos(6.283185307179586 * u2)
        else:
            n = tl.sqrt(-2.0 * tl.log(u1)) * tl.cos(6.283185307179586 * u2)
        tl.store(out_ptr + b * T + t, n, mask=t < T)


SNAKE_BLOCK = 512
NOISE_BLOCK = 1024


def available(device) -> bool:
    return triton is not None and str(device).startswith("cuda")


def _libdevice(kernel) -> bool:
    """Whether ``kernel`` is compiled for the GPU, which has libdevice's functions and TF32;
    Triton's interpreter (``TRITON_INTERPRET=1``, the CPU tests) has neither. Triton decided
    which when ``@triton.jit`` made the kernel, so the kernel itself is asked."""
    return not isinstance(kernel, InterpretedFunction)


def snake_dw_snake(x, alpha1, dw_w, dw_b, alpha2, dilation: int):
    """``snake_dw_snake_ref`` in one Triton pass. x [B, C, T] contiguous, fp32 or bf16 (the
    arithmetic in fp32, h in x's dtype); alpha1, alpha2,
    dw_b [C]; dw_w [C * K] (the depthwise taps, channel-major)."""
    b, c, t = x.shape
    h = torch.empty_like(x)
    k = dw_w.numel() // c
    _snake_dw_snake_kernel[(b * c, triton.cdiv(t, SNAKE_BLOCK))](
        x,
        h,
        alpha1,
        dw_w,
        dw_b,
        alpha2,
        t,
        c,
        DIL=dilation,
        K=k,
        BLOCK=SNAKE_BLOCK,
        LIBDEVICE=_libdevice(_snake_dw_snake_kernel),
        num_warps=4,
    )
    return h


# (output channels, samples, reduction) per program; SNAC's widths (64 .. 512) are multiples of BK
POINTWISE_TILE = (64, 128, 32)


def pointwise_residual(w, h, bias, x, tf32: bool = True):
    """``pointwise_residual_ref`` as one Triton GEMM with the bias and residual in its epilogue.
    ``tf32``: the products in TF32, as cuDNN runs the module's convolutions; else in fp32. bf16
    activations (``SnacCodec(dtype=...)``) take bf16 products, fp32 sums and a bf16 result."""
    b, c, t = h.shape
    out = torch.empty_like(x)
    bm, bn, bk = POINTWISE_TILE
    _pointwise_residual_kernel[(triton.cdiv(c, bm), triton.cdiv(t, bn), b)](
        w,
        h,
        bias,
        x,
        out,
        c,
        t,
        BM=bm,
        BN=bn,
        BK=bk,
        TF32=tf32 and _libdevice(_pointwise_residual_kernel),
        COMPILED=_libdevice(_pointwise_residual_kernel),
        num_warps=4,
        num_stages=3,
    )
    return out


def keyed_normal(keys, start: int, length: int):
    """``keyed_normal_ref`` in one Triton kernel: [B, 1, T] fp32."""
    b = keys.shape[0]
    out = torch.empty((b, 1, length), dtype=torch.float32, device=keys.device)
    _keyed_normal_kernel[(b, triton.cdiv(length, NOISE_BLOCK))](
        keys, out, start, length, BLOCK=NOISE_BLOCK, LIBDEVICE=_libdevice(_keyed_normal_kernel), num_warps=4
    )
    return out


class FusedResidualUnit(torch.nn.Module):
    """A SNAC ResidualUnit (depthwise, weight norms folded) as two kernels: ``snake_dw_snake`` and
    ``pointwise_residual``. ``use_triton=False`` runs the same computation in torch ops (the
    reference the checks compare with)."""

    def __init__(self, unit, use_triton: bool = True):
        super().__init__()
        snake1, dw, snake2, pw = unit.block
        if (
            dw.groups != dw.in_channels
            or pw.kernel_size != (1,)
            or dw.padding[0] * 2 != (dw.kernel_size[0] - 1) * dw.dilation[0]
        ):
            raise ValueError("not a depthwise SNAC residual unit with 'same' padding")
        c = dw.in_channels
        flat = lambda p: p.detach().reshape(-1).contiguous().float()  # noqa: E731
        self.alpha1, self.alpha2 = flat(snake1.alpha), flat(snake2.alpha)
        self.dw_w, self.dw_b = flat(dw.weight), flat(dw.bias)  # [C * K], [C]
        self.pw_w = pw.weight.detach().reshape(c, c).float().contiguous()  # [C_out, C_in]
        self.pw_b = flat(pw.bias)
        self.dilation = dw.dilation[0]
        self.use_triton = use_triton
        # A list while the codec checks a checkpoint's range (codec/snac.py ``_half_check``): each
        # call adds the largest |value| of the unit's inner activation, which no module returns.
        self.peaks: list | None = None

    def forward(self, x):  # [B, C, T]
        c = x.shape[1]
        if self.use_triton:
            x = x.contiguous()
            h = snake_dw_snake(x, self.alpha1, self.dw_w, self.dw_b, self.alpha2, self.dilation)
            if self.peaks is not None:
                self.peaks.append(h.abs().amax())
            return pointwise_residual(self.pw_w, h, self.pw_b, x)
        x32 = x.float()  # the parameters stay fp32, as the kernels read them
        h = snake_dw_snake_ref(
            x32,
            self.alpha1.view(1, -1, 1),
            self.dw_w.view(c, 1, -1),
            self.dw_b,
            self.alpha2.view(1, -1, 1),
            self.dilation,
        )
        if self.peaks is not None:
            self.peaks.append(h.abs().amax())
        return pointwise_residual_ref(self.pw_w, h.to(x.dtype).float(), self.pw_b, x32).to(x.dtype)


def fuse_codec(model, use_triton: bool = True) -> int:
    """Swap every depthwise ResidualUnit of ``model`` (a SNAC decoder) for a FusedResidualUnit;
    returns how many. Run after the weight norms are folded (codec.fold_weight_norms)."""
    from snac.layers import ResidualUnit

    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, ResidualUnit):
                try:
                    parent._modules[name] = FusedResidualUnit(child, use_triton)
                except ValueError:
                    continue  # a unit of another shape keeps its own ops
                swapped += 1
    return swapped
