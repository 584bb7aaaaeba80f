"""Loudness: every job's integrated loudness and true peak (ITU-R BS.1770-4 / EBU R128), and a
batch's audio levelled to a target under a true-peak ceiling.

The meter is pyloudnorm's BS.1770-4 gated integrated loudness; the true peak is the sample peak
of the signal oversampled four times (BS.1770-4 Annex 2), by scipy's polyphase resampler. The
limiter that keeps a levelled job under its ceiling is ffmpeg's ``alimiter`` run at four times the
rate, so what it holds down is the true peak, not only the samples. Nothing here writes its own
filter or gate.
"""

from __future__ import annotations

import math
import subprocess
from dataclasses import dataclass
from functools import cache

import numpy as np

from pipeline.errors import InputError, PermanentError

# The most common delivery target for spoken word (Apple Podcasts, Spotify and Amazon's ACX call for
# -16 to -20 LUFS) and EBU R128's true-peak ceiling for a lossless master.
DEFAULT_CEILING_DBTP = -1.0
# A lossy encoder (mp3, Opus) rebuilds peaks up to about a decibel over its input's (AES TD1004):
# levelled audio bound for one gets this much more headroom, so the delivered file stays under.
LOSSY_HEADROOM_DB = 1.0
LOUDNESS_RANGE = (-70.0, -5.0)  # LUFS a target may take
CEILING_RANGE = (-20.0, 0.0)  # dBTP a ceiling may take
OVERSAMPLE = 4
# BS.1770's gate needs one 400 ms block; shorter audio has no integrated loudness.
MIN_SECONDS = 0.4
_TOLERANCE_LU = 0.05
_PASSES = 5
# The limiter's output, brought back to the job's rate, peaks up to a few hundredths of a decibel
# over its limit: it aims this far under the ceiling.
LIMITER_MARGIN_DB = 0.15
# Limiting more than this beyond the plain gain audibly flattens speech.
MAX_EXTRA_GAIN_DB = 6.0


@dataclass(frozen=True)
class Level:
    lufs: float | None  # integrated loudness; None: too short or silent to measure
    true_peak_dbtp: float | None


def measure(audio: np.ndarray, sample_rate: int) -> Level:
    """The integrated loudness and true peak of float32 mono audio."""
    return Level(integrated(audio, sample_rate), true_peak(audio))


def true_peak(audio: np.ndarray) -> float | None:
    """The peak of ``audio`` oversampled OVERSAMPLE times through resample_poly's filter.

    The meter runs on every job in the worker's hot path, where oversampling all of a job cost
    more CPU than the rest of the meter. So only the neighbourhoods of the loudest samples are
    oversampled: a value between samples is a weighted sum of the samples within the filter's
    reach, and can pass the sample peak only near a sample of at least ``peak / gain`` (``gain``:
    the largest sum of one phase's absolute taps). On speech that is a small share of the samples;
    on noise-like audio most of it, and the whole signal goes through resample_poly instead."""
    if audio.size == 0:
        return None
    size = np.abs(audio)
    sample_peak = float(size.max())
    if sample_peak == 0:
        return None
    phases, gain = _polyphase()
    reach = (phases.shape[0] - 1) // 2
    near = _near(size >= sample_peak / gain, reach)
    if near.size > _FULL_SHARE * audio.size:
        from scipy.signal import resample_poly

        return _db(float(np.max(np.abs(resample_poly(audio.astype(np.float64), OVERSAMPLE, 1)))))
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(audio.astype(np.float32), reach), 2 * reach + 1)
    # einsum, not a matrix product: BLAS would start a thread per core and spin them between jobs.
    return _db(float(np.max(np.abs(np.einsum("ij,jk->ik", windows[near], phases)))))


# Past this share of samples to oversample, the whole-signal resampler costs less.
_FULL_SHARE = 0.3


def _near(loud: np.ndarray, reach: int) -> np.ndarray:
    """Indices within ``reach`` of a True in ``loud``."""
    counts = np.concatenate([[0], np.cumsum(loud, dtype=np.int64)])
    idx = np.arange(loud.size)
    hi = np.minimum(idx + reach + 1, loud.size)
    lo = np.maximum(idx - reach, 0)
    return np.flatnonzero(counts[hi] > counts[lo])


@cache
def _polyphase() -> tuple[np.ndarray, float]:
    """resample_poly's own filter for OVERSAMPLE (Kaiser, beta 5, 2 * 10 * up + 1 taps) as a
    [2 * reach + 1, OVERSAMPLE] matrix: a window of samples centred on sample ``m`` times it gives
    the oversampled values at ``m``, ``m + 1/4``, ... exactly as resample_poly computes them.
    Also the most one phase can gain over its largest input."""
    from scipy.signal import firwin

    half = 10 * OVERSAMPLE
    taps = firwin(2 * half + 1, 1.0 / OVERSAMPLE, window=("kaiser", 5.0)) * OVERSAMPLE
    reach = half // OVERSAMPLE
    # out[OVERSAMPLE*m + k] = sum_i x[i] * taps[OVERSAMPLE*(m - i) + k + half]; window index j is
    # sample m - reach + j.
    phases = np.zeros((2 * reach + 1, OVERSAMPLE))
    for j in range(2 * reach + 1):
        for k in range(OVERSAMPLE):
            t = OVERSAMPLE * (reach - j) + k + half
            if 0 <= t < taps.size:
                phases[j, k] = taps[t]
    # float32 products: the figure is reported in hundredths of a decibel, far above their rounding.
    return phases.astype(np.float32), float(np.abs(phases).sum(axis=0).max())


def level(audio: np.ndarray, sample_rate: int, target_lufs: float, ceiling_dbtp: float) -> tuple[np.ndarray, Level]:
    """``audio`` at ``target_lufs`` with its true peak at or under ``ceiling_dbtp``: a gain, and
    where the gain would lift a peak past the ceiling, the limiter on the peaks alone. What the
    limiter takes off lowers the loudness, so the gain is searched (secant steps, each from the
    original audio) until the limited result meets the target, within MAX_EXTRA_GAIN_DB of the
    plain gain: past that the peaks would be crushed, and the nearest level is kept. Audio too
    short or quiet to measure is returned as it is. Returns the audio and its level after."""
    before = measure(audio, sample_rate)
    if before.lufs is None:
        return audio, before
    _, out, lufs = _search(audio, sample_rate, before.lufs, before.true_peak_dbtp, target_lufs, ceiling_dbtp)
    return out, Level(lufs, true_peak(out))


def limited_gain(audio: np.ndarray, sample_rate: int, target_lufs: float, ceiling_dbtp: float) -> float | None:
    """The gain, in dB, that level() gives ``audio``, the limiter then holding its peaks under
    ``ceiling_dbtp``; None where it has no loudness. A caller levelling a longer signal of the
    same kind measures on this one (a sample of it) what the limiter costs."""
    before = measure(audio, sample_rate)
    if before.lufs is None:
        return None
    return _search(audio, sample_rate, before.lufs, before.true_peak_dbtp, target_lufs, ceiling_dbtp)[0]


def _search(
    audio: np.ndarray, sample_rate: int, lufs: float, peak: float | None, target_lufs: float, ceiling_dbtp: float
) -> tuple[float, np.ndarray, float | None]:
    """(the gain, the audio levelled by it, its loudness) for ``audio`` of loudness ``lufs`` and
    true peak ``peak``."""
    plain = target_lufs - lufs

    def attempt(gain_db: float) -> tuple[np.ndarray, float | None]:
        gained = audio * np.float32(10 ** (gain_db / 20))
        # A gain moves the true peak by itself: the peak is measured once, before.
        if peak is not None and peak + gain_db > ceiling_dbtp:
            gained = _limit(gained, sample_rate, ceiling_dbtp - LIMITER_MARGIN_DB)
        return gained, integrated(gained, sample_rate)

    gain = plain
    out, now = attempt(plain)
    tried = [(plain, now)]
    for _ in range(_PASSES):
        if now is None or abs(now - target_lufs) <= _TOLERANCE_LU:
            break
        (g0, l0), (g1, l1) = tried[-2] if len(tried) > 1 else (plain - 1.0, now - 1.0), tried[-1]
        assert l1 is not None  # tried[-1] is ``now``, measured: checked above
        slope = (l1 - l0) / (g1 - g0) if g1 != g0 and l0 is not None else 1.0
        gain = min(plain + MAX_EXTRA_GAIN_DB, g1 + (target_lufs - l1) / max(slope, 0.1))
        if gain == g1:
            break
        out, now = attempt(gain)
        tried.append((gain, now))
    return gain, out, now


def ceiling_for(ceiling_dbtp: float, lossy: bool) -> float:
    return ceiling_dbtp - LOSSY_HEADROOM_DB if lossy else ceiling_dbtp


def check_target(lufs: float | None, ceiling_dbtp: float | None) -> None:
    """Refuse a target or ceiling outside what a delivery could ask for (InputError)."""
    if lufs is not None and not (math.isfinite(lufs) and LOUDNESS_RANGE[0] <= lufs <= LOUDNESS_RANGE[1]):
        raise InputError(
            f"a loudness target must be between {LOUDNESS_RANGE[0]:g} and {LOUDNESS_RANGE[1]:g} LUFS, not {lufs}"
        )
    if ceiling_dbtp is not None and not (
        math.isfinite(ceiling_dbtp) and CEILING_RANGE[0] <= ceiling_dbtp <= CEILING_RANGE[1]
    ):
        raise InputError(
            f"a true-peak ceiling must be between {CEILING_RANGE[0]:g} and "
            f"{CEILING_RANGE[1]:g} dBTP, not {ceiling_dbtp}"
        )


def integrated(audio: np.ndarray, sample_rate: int) -> float | None:
    """BS.1770's gated integrated loudness alone: a small share of measure()'s cost, the true peak
    being the rest. pyloudnorm's meter, its K-weighting filters and its blocks and gates, with
    the blocks' mean squares taken at once in numpy: pyloudnorm takes them in a Python loop,
    13,000 of them in a 22-minute chapter, more than half its time, and a document's last chapter
    is metered after its last job, on the way to the finished file (tests/test_loudness.py holds
    the two equal)."""
    if audio.size < MIN_SECONDS * sample_rate:
        return None
    import pyloudnorm

    meter = pyloudnorm.Meter(sample_rate)
    stages = getattr(meter, "_filters", None)
    if not isinstance(stages, dict):  # a pyloudnorm that keeps its filters otherwise
        lufs = meter.integrated_loudness(audio.astype(np.float64))
        return float(lufs) if math.isfinite(lufs) else None
    weighted = audio.astype(np.float64)
    for stage in stages.values():
        weighted = stage.apply_filter(weighted)
    return _gated(weighted, sample_rate, meter.block_size, meter.overlap)


def _gated(weighted: np.ndarray, sample_rate: int, block_s: float, overlap: float) -> float | None:
    """BS.1770's gating of one K-weighted channel, block for block as pyloudnorm (0.1) bounds its
    blocks (the same float expressions, truncated) and gates them: absolute at -70 LUFS, then
    relative at 10 LU under the loudness of the blocks over it."""
    step = 1.0 - overlap
    count = int(np.round((weighted.size / sample_rate - block_s) / (block_s * step))) + 1
    j = np.arange(count, dtype=np.float64)
    lower = np.minimum((block_s * (j * step) * sample_rate).astype(np.int64), weighted.size)
    upper = np.minimum((block_s * (j * step + 1) * sample_rate).astype(np.int64), weighted.size)
    # Summed between every two consecutive bounds at once, then a running sum over those few
    # tens of thousands of sums: each block's sum is a difference of two of them.
    edges = np.unique(np.concatenate((lower, upper, [0, weighted.size])))
    pieces = np.add.reduceat(weighted * weighted, edges[:-1])
    sums = np.concatenate(([0.0], np.cumsum(pieces)))
    z = (sums[np.searchsorted(edges, upper)] - sums[np.searchsorted(edges, lower)]) / (block_s * sample_rate)
    with np.errstate(divide="ignore"):
        block_lufs = -0.691 + 10.0 * np.log10(z)
    loud = block_lufs >= -70.0
    if not loud.any():
        return None
    relative = -0.691 + 10.0 * np.log10(np.mean(z[loud])) - 10.0
    kept = (block_lufs > relative) & (block_lufs > -70.0)
    if not kept.any():
        return None
    lufs = -0.691 + 10.0 * np.log10(np.mean(z[kept]))
    return float(lufs) if math.isfinite(lufs) else None


def limiter_filter(sample_rate: int, ceiling_dbtp: float) -> str:
    """ffmpeg's lookahead limiter at four times the rate (so the peaks it sees are the true peaks),
    its delay compensated and its own make-up gain off, as an ``-af`` chain at ``sample_rate``:
    the audio's timing stays, its length within a sample or two (the resamplers round it)."""
    rate = sample_rate * OVERSAMPLE
    # alimiter's limit floor is -24 dB; a ceiling is at most -20 dBTP (CEILING_RANGE).
    limit = 10 ** (ceiling_dbtp / 20)
    return (
        f"aresample={rate}:filter_size=64,"
        f"alimiter=limit={limit:.6f}:attack=1:release=60:level=false:latency=true,"
        f"aresample={sample_rate}:filter_size=64"
    )


def _limit(audio: np.ndarray, sample_rate: int, ceiling_dbtp: float) -> np.ndarray:
    """limiter_filter() run on ``audio``, its length kept."""
    from pipeline.audio import ffmpeg_exe

    cmd = [
        ffmpeg_exe(),
        "-hide_banner",
        "-loglevel",
        "error",
        "-nostdin",
        "-f",
        "f32le",
        "-ar",
        str(sample_rate),
        "-ac",
        "1",
        "-i",
        "pipe:0",
        "-af",
        limiter_filter(sample_rate, ceiling_dbtp),
        "-f",
        "f32le",
        "-ar",
        str(sample_rate),
        "-ac",
        "1",
        "pipe:1",
    ]
    done = subprocess.run(cmd, input=audio.astype("<f4").tobytes(), capture_output=True, check=False)
    if done.returncode != 0:
        raise PermanentError(f"ffmpeg's limiter failed: {done.stderr.decode(errors='replace').strip()[-300:]}")
    out = np.frombuffer(done.stdout, dtype="<f4").astype(np.float32)
    # The resamplers may round the length by a sample or two; the job's timing is the input's.
    if out.size >= audio.size:
        return out[: audio.size]
    return np.concatenate([out, np.zeros(audio.size - out.size, np.float32)])


def _db(amplitude: float) -> float | None:
    return 20 * math.log10(amplitude) if amplitude > 0 else None
