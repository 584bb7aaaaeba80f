"""Loudness: every job's level is measured, and a levelled batch meets its target under its
true-peak ceiling, read back by an independent meter (ffmpeg's ebur128 filter) from the files a
user receives."""

from __future__ import annotations

import json
import re
import subprocess

import numpy as np
import pytest

from pipeline import loudness
from pipeline.audio import ffmpeg_exe
from pipeline.engines.base import SynthesisRequest
from tests.cli_helpers import synth, synth_env

LINES = [
    "The library opens at nine in the morning and closes at six in the evening.",
    "Please remember to bring your ticket and a form of identification.",
    "Our next departure leaves from platform four in about ten minutes.",
]


def ebur128(data: bytes, *raw_args: str) -> tuple[float, float]:
    """(integrated LUFS, true peak dBTP) of an audio file, or of raw audio described by raw_args."""
    err = subprocess.run(
        [
            ffmpeg_exe(),
            "-hide_banner",
            "-nostats",
            *raw_args,
            "-i",
            "pipe:0",
            "-af",
            "ebur128=peak=true:framelog=quiet",
            "-f",
            "null",
            "-",
        ],
        input=data,
        capture_output=True,
        check=True,
    ).stderr.decode()
    lufs = float(re.findall(r"I:\s+(-?[\d.]+) LUFS", err)[-1])
    peak = float(re.findall(r"Peak:\s+(-?[\d.]+|-inf) dBFS", err)[-1])
    return lufs, peak


def ebur128_f32(audio: np.ndarray, rate: int) -> tuple[float, float]:
    return ebur128(audio.astype("<f4").tobytes(), "-f", "f32le", "-ar", str(rate), "-ac", "1")


@pytest.fixture(scope="module")
def speech(piper_engine) -> tuple[list[np.ndarray], int]:
    requests = [SynthesisRequest((str(i), 0), text, piper_engine.info.voices[0]) for i, text in enumerate(LINES)]
    pieces: dict[str, list[np.ndarray]] = {}
    for chunk in piper_engine.synthesize(requests):
        pieces.setdefault(chunk.key[0], []).append(chunk.audio)
    return [np.concatenate(pieces[str(i)]) for i in range(len(LINES))], piper_engine.info.sample_rate


def test_the_meter_agrees_with_ffmpegs_on_real_speech(speech):
    clips, rate = speech
    for clip in clips:
        level = loudness.measure(clip, rate)
        lufs, peak = ebur128_f32(clip, rate)
        assert level.lufs == pytest.approx(lufs, abs=0.3)
        assert level.true_peak_dbtp == pytest.approx(peak, abs=0.3)


@pytest.mark.parametrize("rate", [16000, 22050, 24000, 48000])
def test_the_integrated_loudness_is_pyloudnorms_to_a_millionth_of_a_lu(rate):
    """integrated() gates pyloudnorm's blocks from a running sum where pyloudnorm loops over them:
    the same figure on speech-like bursts between silences, quiet passages under the absolute
    gate, an odd length, and nothing loud enough to gate in."""
    import pyloudnorm

    rng = np.random.default_rng(rate)
    t = np.arange(int(37.3 * rate)) / rate
    bursts = 0.3 * np.sin(2 * np.pi * 180 * t) * (np.sin(2 * np.pi * 0.7 * t) > 0.2) + 0.02 * rng.standard_normal(
        t.size
    )
    quiet = np.concatenate([bursts, 1e-5 * rng.standard_normal(int(12.1 * rate)), 0.01 * bursts[: rate * 5]])
    for signal in (bursts, quiet, bursts[: int(0.93 * rate)]):
        expect = pyloudnorm.Meter(rate).integrated_loudness(signal.astype(np.float64))
        assert loudness.integrated(signal.astype(np.float32), rate) == pytest.approx(
            pyloudnorm.Meter(rate).integrated_loudness(signal.astype(np.float32).astype(np.float64)), abs=1e-6
        )
        assert np.isfinite(expect)
    assert loudness.integrated((1e-6 * rng.standard_normal(rate * 3)).astype(np.float32), rate) is None


def test_the_true_peak_is_the_whole_signal_oversampled(speech):
    """Oversampling only near the loud samples gives what resample_poly over all of it gives, on
    speech, on noise (where it takes the whole-signal path) and on short, decaying and edge cases."""
    from scipy.signal import resample_poly

    rng = np.random.default_rng(7)
    cases = list(speech[0]) + [
        (rng.standard_normal(24_000) * 0.1).astype(np.float32),
        np.tile(np.array([0.5, 0.5, -0.5, -0.5], np.float32), 500),  # overs between samples
        np.concatenate([[0.9], np.zeros(100)]).astype(np.float32),
        np.concatenate([np.zeros(100), [0.9, -0.9]]).astype(np.float32),
        np.array([0.3], np.float32),
    ]
    for _ in range(50):
        n = int(rng.integers(2, 4000))
        cases.append((rng.standard_normal(n) * np.exp(-np.arange(n) / rng.uniform(10, 3000))).astype(np.float32))
    for audio in cases:
        whole = 20 * np.log10(np.max(np.abs(resample_poly(audio.astype(np.float64), 4, 1))))
        assert loudness.true_peak(audio) == pytest.approx(whole, abs=1e-4)


@pytest.mark.parametrize("gain", [0.05, 1.0])
def test_levelled_speech_meets_the_target_under_the_ceiling(speech, gain):
    """A quiet render is lifted, a loud one brought down; where the lift would push a peak over
    the ceiling the limiter holds it, and the loudness still meets the target."""
    clips, rate = speech
    for clip in clips:
        out, level = loudness.level(clip * np.float32(gain), rate, -16.0, -1.0)
        assert out.size == clip.size  # the limiter keeps length and timing
        lufs, peak = ebur128_f32(out, rate)
        assert lufs == pytest.approx(-16.0, abs=0.5)
        assert peak <= -1.0 + 0.1  # ffmpeg prints one decimal
        assert level.lufs == pytest.approx(-16.0, abs=0.1) and level.true_peak_dbtp <= -1.0


def test_the_limited_gain_is_the_one_level_applies(speech):
    """A gain found on a clip, then applied with the limiter, levels it as level() does."""
    clips, rate = speech
    clip = np.concatenate(clips)
    gain = loudness.limited_gain(clip, rate, -16.0, -2.0)
    assert gain > -16.0 - loudness.measure(clip, rate).lufs  # the limiter's cost made up
    gained = clip * np.float32(10 ** (gain / 20))
    out = loudness._limit(gained, rate, -2.0 - loudness.LIMITER_MARGIN_DB)
    assert loudness.measure(out, rate).lufs == pytest.approx(loudness.level(clip, rate, -16.0, -2.0)[1].lufs, abs=0.01)
    assert loudness.measure(out, rate).lufs == pytest.approx(-16.0, abs=0.1)
    assert loudness.limited_gain(np.zeros(rate, np.float32), rate, -16.0, -2.0) is None


def test_audio_too_short_or_silent_has_no_loudness_and_is_left_alone():
    rate = 22050
    short = np.full(rate // 10, 0.1, np.float32)
    silent = np.zeros(rate * 2, np.float32)
    assert loudness.measure(short, rate).lufs is None
    assert loudness.measure(silent, rate) == loudness.Level(None, None)
    out, level = loudness.level(silent, rate, -16.0, -1.0)
    assert out is silent and level.lufs is None


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["wav", "mp3"])
def test_submit_levels_every_job_of_a_batch(tmp_path, fmt):
    """`synth submit --loudness -16` as a user runs it (embedded: Piper, SQLite, a local folder):
    every file it writes reads -16 LUFS on ffmpeg's meter, under a -1 dBTP true peak, mp3's
    decoded peaks included, and the manifest records each job's level."""
    corpus = tmp_path / "lines.txt"
    corpus.write_text("\n".join(LINES) + "\n")
    out = tmp_path / "out"
    env = synth_env(SYNTH_DATA_DIR=str(tmp_path / "data"))
    done = synth("submit", str(corpus), "--format", fmt, "--loudness", "-16", "-o", str(out), env=env)
    assert done.returncode == 0, done.stderr.decode()
    manifest = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert len(manifest) == len(LINES)
    for line in manifest:
        lufs, peak = ebur128((out / f"{line['client_id']}.{fmt}").read_bytes())
        assert lufs == pytest.approx(-16.0, abs=0.5), line
        assert peak <= -1.0 + 0.1, line
        assert line["loudness_lufs"] == pytest.approx(-16.0, abs=0.1)
        assert line["true_peak_dbtp"] <= -1.0 - (loudness.LOSSY_HEADROOM_DB if fmt == "mp3" else 0.0)


def test_submit_refuses_a_target_or_ceiling_out_of_range(tmp_path):
    corpus = tmp_path / "lines.txt"
    corpus.write_text("Hello.\n")
    env = synth_env(SYNTH_DATA_DIR=str(tmp_path / "data"))
    for args, said in (
        (["--loudness", "3"], "between -70 and -5 LUFS"),
        (["--loudness", "-16", "--true-peak", "2"], "between -20 and 0 dBTP"),
        (["--true-peak", "-2"], "give a loudness target"),
    ):
        done = synth("submit", str(corpus), *args, env=env)
        assert done.returncode == 2, (args, done.stderr.decode())
        assert said in done.stderr.decode()
    assert not (tmp_path / "data" / "objects").exists() or not any((tmp_path / "data" / "objects").rglob("*.wav"))


def test_a_worker_that_meters_only_levelled_jobs_still_levels_them(speech):
    """SYNTH_LOUDNESS_METER=auto on a GPU: an unlevelled job records no level, a levelled one is
    measured and brought to its target as on any worker, and a document's job is measured."""
    from types import SimpleNamespace

    from pipeline.job_record import level_job

    audio, rate = speech[0][0], speech[1]
    plain = SimpleNamespace(loudness_target=None, true_peak_max=None, format="wav", client_id="line-000001")
    kept, level = level_job(plain, audio, rate, meter=False)
    assert kept is audio and level == loudness.Level(None, None)
    assert level_job(plain, audio, rate)[1].lufs is not None
    paragraph = SimpleNamespace(loudness_target=None, true_peak_max=None, format="flac", client_id="c0002-p00003-s001")
    kept, level = level_job(paragraph, audio, rate, meter=False)
    assert kept is audio and level == loudness.measure(audio, rate)
    levelled = SimpleNamespace(loudness_target=-16.0, true_peak_max=None, format="wav", client_id="line-000002")
    assert level_job(levelled, audio, rate, meter=False)[1].lufs == pytest.approx(-16.0, abs=0.1)
