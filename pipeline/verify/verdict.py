"""Does the audio say its text? A recognizer's transcript against the words the engine was given,
the waveform's silences and clipping, the length against what the text should take, loops and a
missing tail: each job ends ``clean``, ``suspect`` or ``bad`` with its scores, or ``not_checked``
with the reason.

The words are compared by their characters (CER), which forgives a recognizer that splits or joins
words ("right to" for "write to") where the word error rate counts two misses. The bounds are
set for pocketsphinx, a small offline recognizer: on clean Piper speech of the normalization
corpus (tests/normalization) its CER is 0.1 on average and up to 0.6 on a line of foreign names;
the audio of another line scores 0.75 and more, noise and silence 1.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np

from pipeline import textfront
from pipeline.constants import CHARS_PER_SECOND
from pipeline.lexicon.apply import Compiled
from pipeline.textfront import VoiceProfile
from pipeline.textfront.numbers import cardinal, ordinal
from pipeline.textfront.ssml import Pause, Speech
from pipeline.verify import signal
from pipeline.verify.recognizer import RATE, Recognizer, Word, serves
from pipeline.verify.written import written_words

CLEAN, SUSPECT, BAD, NOT_CHECKED = "clean", "suspect", "bad", "not_checked"
# A job's verdict while its check waits on the verify queue (pipeline/verify/queued.py).
PENDING = "pending"
CER_BAD, CER_SUSPECT = 0.7, 0.6
# Under this many words a line's error rate says little (one miss is a third of three).
FEW_WORDS = 4
DURATION_BAD, DURATION_SUSPECT = (0.45, 2.5), (0.65, 1.8)   # speech seconds over expected
CLIPPED_BAD, CLIPPED_SUSPECT = 0.005, 0.0005                 # share of samples in clipped runs
LEADING_SUSPECT_S, TRAILING_SUSPECT_S, PAUSE_SUSPECT_S = 1.0, 1.5, 1.5
# A loop: a run of LOOP_NGRAM words heard LOOP_EXTRA times more than the text has it, in audio that
# says more than its text (LOOP_LONGER times its words, or its expected length). Shorter runs ("at
# the") come back by chance, and a sentence the text says three times, misheard the same way each
# time, is a run heard more often than the text has it, in audio of the right length.
LOOP_NGRAM, LOOP_EXTRA, LOOP_LONGER = 3, 2, 1.2
TAIL_SHARE = 0.3                       # the last 30% of the words ...
TAIL_HEARD_BAD = 0.2                   # ... of which under 20% heard, while the rest is heard
TAIL_MIN_WORDS = 5                     # fewer: a short line's tail is the length check's to judge


@dataclass
class Verdict:
    status: str
    reasons: list[str] = field(default_factory=list)
    scores: dict = field(default_factory=dict)
    transcript: str | None = None
    words: list[Word] | None = None        # the text's words timed in the audio
    written: list[Word] | None = None      # the words as written, timed; None: they do not line up

    @property
    def caption_words(self) -> list[Word] | None:
        """What captions show: the words as the user wrote them where they line up, else as spoken."""
        return self.written or self.words
    recognizer: str | None = None

    def as_dict(self) -> dict:
        return {"status": self.status, "reasons": self.reasons, "scores": self.scores,
                "transcript": self.transcript, "recognizer": self.recognizer,
                "words": [w.__dict__ for w in self.words] if self.words is not None else None,
                "written": [w.__dict__ for w in self.written] if self.written is not None else None}


def spoken_words(text: str, voice: VoiceProfile, lexicon: Compiled | None = None) -> tuple[list[str], float]:
    """The words the engine is given for ``text`` (after the text front end and the job's
    lexicon), lower case, digits as words; and the longest pause the text asks for (SSML breaks),
    in seconds. A phoneme entry keeps its written word: how a recognizer spells IPA is unknown."""
    prepared = textfront.prepare(text, replace(voice, phonemes=False), lexicon=lexicon)
    speech = " ".join(p.text for p in prepared.parts if isinstance(p, Speech))
    longest = max((p.seconds for p in prepared.parts if isinstance(p, Pause)), default=0.0)
    return words_of(speech), longest


def words_of(text: str) -> list[str]:
    # Recognizers spell in ASCII: café is heard as cafe.
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    # An acronym in capitals is read letter by letter (SSML: "s s m l"), as the engines say it.
    text = re.sub(r"\b[A-Z]{2,5}\b", lambda m: " ".join(m.group()), text)
    # Numbers as the engines read them: "1,250" is one thousand two hundred fifty, not "one" and
    # "two hundred fifty"; "3.14" is three point one four; "3rd" third; "10%" ten percent.
    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)
    text = re.sub(r"\b(\d{1,12})(?:st|nd|rd|th)\b", lambda m: f" {ordinal(int(m.group(1)))} ", text, flags=re.I)
    text = re.sub(r"(?<=\d)\s?%", " percent", text)
    text = re.sub(r"(?<=\d)\.(\d+)", lambda m: " point " + " ".join(m.group(1)), text)
    text = re.sub(r"\d+", lambda m: f" {cardinal(int(m.group()))} " if len(m.group()) < 13 else m.group(), text)
    return re.findall(r"[a-z0-9']+", text.lower().replace("-", " "))


def check(audio: np.ndarray, sample_rate: int, text: str, voice: VoiceProfile,
          recognizer: Recognizer | None, lexicon: Compiled | None = None) -> Verdict:
    """The verdict on float32 mono ``audio`` that should say ``text`` in ``voice``, read with the
    job's ``lexicon`` as it was rendered."""
    words, longest_break = spoken_words(text, voice, lexicon)
    language = voice.languages[0] if voice.languages else None
    if not words:
        return Verdict(NOT_CHECKED, ["the text has no words to compare"])
    if recognizer is None:
        return Verdict(NOT_CHECKED, ["no recognizer is configured"])
    if not serves(recognizer, language):
        return Verdict(NOT_CHECKED, [f"no recognizer for the voice's language ({language or 'not declared'})"],
                       recognizer=recognizer.name)
    report = signal.analyse(audio, sample_rate)
    pcm = _pcm16k(audio, sample_rate)
    try:
        heard = words_of(recognizer.transcribe(pcm)) if report.active else []
        timed = recognizer.align(pcm, words) if report.active else None
    except Exception as e:  # noqa: BLE001 - a recognizer's failure leaves this job unchecked, its audio kept
        return Verdict(NOT_CHECKED, [f"the recognizer failed: {type(e).__name__}: {e}"], recognizer=recognizer.name)
    verdict = judge(words, heard, report, longest_break)
    verdict.transcript = " ".join(heard)
    verdict.recognizer = recognizer.name
    verdict.words = timed
    if timed:
        verdict.written = written_words(text, timed, lambda token: spoken_words(token, voice, lexicon)[0])
    return verdict


def judge(words: list[str], heard: list[str], report: signal.SignalReport, longest_break: float = 0.0) -> Verdict:
    """The verdict from the text's words, the words heard and the waveform's report."""
    matched = _matched(words, heard)
    wer = edit_distance(words, heard) / len(words)
    cer = edit_distance(list(" ".join(words)), list(" ".join(heard))) / max(1, len(" ".join(words)))
    expected = max(0.5, len(" ".join(words)) / CHARS_PER_SECOND + longest_break)
    ratio = report.speech_seconds / expected
    tail = _tail_heard(matched)
    scores = {"wer": round(wer, 3), "cer": round(cer, 3), "duration_ratio": round(ratio, 2),
              "leading_silence_s": round(report.leading_silence_s, 2),
              "trailing_silence_s": round(report.trailing_silence_s, 2),
              "longest_pause_s": round(report.longest_pause_s, 2),
              "clipped_share": round(report.clipped_share, 5), "tail_heard": round(tail, 2)}
    bad, suspect = [], []
    if not report.active:
        bad.append("no speech: the audio is silent")
    if report.clipped_share > CLIPPED_BAD:
        bad.append(f"clipped: {report.clipped_share:.2%} of samples at full scale")
    elif report.clipped_share > CLIPPED_SUSPECT:
        suspect.append(f"some clipping: {report.clipped_share:.3%} of samples at full scale")
    if report.active and len(words) >= FEW_WORDS and cer > CER_BAD:
        bad.append(f"says other words: character error rate {cer:.2f}")
    elif report.active and cer > CER_SUSPECT:
        suspect.append(f"words not heard: character error rate {cer:.2f}")
    loop = _loop(words, heard) if max(ratio, len(heard) / len(words)) >= LOOP_LONGER else None
    if loop:
        bad.append(f"repeats itself: {loop!r} heard {LOOP_EXTRA} times more than the text has it")
    if report.active and _tail_words(words) >= TAIL_MIN_WORDS and tail < TAIL_HEARD_BAD <= _head_heard(matched):
        bad.append(f"missing tail: {tail:.0%} of the last words heard")
    if report.active and not DURATION_BAD[0] <= ratio <= DURATION_BAD[1]:
        bad.append(f"{'too short' if ratio < 1 else 'too long'}: {ratio:.2f}x the expected length")
    elif report.active and not DURATION_SUSPECT[0] <= ratio <= DURATION_SUSPECT[1]:
        suspect.append(f"{'short' if ratio < 1 else 'long'}: {ratio:.2f}x the expected length")
    if report.leading_silence_s > LEADING_SUSPECT_S and report.active:
        suspect.append(f"{report.leading_silence_s:.1f} s of silence before the speech")
    if report.trailing_silence_s > TRAILING_SUSPECT_S and report.active:
        suspect.append(f"{report.trailing_silence_s:.1f} s of silence after the speech")
    if report.longest_pause_s > PAUSE_SUSPECT_S + longest_break:
        suspect.append(f"a pause of {report.longest_pause_s:.1f} s inside the speech")
    status = BAD if bad else SUSPECT if suspect else CLEAN
    return Verdict(status, bad + suspect, scores)


def _pcm16k(audio: np.ndarray, sample_rate: int) -> bytes:
    from scipy.signal import resample_poly

    if sample_rate != RATE:
        from math import gcd

        g = gcd(RATE, sample_rate)
        audio = resample_poly(audio.astype(np.float64), RATE // g, sample_rate // g)
    return (np.clip(audio, -1.0, 1.0) * 32767).astype("<i2").tobytes()


def edit_distance(ref: list, hyp: list) -> int:
    """Levenshtein distance between two sequences (words, or characters)."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i]
        for j, h in enumerate(hyp, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h)))
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
    heard = Counter(tuple(hyp[i:i + LOOP_NGRAM]) for i in range(len(hyp) - LOOP_NGRAM + 1))
    in_text = Counter(tuple(ref[i:i + LOOP_NGRAM]) for i in range(len(ref) - LOOP_NGRAM + 1))
    for gram, times in heard.most_common(3):
        if times >= in_text[gram] + LOOP_EXTRA:
            return " ".join(gram)
    return None
