"""What the waveform alone says: where the speech is (leading, trailing and inner silences), how
much of it is clipped, and whether it is speech-like at all."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FRAME_S = 0.02
# Speech frames stand above this many dB under the audio's loud frames (its 95th percentile),
# and above an absolute floor: a silent file is not "speech at its own level".
RELATIVE_DB = 35.0
FLOOR_DBFS = -60.0
CLIP_LEVEL = 0.999  # a sample at full scale
CLIP_RUN = 3  # that many in a row: the waveform was cut, not a peak touching 0 dBFS


@dataclass(frozen=True)
class SignalReport:
    seconds: float
    speech_seconds: float  # from the first to the last speech frame
    leading_silence_s: float
    trailing_silence_s: float
    longest_pause_s: float  # the longest run of silence between speech frames
    clipped_share: float  # share of samples in runs at full scale
    active: bool  # any frame above the floor


def analyse(audio: np.ndarray, sample_rate: int) -> SignalReport:
    seconds = audio.size / sample_rate
    frame = max(1, int(FRAME_S * sample_rate))
    n = audio.size // frame
    if n == 0:
        return SignalReport(seconds, 0.0, seconds, 0.0, 0.0, 0.0, False)
    frames = audio[: n * frame].astype(np.float64).reshape(n, frame)
    level = 10 * np.log10(np.mean(frames**2, axis=1) + 1e-12)
    loud = float(np.percentile(level, 95))
    speech = level > max(FLOOR_DBFS, loud - RELATIVE_DB)
    if not speech.any():
        return SignalReport(seconds, 0.0, seconds, 0.0, 0.0, _clipped(audio), False)
    where = np.flatnonzero(speech)
    first, last = int(where[0]), int(where[-1])
    return SignalReport(
        seconds=seconds,
        speech_seconds=(last - first + 1) * FRAME_S,
        leading_silence_s=first * FRAME_S,
        trailing_silence_s=seconds - (last + 1) * FRAME_S,
        longest_pause_s=_longest_gap(where) * FRAME_S,
        clipped_share=_clipped(audio),
        active=True,
    )


def _longest_gap(speech_frames: np.ndarray) -> int:
    gaps = np.diff(speech_frames) - 1
    return int(gaps.max()) if gaps.size else 0


def _clipped(audio: np.ndarray) -> float:
    at_full = np.abs(audio) >= CLIP_LEVEL
    if not at_full.any():
        return 0.0
    # Runs of full-scale samples: starts and ends of each run of True.
    edges = np.diff(np.concatenate([[0], at_full.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    runs = ends - starts
    return float(runs[runs >= CLIP_RUN].sum() / audio.size)
