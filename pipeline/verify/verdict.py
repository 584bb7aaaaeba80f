"""Does the audio say its text? A recognizer's transcript against the words the engine was given,
the waveform's silences and clipping, the length against what the text should take, loops and a
missing tail: each job ends ``clean``, ``suspect`` or ``bad`` with its scores, or ``not_checked``
with the reason.

The words are compared by their characters (CER), which forgives a recognizer that splits or joins
words ("right to" for "write to") where the word error rate counts two misses. Words a recognizer
cannot be held to (pipeline/verify/spoken.py: foreign spellings, spelled letters, words out of its
dictionary) are not compared: whatever it heard in their place, up to twice their letters, costs
nothing, and the rates are over the words compared. The bounds are set for pocketsphinx, a small
offline recognizer: on clean Piper speech of the normalization corpus (tests/normalization) and
the benchmark corpus its CER is about 0.1 on average and 0.6-0.7 on a short line it mishears;
the audio of another line scores 0.75 and more, noise and silence 1.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from itertools import groupby

import numpy as np

from pipeline.lexicon.apply import Compiled
from pipeline.textfront import VoiceProfile
from pipeline.verify import signal
from pipeline.verify.recognizer import RATE, Recognizer, Word, serves
from pipeline.verify.spoken import Said, said_for, spoken_words, words_of
from pipeline.verify.written import written_words

CLEAN, SUSPECT, BAD, NOT_CHECKED = "clean", "suspect", "bad", "not_checked"
# A job's verdict while its check waits on the verify queue (pipeline/verify/queued.py).
PENDING = "pending"
CER_BAD, CER_SUSPECT = 0.7, 0.6
# Under this many words a line's error rate says little (one miss is a third of three).
FEW_WORDS = 4
# Speech seconds over the expected (pipeline/verify/spoken.py), wide for voices slower or faster
# than Piper's; and seconds either way on top, a short line's own spread (Piper: 10% of 2 s).
DURATION_BAD, DURATION_SUSPECT = (0.45, 2.5), (0.65, 1.8)
LENGTH_SLACK_S = 0.3
# Two weak signs together make a bad render: words half misheard in audio a third longer than its
# text takes (clean Piper renders measured 0.8-1.25x the expected length), as a repeated stretch is.
LONG_AND_UNHEARD = 1.3
CLIPPED_BAD, CLIPPED_SUSPECT = 0.005, 0.0005  # share of samples in clipped runs
LEADING_SUSPECT_S, TRAILING_SUSPECT_S, PAUSE_SUSPECT_S = 1.0, 1.5, 1.5
# A loop: a run of LOOP_NGRAM words heard LOOP_EXTRA times more than the text has it, in audio that
# says more than its text (LOOP_LONGER times its words, or its expected length). Shorter runs ("at
# the") come back by chance, and a sentence the text says three times, misheard the same way each
# time, is a run heard more often than the text has it, in audio of the right length.
LOOP_NGRAM, LOOP_EXTRA, LOOP_LONGER = 3, 2, 1.2
TAIL_SHARE = 0.3  # the last 30% of the words ...
TAIL_HEARD_BAD = 0.2  # ... of which under 20% heard, while the rest is heard
TAIL_MIN_WORDS = 5  # fewer: a short line's tail is the length check's to judge
# ... in audio shorter than this share of the expected length, which has no time left for the tail:
# audio of the text's full length (Piper: 0.8x to 1.25x) holds its tail, misheard.
TAIL_TIME = 1 - TAIL_SHARE / 2
# Words are judged where at least this share of them is compared: the few sure words among
# foreign ones ("vu" in "déjà vu", "Paulo" in "São Paulo") are heard through their neighbours.
COMPARED_SHARE = 0.5
# An unsure word (pipeline/verify/spoken.py) may be heard as up to this many times its words and
# letters: a name heard as two short words ("sao paulo": "south pole"), a letter as a word ("s": "as").
UNSURE_SPAN = 2
ANY = None  # in a reference sequence: matches anything, or nothing, free


@dataclass
class Verdict:
    status: str
    reasons: list[str] = field(default_factory=list)
    scores: dict = field(default_factory=dict)
    transcript: str | None = None
    words: list[Word] | None = None  # the text's words timed in the audio
    written: list[Word] | None = None  # the words as written, timed; None: they do not line up

    @property
    def caption_words(self) -> list[Word] | None:
        """What captions show: the words as the user wrote them where they line up, else as spoken."""
        return self.written or self.words

    recognizer: str | None = None

    def as_dict(self) -> dict:
        return {
            "status": self.status,
            "reasons": self.reasons,
            "scores": self.scores,
            "transcript": self.transcript,
            "recognizer": self.recognizer,
            "words": [w.__dict__ for w in self.words] if self.words is not None else None,
            "written": [w.__dict__ for w in self.written] if self.written is not None else None,
        }


def check(
    audio: np.ndarray,
    sample_rate: int,
    text: str,
    voice: VoiceProfile,
    recognizer: Recognizer | None,
    lexicon: Compiled | None = None,
) -> Verdict:
    """The verdict on float32 mono ``audio`` that should say ``text`` in ``voice``, read with the
    job's ``lexicon`` as it was rendered."""
    said = said_for(text, voice, lexicon)
    language = voice.languages[0] if voice.languages else None
    if not said.words:
        return Verdict(NOT_CHECKED, ["the text has no words to compare"])
    if recognizer is None:
        return Verdict(NOT_CHECKED, ["no recognizer is configured"])
    if not serves(recognizer, language):
        return Verdict(
            NOT_CHECKED,
            [f"no recognizer for the voice's language ({language or 'not declared'})"],
            recognizer=recognizer.name,
        )
    report = signal.analyse(audio, sample_rate)
    pcm = _pcm16k(audio, sample_rate)
    try:
        heard = words_of(recognizer.transcribe(pcm)) if report.active else []
        timed = recognizer.align(pcm, said.words) if report.active else None
        said = mark_unknown(said, recognizer)
    except Exception as e:  # noqa: BLE001 - a recognizer's failure leaves this job unchecked, its audio kept
        return Verdict(NOT_CHECKED, [f"the recognizer failed: {type(e).__name__}: {e}"], recognizer=recognizer.name)
    verdict = judge(said, heard, report)
    verdict.transcript = " ".join(heard)
    verdict.recognizer = recognizer.name
    verdict.words = timed
    if timed:
        verdict.written = written_words(text, timed, lambda token: spoken_words(token, voice, lexicon)[0])
    return verdict


def mark_unknown(said: Said, recognizer: Recognizer) -> Said:
    """``said`` with the words the recognizer's dictionary lacks unsure too (a recognizer with no
    ``knows``, an open vocabulary, knows them all)."""
    knows = getattr(recognizer, "knows", None)
    if knows is None:
        return said
    return replace(said, unsure=said.unsure | {i for i, w in enumerate(said.words) if not knows(w)})


def judge(said: Said, heard: list[str], report: signal.SignalReport) -> Verdict:
    """The verdict from what the text says, the words heard and the waveform's report."""
    compared = [w for i, w in enumerate(said.words) if i not in said.unsure]
    wer, cer = error_rates(said, heard)
    matched = _matched(compared, heard)
    expected = said.expected_s()
    ratio = report.speech_seconds / expected
    tail = _tail_heard(matched)
    scores = {
        "wer": _round(wer, 3),
        "cer": _round(cer, 3),
        "words_not_compared": len(said.unsure),
        "duration_ratio": round(ratio, 2),
        "leading_silence_s": round(report.leading_silence_s, 2),
        "trailing_silence_s": round(report.trailing_silence_s, 2),
        "longest_pause_s": round(report.longest_pause_s, 2),
        "clipped_share": round(report.clipped_share, 5),
        "tail_heard": round(tail, 2),
    }
    bad, suspect = [], []
    if not report.active:
        bad.append("no speech: the audio is silent")
    if report.clipped_share > CLIPPED_BAD:
        bad.append(f"clipped: {report.clipped_share:.2%} of samples at full scale")
    elif report.clipped_share > CLIPPED_SUSPECT:
        suspect.append(f"some clipping: {report.clipped_share:.3%} of samples at full scale")
    judged = cer if len(compared) >= len(said.words) * COMPARED_SHARE else None
    if report.active and judged is not None and len(compared) >= FEW_WORDS and judged > CER_BAD:
        bad.append(f"says other words: character error rate {judged:.2f}")
    elif report.active and judged is not None and judged > CER_SUSPECT and ratio > LONG_AND_UNHEARD:
        bad.append(f"says more than its text: character error rate {judged:.2f} in {ratio:.2f}x the expected length")
    elif report.active and judged is not None and judged > CER_SUSPECT:
        suspect.append(f"words not heard: character error rate {cer:.2f}")
    loop = _loop(said.words, heard) if max(ratio, len(heard) / len(said.words)) >= LOOP_LONGER else None
    if loop:
        bad.append(f"repeats itself: {loop!r} heard {LOOP_EXTRA} times more than the text has it")
    if report.active and _tail_words(compared) >= TAIL_MIN_WORDS and tail < TAIL_HEARD_BAD <= _head_heard(matched):
        if ratio < TAIL_TIME:
            bad.append(f"missing tail: {tail:.0%} of the last words heard, in {ratio:.2f}x the expected length")
        else:
            suspect.append(f"last words not heard: {tail:.0%} of them, in audio of the expected length")
    if report.active:
        _judge_length(report.speech_seconds, expected, bad, suspect)
    if report.leading_silence_s > LEADING_SUSPECT_S and report.active:
        suspect.append(f"{report.leading_silence_s:.1f} s of silence before the speech")
    if report.trailing_silence_s > TRAILING_SUSPECT_S and report.active:
        suspect.append(f"{report.trailing_silence_s:.1f} s of silence after the speech")
    if report.longest_pause_s > PAUSE_SUSPECT_S + said.longest_break:
        suspect.append(f"a pause of {report.longest_pause_s:.1f} s inside the speech")
    status = BAD if bad else SUSPECT if suspect else CLEAN
    return Verdict(status, bad + suspect, scores)


def _judge_length(speech_s: float, expected_s: float, bad: list[str], suspect: list[str]) -> None:
    ratio = speech_s / expected_s
    for (low, high), out, words in (
        (DURATION_BAD, bad, ("too short", "too long")),
        (DURATION_SUSPECT, suspect, ("short", "long")),
    ):
        if not low * expected_s - LENGTH_SLACK_S <= speech_s <= high * expected_s + LENGTH_SLACK_S:
            out.append(f"{words[ratio > 1]}: {ratio:.2f}x the expected length")
            return


def error_rates(said: Said, heard: list[str]) -> tuple[float | None, float | None]:
    """Word and character error rates of ``heard`` over the words compared; None where every word
    is unsure. A run of unsure words matches any words heard in its place, or none, up to twice
    its words and twice its letters, at no cost."""
    words: list[str | None] = []
    chars: list[str | None] = []
    for sure, run in groupby(range(len(said.words)), key=lambda i: i not in said.unsure):
        run_words = [said.words[i] for i in run]
        text = " ".join(run_words)
        if chars:
            chars.append(" ")
        words += run_words if sure else [ANY] * (UNSURE_SPAN * len(run_words))
        chars += list(text) if sure else [ANY] * (UNSURE_SPAN * len(text) + 1)
    compared = [w for w in words if w is not ANY]
    if not compared:
        return None, None
    return (
        edit_distance(words, heard) / len(compared),
        edit_distance(chars, list(" ".join(heard))) / len(" ".join(compared)),
    )


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _pcm16k(audio: np.ndarray, sample_rate: int) -> bytes:
    from scipy.signal import resample_poly

    if sample_rate != RATE:
        from math import gcd

        g = gcd(RATE, sample_rate)
        audio = resample_poly(audio.astype(np.float64), RATE // g, sample_rate // g)
    return (np.clip(audio, -1.0, 1.0) * 32767).astype("<i2").tobytes()


def edit_distance(ref: list, hyp: list) -> int:
    """Levenshtein distance between two sequences (words, or characters). ``ANY`` in ``ref``
    stands for any one element of ``hyp``, or none, at no cost."""
    prev = list(range(len(hyp) + 1))
    for r in ref:
        cost = int(r is not ANY)
        cur = [prev[0] + cost]
        for j, h in enumerate(hyp, 1):
            cur.append(min(prev[j] + cost, cur[j - 1] + 1, prev[j - 1] + (cost and r != h)))
        prev = cur
    return prev[-1]


def _matched(ref: list[str], hyp: list[str]) -> list[bool]:
    """For each reference word, whether the longest common subsequence with the hypothesis holds it."""
    n, m = len(ref), len(hyp)
    table = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            table[i][j] = table[i + 1][j + 1] + 1 if ref[i] == hyp[j] else max(table[i + 1][j], table[i][j + 1])
    out, i, j = [False] * n, 0, 0
    while i < n and j < m:
        if ref[i] == hyp[j]:
            out[i], i, j = True, i + 1, j + 1
        elif table[i + 1][j] >= table[i][j + 1]:
            i += 1
        else:
            j += 1
    return out


def _tail_words(words: list) -> int:
    return max(1, round(len(words) * TAIL_SHARE))


def _tail_heard(matched: list[bool]) -> float:
    k = _tail_words(matched)
    return sum(matched[-k:]) / k if matched else 0.0


def _head_heard(matched: list[bool]) -> float:
    k = _tail_words(matched)
    head = matched[:-k]
    return sum(head) / len(head) if head else 0.0


def _loop(ref: list[str], hyp: list[str]) -> str | None:
    heard = Counter(tuple(hyp[i : i + LOOP_NGRAM]) for i in range(len(hyp) - LOOP_NGRAM + 1))
    in_text = Counter(tuple(ref[i : i + LOOP_NGRAM]) for i in range(len(ref) - LOOP_NGRAM + 1))
    for gram, times in heard.most_common(3):
        if times >= in_text[gram] + LOOP_EXTRA:
            return " ".join(gram)
    return None
