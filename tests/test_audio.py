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
    wav = subprocess.run(
        [audio.ffmpeg_exe(), "-v", "error", "-i", "pipe:0", "-f", "wav", "pipe:1"],
        input=data,
        capture_output=True,
        check=True,
    ).stdout
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


def test_a_pause_is_exact_silence_between_chunks_with_no_crossfade():
    rate = 1000
    a, b, c = (np.full(100, v, np.float32) for v in (0.5, -0.5, 0.25))
    out = audio.join([a, b, c], rate, crossfade_ms=30, pauses=[0.0, 0.25, 0.0, 0.0])
    assert out.size == 100 + 250 + 100 + 100 - 30  # the b|c boundary is still crossfaded
    assert np.all(out[:100] == 0.5) and not out[100:350].any() and np.all(out[350:420] == -0.5)


def test_pauses_before_the_first_and_after_the_last_chunk_and_of_empty_chunks():
    rate = 1000
    a, empty = np.ones(10, np.float32), np.zeros(0, np.float32)
    out = audio.join([empty, a, empty], rate, 30, pauses=[0.1, 0.2, 0.3, 0.4])
    assert out.size == 300 + 10 + 700 and not out[:300].any() and not out[310:].any()
    assert audio.join([empty], rate, 30, pauses=[1.0, 1.0]).size == 0  # no audio: no silence
    with pytest.raises(ValueError, match="2 chunks need 3 pauses"):
        audio.join([a, a], rate, 30, pauses=[0.0])


def _ffmpeg_decode(data: bytes) -> np.ndarray:
    out = subprocess.run(
        [audio.ffmpeg_exe(), "-v", "error", "-i", "pipe:0", "-ac", "1", "-f", "f32le", "pipe:1"],
        input=data,
        capture_output=True,
        check=True,
    ).stdout
    return np.frombuffer(out, dtype="<f4")


def test_a_wav_is_read_in_process_as_ffmpeg_reads_it():
    data = audio.encode(tone(0.5), 22050, "wav")
    samples, rate = audio.decode(data)
    assert rate == 22050 and np.array_equal(samples, _ffmpeg_decode(data))


def test_a_stereo_wav_is_downmixed_by_ffmpeg_as_before():
    left, right = tone(0.2), tone(0.2, freq=660.0)
    pcm = np.stack([audio.to_int16(left), audio.to_int16(right)], axis=1)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(22050)
        w.writeframes(pcm.tobytes())
    samples, rate = audio.decode(buf.getvalue())
    assert rate == 22050 and np.array_equal(samples, _ffmpeg_decode(buf.getvalue()))


def test_a_wav_of_no_samples_is_refused_and_other_formats_go_through_ffmpeg():
    from pipeline.errors import InputError

    with pytest.raises(InputError, match="no samples"):
        audio.decode(audio.encode(np.zeros(0, np.float32), 22050, "wav"))
    samples, rate = audio.decode(audio.encode(tone(1.0), 22050, "flac"))
    assert rate == 22050 and samples.size == pytest.approx(22050, abs=2)
