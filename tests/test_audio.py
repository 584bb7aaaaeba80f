import io
import subprocess
import wave

import numpy as np
import pytest

from pipeline import audio
from pipeline.errors import UnknownFormatError


def tone(seconds: float, rate: int = 22050, freq: float = 440.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def test_join_overlaps_each_boundary_by_the_crossfade():
    a, b, c = tone(1.0), tone(0.5), tone(0.25)
    out = audio.join([a, b, c], 22050, crossfade_ms=20)
    fade = int(22050 * 0.02)
    assert out.size == a.size + b.size + c.size - 2 * fade
    assert np.max(np.abs(out)) <= 0.5 + 1e-6


def test_join_skips_empty_chunks():
    assert audio.join([np.zeros(0, np.float32), tone(0.1)], 22050, 30).size == int(0.1 * 22050)


def decode_seconds(data: bytes) -> float:
    """Decode any format with ffmpeg to wav and measure it."""
    wav = subprocess.run([audio.ffmpeg_exe(), "-v", "error", "-i", "pipe:0", "-f", "wav", "pipe:1"],
                         input=data, capture_output=True, check=True).stdout
    # ffmpeg writes an unknown length into a piped wav header: count the data bytes instead.
    with wave.open(io.BytesIO(wav)) as w:
        rate, width = w.getframerate(), w.getsampwidth()
    return (len(wav) - 44) / (rate * width)


@pytest.mark.parametrize("fmt", ["wav", "mp3", "ogg", "flac"])
def test_every_format_encodes_and_decodes_to_the_same_length(fmt):
    data = audio.encode(tone(2.0), 22050, fmt)
    assert decode_seconds(data) == pytest.approx(2.0, abs=0.1)


def test_sample_rate_option_resamples():
    data = audio.encode(tone(1.0), 22050, "wav", target_rate=16000)
    with wave.open(io.BytesIO(data)) as w:
        assert w.getframerate() == 16000
        assert w.getnframes() == pytest.approx(16000, abs=5)


def test_unknown_format():
    with pytest.raises(UnknownFormatError, match="choose one of wav, mp3, ogg, flac"):
        audio.get_format("aiff")
