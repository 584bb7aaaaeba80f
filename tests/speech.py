"""Offline speech recognition for tests: pocketsphinx's bundled US-English model, and word error rate."""

from __future__ import annotations

import io
import subprocess
import wave

from pipeline.audio import ffmpeg_exe
from pipeline.verify.verdict import edit_distance


def to_pcm16k(data: bytes) -> bytes:
    """Any audio file -> raw 16 kHz mono int16, through ffmpeg."""
    return subprocess.run(
        [ffmpeg_exe(), "-v", "error", "-i", "pipe:0", "-ac", "1", "-ar", "16000", "-f", "s16le", "pipe:1"],
        input=data,
        capture_output=True,
        check=True,
    ).stdout


def transcribe(data: bytes) -> str:
    from pocketsphinx import Decoder

    decoder = Decoder(samprate=16000, loglevel="FATAL")
    decoder.start_utt()
    decoder.process_raw(to_pcm16k(data), full_utt=True)
    decoder.end_utt()
    hyp = decoder.hyp()
    return hyp.hypstr if hyp else ""


def word_error_rate(reference: str, hypothesis: str) -> float:
    ref = _words(reference)
    return edit_distance(ref, _words(hypothesis)) / max(1, len(ref))


def _words(text: str) -> list[str]:
    return "".join(c.lower() if c.isalnum() or c == "'" else " " for c in text).split()


def wav_bytes(samples_int16: bytes, rate: int) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples_int16)
    return buf.getvalue()
