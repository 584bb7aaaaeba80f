"""Checking audio against its text, on real speech (Piper) and the offline recognizer: planted
faults are called bad, clean renders clean, word times land where the words are, and `synth check`
answers as a user runs it."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import srt
import pytest

from pipeline import audio, textfront
from pipeline.engines.base import SynthesisRequest
from pipeline.errors import InputError
from pipeline.lexicon.apply import Compiled
from pipeline.lexicon.entries import Entry
from pipeline.textfront import VoiceProfile
from pipeline.verify import captions, signal, spoken, verdict
from pipeline.verify.recognizer import PocketSphinx, Word, load_recognizer
from tests.cli_helpers import synth, synth_env

pytest.importorskip("pocketsphinx")

TEXT = "The library opens at nine in the morning and closes at six in the evening, every day of the week."
OTHER = "Our next departure leaves from platform four in about ten minutes, so please hurry along."
CORPUS = [
    json.loads(line)["text"]
    for line in (Path(__file__).parent / "normalization" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
]
# The first 20 lines of the benchmark corpus (shared/corpus/bench.txt): long lines of several
# sentences, as a batch has them.
BENCH_LINES = (Path(__file__).parent / "verify_bench_lines.txt").read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def recognizer():
    return PocketSphinx()


@pytest.fixture(scope="module")
def voice(piper_engine) -> VoiceProfile:
    return piper_engine.info.profile(piper_engine.info.voices[0])


def render(engine, text: str, lexicon: Compiled | None = None) -> np.ndarray:
    """A job's audio as pipeline/render.py makes it: the front end's pieces, joined."""
    info = engine.info
    chunks, pauses = textfront.prepare(text, info.profile(info.voices[0]), lexicon=lexicon).pieces(400)
    pieces: list[list[np.ndarray]] = [[] for _ in chunks]
    requests = [SynthesisRequest(("j", i), c.text, info.voices[0]) for i, c in enumerate(chunks)]
    for chunk in engine.synthesize(requests):
        pieces[chunk.key[1]].append(chunk.audio)
    return audio.join(
        [np.concatenate(p) if p else np.zeros(0, np.float32) for p in pieces], info.sample_rate, 30, pauses
    )


@pytest.fixture(scope="module")
def rendered(piper_engine) -> tuple[np.ndarray, np.ndarray, int]:
    return render(piper_engine, TEXT), render(piper_engine, OTHER), piper_engine.info.sample_rate


def test_a_clean_render_is_clean_and_its_words_are_timed_in_order(rendered, voice, recognizer):
    speech, _, rate = rendered
    result = verdict.check(speech, rate, TEXT, voice, recognizer)
    assert result.status == verdict.CLEAN, result.as_dict()
    words, _ = verdict.spoken_words(TEXT, voice)
    assert [w.word for w in result.words] == words
    starts = [w.start for w in result.words]
    assert starts == sorted(starts) and result.words[-1].end <= speech.size / rate + 0.05


def _planted(speech: np.ndarray, other: np.ndarray) -> dict[str, np.ndarray]:
    noise = np.random.default_rng(7).standard_normal(speech.size).astype(np.float32) * 0.1
    third = speech.size // 3
    return {
        "silence": np.zeros_like(speech),
        "white noise": noise,
        "another line's audio": other,
        "its last 40% cut": speech[: int(speech.size * 0.6)],
        "a chunk repeated three times": np.concatenate([speech[:third]] * 3 + [speech[third:]]),
        "a clipped copy": np.clip(speech * 8, -1.0, 1.0),
    }


@pytest.mark.parametrize(
    "case",
    [
        "silence",
        "white noise",
        "another line's audio",
        "its last 40% cut",
        "a chunk repeated three times",
        "a clipped copy",
    ],
)
def test_planted_faults_are_bad(rendered, voice, recognizer, case):
    speech, other, rate = rendered
    result = verdict.check(_planted(speech, other)[case], rate, TEXT, voice, recognizer)
    assert result.status == verdict.BAD, result.as_dict()
    assert result.reasons


def _checked(engine, texts: list[str], voice, recognizer) -> list[verdict.Verdict]:
    return [verdict.check(render(engine, text), engine.info.sample_rate, text, voice, recognizer) for text in texts]


@pytest.mark.slow
def test_clean_renders_of_the_normalization_corpus_are_clean(piper_engine, voice, recognizer):
    """At least 95%: a false alarm would have a good job rendered again. The foreign names and
    spelled acronyms pocketsphinx hears as other words are not held against the engine."""
    results = _checked(piper_engine, CORPUS, voice, recognizer)
    clean = [r.status == verdict.CLEAN for r in results]
    assert sum(clean) >= math.ceil(0.95 * len(CORPUS)), [(t, r.status, r.reasons) for t, r in zip(CORPUS, results)]


@pytest.mark.slow
def test_clean_renders_of_benchmark_lines_are_not_called_bad(piper_engine, voice, recognizer):
    """Long lines of several sentences, with their pauses: at least 95% not bad, so at most one of
    the 20 rendered again for nothing."""
    results = _checked(piper_engine, BENCH_LINES, voice, recognizer)
    fine = [r.status != verdict.BAD for r in results]
    assert sum(fine) >= math.ceil(0.95 * len(BENCH_LINES)), [
        (t[:60], r.status, r.reasons) for t, r in zip(BENCH_LINES, results) if r.status != verdict.CLEAN
    ]


@pytest.mark.slow
def test_word_starts_land_within_60_ms_of_where_the_words_are(piper_engine, voice, recognizer):
    """Ground truth: words rendered one by one, their silences trimmed, joined with known gaps."""
    words = "please remember to bring your ticket and a form of identification".split()
    rate = piper_engine.info.sample_rate
    parts, truth, at = [], [], 0.0
    for i, word in enumerate(words):
        clip = render(piper_engine, word)
        report = signal.analyse(clip, rate)
        start = int(report.leading_silence_s * rate)
        clip = clip[start : start + int(report.speech_seconds * rate)]
        gap = np.zeros(int((0.15 + 0.1 * (i % 3)) * rate), np.float32)
        at += gap.size / rate
        truth.append(at)
        parts += [gap, clip]
        at += clip.size / rate
    joined = np.concatenate(parts + [np.zeros(int(0.2 * rate), np.float32)])
    timed = recognizer.align(verdict._pcm16k(joined, rate), words)
    assert timed is not None and [w.word for w in timed] == words
    errors = np.abs(np.array([w.start for w in timed]) - np.array(truth))
    assert float(np.percentile(errors, 90)) <= 0.060, list(zip(words, truth, [w.start for w in timed]))


def test_captions_parse_with_real_srt_and_vtt_parsers():
    import io

    import srt
    import webvtt

    words = [
        Word(w, i * 0.4, i * 0.4 + 0.35, 0.9)
        for i, w in enumerate("one two three four five six seven eight nine ten eleven twelve thirteen".split())
    ]
    subs = list(srt.parse(captions.render(words, "srt")))
    assert [s.content for s in subs] == ["one two three four five six seven", "eight nine ten eleven twelve thirteen"]
    assert subs[1].start.total_seconds() == pytest.approx(2.8) and subs[1].end.total_seconds() == pytest.approx(5.15)
    cues = webvtt.from_buffer(io.StringIO(captions.render(words, "vtt")))
    assert [c.text for c in cues] == [s.content for s in subs] and cues[0].start == "00:00:00.000"
    assert json.loads(captions.render(words, "json"))["words"][2] == {
        "word": "three",
        "start": 0.8,
        "end": 1.15,
        "confidence": 0.9,
    }


def test_no_recognizer_for_the_language_or_a_failing_one_leaves_the_job_unchecked(rendered, recognizer):
    speech, _, rate = rendered
    french = verdict.check(speech, rate, TEXT, VoiceProfile("v", ("fr_FR",)), recognizer)
    assert french.status == verdict.NOT_CHECKED and "fr_FR" in french.reasons[0]

    class Broken(PocketSphinx):
        def transcribe(self, pcm: bytes) -> str:
            raise RuntimeError("model file missing")

    broken = verdict.check(speech, rate, TEXT, VoiceProfile("v", ("en_US",)), Broken())
    assert broken.status == verdict.NOT_CHECKED and "model file missing" in broken.reasons[0]
    with pytest.raises(InputError, match="cannot be loaded"):
        load_recognizer("no_such_package.module:Recognizer")


@pytest.mark.slow
def test_synth_check_as_a_user_runs_it(tmp_path, rendered):
    speech, other, rate = rendered
    good, bad, empty, text_file = (
        tmp_path / "good.mp3",
        tmp_path / "bad.wav",
        tmp_path / "empty.wav",
        tmp_path / "script.txt",
    )
    good.write_bytes(audio.encode(speech, rate, "mp3"))
    bad.write_bytes(audio.encode(other, rate, "wav"))
    empty.write_bytes(b"")
    text_file.write_text(TEXT + "\n")
    env = synth_env(SYNTH_DATA_DIR=str(tmp_path / "data"))

    done = synth("check", str(good), "--text-file", str(text_file), "--json", env=env)
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    assert report["status"] == "clean" and report["words"][0]["word"] == "the"

    done = synth("check", str(bad), "--text", TEXT, env=env)
    assert done.returncode == 1 and done.stdout.decode().startswith("verdict: bad")

    done = synth("check", str(good), "--text", TEXT, "--captions", "vtt", env=env)
    assert done.returncode == 0 and done.stdout.decode().startswith("WEBVTT")

    for path, said in ((empty, "empty"), (text_file, "not an audio file")):
        done = synth("check", str(path), "--text", TEXT, env=env)
        assert done.returncode == 2 and said in done.stderr.decode(), done.stderr.decode()
    done = synth("check", str(good), env=env)
    assert done.returncode == 2 and "--text" in done.stderr.decode()
    for args, said in ((("--text-file", str(good)), "not UTF-8"), (("--text", " "), "the text is empty")):
        done = synth("check", str(good), *args, env=env)
        assert done.returncode == 2 and said in done.stderr.decode(), done.stderr.decode()


def test_captions_show_a_rewritten_amount_as_written_over_the_time_it_is_spoken(piper_engine, voice, recognizer):
    text = "The ticket costs $1,250.50 at example.com today."
    result = verdict.check(render(piper_engine, text), piper_engine.info.sample_rate, text, voice, recognizer)
    spoken, written = result.words, result.written
    assert [w.word for w in written] == text.split()
    amount = written[3]
    said = amount.spoken.split()
    assert amount.spoken == "one thousand two hundred fifty dollars and fifty cents"
    assert [w.word for w in spoken[3 : 3 + len(said)]] == said
    assert (amount.start, amount.end) == (spoken[3].start, spoken[2 + len(said)].end)
    assert written[0].spoken is None and written[-1].spoken is None  # "today." is not a rewrite
    cues = list(srt.parse(captions.render(result.caption_words, "srt")))
    assert "$1,250.50" in " ".join(c.content for c in cues)
    entry = json.loads(captions.render(result.caption_words, "json"))["words"][3]
    assert entry["word"] == "$1,250.50" and entry["spoken"] == amount.spoken


def test_numbers_are_compared_as_the_engines_read_them():
    # a digit group's comma and a decimal point are read, not split into separate numbers
    assert (
        " ".join(verdict.words_of("1,000,000 or 3.14, not 12,34, on the 21st, up 10%"))
        == "one million or three point one four not twelve thirty four on the twenty first up ten percent"
    )


def test_an_ampersand_is_compared_as_the_engines_read_it():
    assert verdict.words_of("R&D costs & more") == ["r", "and", "d", "costs", "and", "more"]


def test_words_a_recognizer_cannot_be_held_to_are_not_compared(recognizer):
    """Spelled letters, a foreign spelling and a word out of the recognizer's dictionary: whatever
    is heard in their place costs nothing; a sure word misheard still counts."""
    text = "The SSML guide for the café near the hedgerow & the lake."
    said = verdict.mark_unknown(spoken.said_for(text, VoiceProfile("v", ("en_US",))), recognizer)
    assert [said.words[i] for i in sorted(said.unsure)] == ["s", "s", "m", "l", "cafe", "hedgerow"]
    heard = "the assets a multi guide for the half a near the federal and the lake".split()
    assert verdict.error_rates(said, heard) == (0.0, 0.0)
    _, cer = verdict.error_rates(said, heard[:-1] + ["cake"])
    assert 0 < cer < 0.1
    mostly_foreign = verdict.mark_unknown(
        spoken.said_for("Déjà vu in São Paulo.", VoiceProfile("v", ("en_US",))), recognizer
    )
    report = signal.SignalReport(3.0, 1.5, 0.1, 0.1, 0.2, 0.0, True)
    assert verdict.judge(mostly_foreign, "day job in south pole".split(), report).status == verdict.CLEAN


def test_a_reading_is_expected_to_pause_at_sentence_ends_commas_and_breaks():
    voice = VoiceProfile("v", ("en_US",))
    plain, paused = spoken.said_for("we wait then we go", voice), spoken.said_for("We wait. Then, we go!", voice)
    assert paused.expected_s() == pytest.approx(plain.expected_s() + spoken.SENTENCE_PAUSE_S + spoken.CLAUSE_PAUSE_S)
    breaks = spoken.said_for("<speak>We wait <break time='2s'/> then we go</speak>", voice)
    assert breaks.expected_s() == pytest.approx(plain.expected_s() + 2.0)


def test_last_words_not_heard_are_bad_only_where_the_audio_has_no_time_for_them():
    said = spoken.said_for(
        "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen",
        VoiceProfile("v", ("en_US",)),
    )
    heard = said.words[:-5]
    full = signal.SignalReport(said.expected_s() + 0.3, said.expected_s(), 0.1, 0.2, 0.3, 0.0, True)
    misheard = verdict.judge(said, heard, full)
    assert misheard.status == verdict.SUSPECT and "last words not heard" in misheard.reasons[0]
    cut = verdict.judge(said, heard, replace(full, speech_seconds=0.6 * said.expected_s()))
    assert cut.status == verdict.BAD and "missing tail" in cut.reasons[0]


def test_a_job_is_checked_against_its_text_as_its_lexicon_had_it_said(piper_engine, voice, recognizer):
    text = "Take him to the ICU at once, the doctor said."
    lexicon = Compiled([Entry("ICU", alias="intensive care unit")])
    speech, rate = render(piper_engine, text, lexicon), piper_engine.info.sample_rate
    read_with = verdict.check(speech, rate, text, voice, recognizer, lexicon)
    read_without = verdict.check(speech, rate, text, voice, recognizer)  # expects "i c u"
    assert read_with.status == "clean" and read_with.scores["cer"] < read_without.scores["cer"]
    assert next(w for w in read_with.written if w.word == "ICU").spoken == "intensive care unit"
