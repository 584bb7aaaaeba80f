"""The SNAC 24 kHz codec: loading from a folder or hub id, and batched window decoding.

SNAC's decoder adds noise (``NoiseBlock``: ``x + randn * conv(x)``) from the global generator, so
the same codes decode differently each call. We swap each NoiseBlock for one that draws the same
distribution from ``rng.normal`` keyed per window (job seed, window start): a window's audio is then a
pure function of its codes and key, independent of batch and call order. That is what makes a job
reproducible and streamed chunks identical to a one-shot decode.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

import numpy as np

from pipeline.constants import SNAC_SAMPLE_RATE, SNAC_SAMPLES_PER_FRAME
from pipeline.engines.orpheus.codec.codes import frames_to_levels
from pipeline.engines.orpheus.fallbacks import fall_back
from pipeline.errors import EngineUnavailableError

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

DEFAULT_CODEC = "hubertsiuzdak/snac_24khz"
CODEC_DTYPES = ("auto", "float32", "float16", "bfloat16")
# "auto" takes fp16 on CUDA where the checkpoint passes a check at load (``SnacCodec._half_check``):
# on random codes, every activation of the fp32 decode stays HALF_HEADROOM times below fp16's
# largest value, and the fp16 decode's audio stands HALF_MIN_SNR_DB or more from the fp32 one's.
HALF_HEADROOM = 16
HALF_MIN_SNR_DB = 45.0
HALF_CHECK_WINDOWS, HALF_CHECK_FRAMES = 8, 19  # a batch call's window (16 frames + 3 of context)
EAGER_WINDOWS = 64  # the most windows one eager decode takes: the largest graph's (graphs.py)


def snr_db(got: np.ndarray, want: np.ndarray) -> float:
    """10 log10 of the reference's energy over the difference's (inf where they are equal; nan or
    -inf where ``got`` is not finite)."""
    noise = float(np.sum((got.astype(np.float64) - want) ** 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        return float("inf") if noise == 0 else float(10 * np.log10(float(np.sum(want.astype(np.float64) ** 2)) / noise))


class _NoiseKeys(threading.local):
    """The keys of the windows an eager decode (or a graph capture) is running: torch int64
    [B, 1, 1], None between calls. Per thread: the codec's two lanes decode at the same time."""

    value: torch.Tensor | None = None


def _keyed_noise_block(block, keys: _NoiseKeys, salt: int):
    import torch

    from pipeline.engines.orpheus import rng
    from pipeline.engines.orpheus.kernels import codec as codec_kernels

    class KeyedNoiseBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = block.linear
            self.fused = False  # the noise in one kernel and one addcmul (fuse_kernels)

        def forward(self, x):  # x: [B, C, T]
            key = keys.value
            assert key is not None  # set for the length of a decode (decode_windows)
            if self.fused:
                noise = codec_kernels.keyed_normal(key.view(-1), salt << 20, x.shape[-1])
                return torch.addcmul(x, noise.to(x.dtype), self.linear(x))
            t = torch.arange(x.shape[-1], device=x.device, dtype=torch.int64) + (salt << 20)
            noise = rng.normal(key, t.view(1, 1, -1)).to(x.dtype)  # [B, 1, T]
            return x + noise * self.linear(x)

    return KeyedNoiseBlock()


class SnacCodec:
    """Decodes batches of equal-length windows of frames into audio on one device."""

    def __init__(
        self,
        model,
        device: str,
        fold: bool = True,
        fuse: bool | None = None,
        fallbacks: list[str] | None = None,
        dtype: str = "float32",
    ):
        """``fuse``: the decoder's residual units and noise as Triton kernels (kernels/codec.py);
        None: where they can run (CUDA with Triton). ``fallbacks``: where the kernels say why
        they fell back (fallbacks.py). ``dtype``: the activations' (and the module's weights')
        dtype, one of CODEC_DTYPES; the fused units keep fp32 weights and fp32 arithmetic.
        "auto": float16 on CUDA where the checkpoint passes the check at load, else float32."""
        self.fallbacks = [] if fallbacks is None else fallbacks
        self.device = device
        self.half_check: dict | None = None  # dtype "auto" on CUDA: what the fp16 check found
        self.model = model.eval().to(device)
        self._keys = _NoiseKeys()
        self._cuda_streams = None
        if str(device).startswith("cuda"):
            import torch

            # The lanes' streams: normal priority, and the highest for the realtime lane (a
            # priority below the device's range is mapped to its highest: torch's Stream docs).
            self._cuda_streams = (torch.cuda.Stream(device), torch.cuda.Stream(device, priority=-100))
        self.graphs: dict = {}  # urgent (realtime lane) -> that lane's CodecGraphs
        self.eager = {True: [0, 0], False: [0, 0]}  # urgent -> [eager calls, their windows]
        self.keyed_noise_blocks = self._swap_noise_blocks()
        self.folded_weight_norms = fold_weight_norms(self.model) if fold else 0
        self.fused_units = 0
        if dtype not in CODEC_DTYPES:
            raise ValueError(f"codec dtype {dtype!r}: choose from {', '.join(CODEC_DTYPES)}")
        if self.model.sampling_rate != SNAC_SAMPLE_RATE:
            raise EngineUnavailableError(
                f"codec samples at {self.model.sampling_rate} Hz; Orpheus needs {SNAC_SAMPLE_RATE}"
            )
        self.dtype = "float32" if dtype == "auto" else dtype
        if fold and (fuse if fuse is not None else _fuse_by_default(device)):
            self._fuse_kernels()
        if dtype == "auto" and str(device).startswith("cuda"):
            self._to_half_if_it_holds()
        elif self.dtype != "float32":
            import torch

            self.model.to(getattr(torch, self.dtype))

    def _fuse_kernels(self) -> None:
        """Swap in the fused residual units and noise; kernels that fail a first call on this
        device are logged, and the module's own ops stay."""
        import torch

        from pipeline.engines.orpheus.kernels import codec as codec_kernels

        try:
            with torch.inference_mode():
                one = torch.ones(64, device=self.device)
                for dtype in {"float32", self.dtype}:
                    x = torch.ones((1, 64, 8), device=self.device, dtype=getattr(torch, dtype))
                    h = codec_kernels.snake_dw_snake(x, one, torch.ones(64 * 7, device=self.device), one, one, 1)
                    codec_kernels.pointwise_residual(torch.ones((64, 64), device=self.device), h, one, x)
                codec_kernels.keyed_normal(torch.zeros(1, dtype=torch.int64, device=self.device), 0, 8)
        except Exception as e:  # noqa: BLE001 - any failure means "the module's ops, say why"
            fall_back(self.fallbacks, "fused codec kernels", e, "the codec runs its own ops")
            return
        self.fused_units = codec_kernels.fuse_codec(self.model.decoder)
        for module in self.model.decoder.modules():
            if hasattr(module, "fused"):
                module.fused = True

    def _to_half_if_it_holds(self) -> None:
        """Run in fp16 if this checkpoint passes ``_half_check``; else stay fp32 and say why."""
        import torch

        saved = {name: t.detach().clone() for name, t in self.model.state_dict().items()}
        eager = {lane: list(counts) for lane, counts in self.eager.items()}
        try:
            self.half_check = self._half_check()
        except Exception as e:  # noqa: BLE001 - any failure means "fp32, say why"
            self.half_check = {"error": f"{type(e).__name__}: {e}"}
        finally:
            self.eager = eager  # the check's decodes are not the lanes'
        why = self.half_check.get("error") or self._half_refusal(self.half_check)
        if why is None:
            self.dtype = "float16"
            return
        self.model.to(torch.float32)
        self.model.load_state_dict(saved)  # the fp32 weights, not their fp16 roundings
        fall_back(self.fallbacks, "the codec in float16", ValueError(why), "the codec runs in float32")

    @staticmethod
    def _half_refusal(check: dict) -> str | None:
        if not check["headroom"] >= HALF_HEADROOM:
            return f"an activation reaches {check['peak']:.4g}, within {HALF_HEADROOM}x of fp16's largest value"
        if not check["snr_db"] >= HALF_MIN_SNR_DB:
            return f"its audio stands {check['snr_db']:.1f} dB from fp32's, under {HALF_MIN_SNR_DB:g} dB"
        return None

    def _half_check(self) -> dict:
        """Decode random codes in fp32, noting each module's largest output (and each fused
        residual unit's inner activation), then in fp16; leaves the model in fp16. Returns the
        peak activation, its headroom under fp16's largest value, and the fp16 audio's
        signal-to-difference ratio (dB) against the fp32 audio."""
        import torch

        rng = np.random.default_rng(0)
        frames = rng.integers(0, 4096, size=(HALF_CHECK_WINDOWS, HALF_CHECK_FRAMES, 7))
        codes = [torch.as_tensor(level, device=self.device) for level in frames_to_levels(frames)]
        keys = torch.as_tensor(rng.integers(0, 2**40, size=HALF_CHECK_WINDOWS), device=self.device)
        peaks: list = []

        def note(_module, _inputs, out) -> None:
            if isinstance(out, torch.Tensor) and out.is_floating_point():
                peaks.append(out.detach().abs().amax())

        modules = list(self.model.modules())
        hooks = [m.register_forward_hook(note) for m in modules]
        inner = [m for m in modules if hasattr(m, "peaks")]  # fused units: their inner activation
        for unit in inner:
            unit.peaks = peaks
        try:
            want = self._decode_eagerly(codes, keys, False).float()
        finally:
            for hook in hooks:
                hook.remove()
            for unit in inner:
                unit.peaks = None
        self.model.to(torch.float16)
        got = self._decode_eagerly(codes, keys, False).float()
        peak = float(torch.stack(peaks).max()) if peaks else 0.0
        return {
            "peak": peak,
            "headroom": float(torch.finfo(torch.float16).max) / peak if peak > 0 else float("inf"),
            "snr_db": snr_db(got.cpu().numpy(), want.cpu().numpy()),
        }

    def _swap_noise_blocks(self) -> int:
        from snac.layers import NoiseBlock

        swapped = 0
        for parent in list(self.model.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, NoiseBlock):
                    parent._modules[name] = _keyed_noise_block(child, self._keys, swapped)
                    swapped += 1
        return swapped

    def decode_windows(self, frames: np.ndarray, keys: np.ndarray, urgent: bool = False) -> np.ndarray:
        """frames [B, w, 7] int codes, keys [B] ints -> audio [B, w * 2048] float32. ``urgent``
        (the realtime lane): on a high-priority stream, whose kernels the GPU schedules ahead of
        the language model's step, with that lane's graphs. The two lanes may call at once, from
        their own threads; calls of one lane never overlap."""
        import torch

        # On the GPU the codec has its own streams, so it runs beside the language model's step.
        with self._stream(urgent):
            l0, l1, l2 = frames_to_levels(frames)
            codes = [torch.as_tensor(level, device=self.device) for level in (l0, l1, l2)]
            key_t = torch.as_tensor(np.asarray(keys, dtype=np.int64), device=self.device)
            graphs = self.graphs.get(urgent)
            audio = graphs.decode(codes, key_t) if graphs else None
            if audio is None:
                audio = self._decode_eagerly(codes, key_t, urgent)
            expected = frames.shape[1] * SNAC_SAMPLES_PER_FRAME
            return audio[:, 0, :expected].float().cpu().numpy()

    def _decode_eagerly(self, codes: list, key_t, urgent: bool):
        """The module's own decode, in calls of at most ``EAGER_WINDOWS`` windows: a lane's round
        may hold hundreds (a batch starting at once), and one call's activations grow with them."""
        import torch

        parts = []
        for start in range(0, len(key_t), EAGER_WINDOWS):
            part = slice(start, start + EAGER_WINDOWS)
            self.eager[urgent][0] += 1
            self.eager[urgent][1] += len(key_t[part])
            self._keys.value = key_t[part].view(-1, 1, 1)
            try:
                with torch.inference_mode():
                    parts.append(self.model.decode([c[part] for c in codes]))  # [B, 1, w * 2048]
            finally:
                self._keys.value = None
        return torch.cat(parts) if len(parts) > 1 else parts[0]

    def capture_graphs(self, realtime: tuple[int, ...], batch: tuple[int, ...], fallbacks: list[str]) -> None:
        """Capture the decode for these window lengths of each lane (CUDA only): each lane its
        own graphs, so their static buffers are never shared. A lane whose capture fails says
        why in ``fallbacks`` and decodes eagerly."""
        if not str(self.device).startswith("cuda"):
            return
        from pipeline.engines.orpheus.codec.graphs import CodecGraphs

        self.graphs = {}
        for urgent, windows in ((True, realtime), (False, batch)):
            with self._stream(urgent):
                graphs = CodecGraphs(self.model, self._keys, self.device, windows, fallbacks)
            if graphs.graphs:
                self.graphs[urgent] = graphs

    def lane_counts(self, urgent: bool) -> dict:
        """A lane's running totals: graph replays, the padding windows they decoded, and the
        eager calls (window lengths with no graph) and their windows."""
        graphs = self.graphs.get(urgent)
        return {
            "replays": graphs.replays if graphs else 0,
            "padded_windows": graphs.padded_windows if graphs else 0,
            "eager_calls": self.eager[urgent][0],
            "eager_windows": self.eager[urgent][1],
        }

    @property
    def graph_count(self) -> int:
        return sum(len(g.graphs) for g in self.graphs.values())

    def _stream(self, urgent: bool = False):
        """The codec's CUDA stream of a lane: normal priority, or the highest for ``urgent``."""
        import contextlib

        import torch

        if self._cuda_streams is None:
            return contextlib.nullcontext()
        return torch.cuda.stream(self._cuda_streams[urgent])


def _fuse_by_default(device: str) -> bool:
    from pipeline.engines.orpheus.kernels import codec as codec_kernels

    return codec_kernels.available(device)


def fold_weight_norms(model) -> int:
    """SNAC's convolutions are weight-normed (a parametrization): every forward recomputes each
    weight as g * v / |v|, a kernel per convolution per call, device time spent on every codec
    call for nothing. For inference the weights are fixed, so compute them once: the
    same arithmetic, the same weights, the same audio. Returns how many were folded."""
    from torch.nn.utils import parametrize

    folded = 0
    for module in model.modules():
        if parametrize.is_parametrized(module, "weight"):
            parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
            folded += 1
    return folded


def load_codec(
    name_or_path: str | None,
    device: str,
    fuse: bool | None = None,
    fallbacks: list[str] | None = None,
    origin: str = "SYNTH_CODEC",
    dtype: str = "float32",
) -> SnacCodec:
    """SNAC from a local folder (config.json + pytorch_model.bin) or a hub id; ``fuse``,
    ``fallbacks`` and ``dtype`` as ``SnacCodec``'s; ``origin`` says where the name came from, for
    the error."""
    try:
        from snac import SNAC
    except ImportError as e:
        raise EngineUnavailableError("the Orpheus engine needs the snac package") from e
    source = name_or_path or DEFAULT_CODEC
    try:
        model = SNAC.from_pretrained(source)
    except Exception as e:  # hub, file and state-dict errors all mean "no codec"
        # The hub's and snac's own words (a bad repo id, no connection) never name the setting.
        reason = " ".join(str(e).split()).rstrip(".")
        raise EngineUnavailableError(
            f"cannot load the SNAC codec {source!r} ({origin}): {reason}; set SYNTH_CODEC to a local "
            "SNAC folder (config.json and pytorch_model.bin) or a hub id"
        ) from e
    log.info("loaded SNAC codec %s on %s", source, device)
    return SnacCodec(model, device, fuse=fuse, fallbacks=fallbacks, dtype=dtype)
