"""Audio out: joining chunks with a crossfade, resampling, and encoding through pydub + ffmpeg.

ffmpeg comes from the imageio-ffmpeg wheel, so no system package or manual step is needed.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from functools import cache

import numpy as np

from pipeline.formats import get_format


@cache
def _pydub():
    """Import pydub and point it at the ffmpeg binary from imageio-ffmpeg."""
    import imageio_ffmpeg

    with warnings.catch_warnings():  # pydub warns at import when no ffmpeg is on PATH: we bring ours
        warnings.simplefilter("ignore", RuntimeWarning)
        from pydub import AudioSegment
    AudioSegment.converter = imageio_ffmpeg.get_ffmpeg_exe()
    return AudioSegment


def ffmpeg_exe() -> str:
    import imageio_ffmpeg

    return imageio_ffmpeg.get_ffmpeg_exe()


def join(
    chunks: list[np.ndarray], sample_rate: int, crossfade_ms: int, pauses: Sequence[float] | None = None
) -> np.ndarray:
    """Concatenate float32 chunks, overlapping each boundary by a linear crossfade.

    ``pauses`` (seconds, one more than the chunks): silence before chunk ``i``, and after the last
    at ``pauses[-1]``. A boundary with a pause is not crossfaded: the silence is exactly as long as
    asked (an SSML break). The pause of an empty chunk moves to the next one. No audio at all gives
    an empty array, whatever the pauses."""
    pauses = [0.0] * (len(chunks) + 1) if pauses is None else list(pauses)
    if len(pauses) != len(chunks) + 1:
        raise ValueError(f"{len(chunks)} chunks need {len(chunks) + 1} pauses, not {len(pauses)}")
    if not any(c.size for c in chunks):
        return np.zeros(0, dtype=np.float32)
    fade = int(sample_rate * crossfade_ms / 1000)
    out = np.zeros(0, dtype=np.float32)
    gap = 0.0
    for chunk, before in zip(chunks, pauses):
        gap += before
        if not chunk.size:
            continue
        chunk = chunk.astype(np.float32, copy=False)
        n = min(fade, out.size, chunk.size)
        if gap > 0 or n == 0:
            out = np.concatenate([out, silence(gap, sample_rate), chunk])
        else:
            ramp = np.linspace(0.0, 1.0, n, dtype=np.float32)
            mixed = out[-n:] * (1.0 - ramp) + chunk[:n] * ramp
            out = np.concatenate([out[:-n], mixed, chunk[n:]])
        gap = 0.0
    return np.concatenate([out, silence(gap + pauses[-1], sample_rate)])


def silence(seconds: float, sample_rate: int) -> np.ndarray:
    return np.zeros(round(seconds * sample_rate), dtype=np.float32)


def to_int16(audio: np.ndarray) -> np.ndarray:
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype(np.int16)


def encode(audio: np.ndarray, sample_rate: int, fmt: str, target_rate: int | None = None) -> bytes:
    """float32 mono -> encoded file bytes in ``fmt``, resampled to ``target_rate`` if given."""
    spec = get_format(fmt)
    if spec.extension == "wav" and (not target_rate or target_rate == sample_rate):
        return _wav(to_int16(audio), sample_rate)  # in process: no ffmpeg needed for plain wav
    segment = _pydub()(data=to_int16(audio).tobytes(), sample_width=2, frame_rate=sample_rate, channels=1)
    if target_rate and target_rate != sample_rate:
        segment = segment.set_frame_rate(target_rate)
    buf = io.BytesIO()
    segment.export(buf, **spec.export_args)
    return buf.getvalue()


def _wav(pcm: np.ndarray, sample_rate: int) -> bytes:
    import wave

    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


def duration_seconds(audio: np.ndarray, sample_rate: int) -> float:
    return audio.size / sample_rate


def _read_pcm16_wav(data: bytes) -> tuple[np.ndarray, int] | None:
    """A mono 16-bit PCM wav (what ``encode`` writes) read in process; None for anything else,
    which ffmpeg reads (and downmixes as it always has). A check decodes every job's file: an ffmpeg process each costs more CPU than the
    read, and a host with only the wav path needs no ffmpeg."""
    import wave

    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    try:
        with wave.open(io.BytesIO(data)) as w:
            if w.getsampwidth() != 2 or w.getnchannels() != 1 or w.getcomptype() != "NONE":
                return None
            rate, frames = w.getframerate(), w.readframes(w.getnframes())
    except (wave.Error, EOFError):
        return None
    samples = np.frombuffer(frames[: len(frames) // 2 * 2], dtype="<i2")
    return (samples / 32768.0).astype(np.float32), rate


def length(data: bytes) -> tuple[int, int]:
    """(samples, rate) of an audio file, the size decode() gives: a 16-bit mono wav's from its
    frames, without converting them; anything else decoded."""
    import wave

    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        try:
            with wave.open(io.BytesIO(data)) as w:
                if w.getsampwidth() == 2 and w.getnchannels() == 1 and w.getcomptype() == "NONE":
                    samples = len(w.readframes(w.getnframes())) // 2
                    if samples:
                        return samples, w.getframerate()
        except (wave.Error, EOFError):
            pass
    pcm, rate = decode(data)
    return pcm.size, rate


def decode(data: bytes) -> tuple[np.ndarray, int]:
    """Any audio file ffmpeg reads -> (float32 mono at the file's own rate, that rate). InputError
    for bytes that hold no audio stream, or no samples."""
    import re
    import subprocess

    from pipeline.errors import InputError

    if not data:
        raise InputError("the audio file is empty")
    pcm = _read_pcm16_wav(data)
    if pcm is not None:
        if pcm[0].size == 0:
            raise InputError("the audio file holds no samples")
        return pcm
    done = subprocess.run(
        [
            ffmpeg_exe(),
            "-hide_banner",
            "-nostdin",
            "-i",
            "pipe:0",
            "-map",
            "0:a:0",
            "-ac",
            "1",
            "-f",
            "f32le",
            "pipe:1",
        ],
        input=data,
        capture_output=True,
        check=False,
    )
    err = done.stderr.decode(errors="replace")
    rate = re.search(r"Audio: .*?(\d+) Hz", err)
    if done.returncode != 0 or rate is None:
        last = err.strip().splitlines()[-1] if err.strip() else "no audio stream"
        raise InputError(f"not an audio file ffmpeg can read: {last}")
    samples = np.frombuffer(done.stdout, dtype="<f4").astype(np.float32)
    if samples.size == 0:
        raise InputError("the audio file holds no samples")
    return samples, int(rate.group(1))
