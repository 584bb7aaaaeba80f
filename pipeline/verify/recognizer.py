"""Speech recognizers for checking audio against its text: a transcript, and the time of each word.

A recognizer is pluggable (``SYNTH_VERIFY_RECOGNIZER``): ``pocketsphinx``, whose US-English model
ships in its wheel and runs offline, or ``package.module:Class`` for one a deployment installs
(a class with the ``Recognizer`` methods, built with no arguments). A recognizer with a closed
vocabulary may also have ``knows(word)``: the words it lacks are not held against the engine
(pipeline/verify/spoken.py).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pipeline.errors import InputError

RATE = 16000  # what the recognizers take: 16 kHz mono int16
_FRAME_S = 0.01  # pocketsphinx's frame


@dataclass(frozen=True)
class Word:
    word: str
    start: float  # seconds
    end: float
    confidence: float | None = None
    spoken: str | None = None  # a written word (pipeline/verify/written.py): the words said for it


class Recognizer(Protocol):
    name: str
    languages: tuple[str, ...]  # language prefixes served: ("en",) serves en_US and en-gb

    def transcribe(self, pcm: bytes) -> str:
        """The words heard in 16 kHz mono int16 PCM, lower case, space-separated."""

    def align(self, pcm: bytes, words: Sequence[str]) -> list[Word] | None:
        """Each of ``words`` with its time in the audio, in order; None if they cannot be aligned."""


def serves(recognizer: Recognizer, language: str | None) -> bool:
    if not language:
        return False
    lang = language.lower().replace("-", "_")
    return any(lang == p or lang.startswith(p + "_") for p in recognizer.languages)


class PocketSphinx:
    """CMU pocketsphinx with its bundled US-English acoustic model, language model and dictionary.
    A decoder serves one thread at a time: each thread that checks gets its own (0.3 s to build)."""

    name = "pocketsphinx"
    languages: tuple[str, ...] = ("en",)

    def __init__(self) -> None:
        self._local = threading.local()

    def _decoder(self):
        decoder = getattr(self._local, "decoder", None)
        if decoder is None:
            from pocketsphinx import Decoder

            decoder = self._local.decoder = Decoder(samprate=RATE, loglevel="FATAL")
        return decoder

    def transcribe(self, pcm: bytes) -> str:
        decoder = self._decoder()
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=True)
        decoder.end_utt()
        hyp = decoder.hyp()
        return hyp.hypstr if hyp else ""

    def knows(self, word: str) -> bool:
        """Whether the dictionary holds the word: one it lacks can only be heard as another."""
        return self._decoder().lookup_word(word) is not None

    def align(self, pcm: bytes, words: Sequence[str]) -> list[Word] | None:
        """Forced alignment of the words the dictionary knows; a word it does not know (a name,
        a coinage) takes the time between its known neighbours."""
        decoder = self._decoder()
        known = [i for i, w in enumerate(words) if self.knows(w)]
        if not known:
            return None
        try:
            decoder.set_align_text(" ".join(words[i] for i in known))
            decoder.start_utt()
            decoder.process_raw(pcm, full_utt=True)
            decoder.end_utt()
            segments = [s for s in decoder.seg() or () if _is_word(s.word)]
        except RuntimeError:
            return None
        finally:
            decoder.activate_search()  # back to the language model's search, for transcribe()
        if len(segments) != len(known):
            return None
        timed = {
            i: Word(words[i], s.start_frame * _FRAME_S, (s.end_frame + 1) * _FRAME_S, s.prob)
            for i, s in zip(known, segments)
        }
        return _fill_unknown(words, timed)


def _is_word(token: str) -> bool:
    return not (token.startswith("<") or token.startswith("[") or token.startswith("+"))


def _fill_unknown(words: Sequence[str], timed: dict[int, Word]) -> list[Word]:
    """Words the recognizer could not time share the gap between their timed neighbours evenly."""
    out: list[Word] = []
    i = 0
    while i < len(words):
        if i in timed:
            out.append(Word(words[i], timed[i].start, timed[i].end, timed[i].confidence))
            i += 1
            continue
        j = i
        while j < len(words) and j not in timed:
            j += 1
        start = out[-1].end if out else (timed[j].start if j in timed else 0.0)
        end = timed[j].start if j in timed else start
        step = (end - start) / (j - i)
        out.extend(Word(words[k], start + step * (k - i), start + step * (k - i + 1), None) for k in range(i, j))
        i = j
    return out


def load_recognizer(spec: str) -> Recognizer:
    """``pocketsphinx`` or ``package.module:Class``. InputError names what is missing."""
    if spec == "pocketsphinx":
        try:
            import pocketsphinx  # noqa: F401 - only whether it is installed
        except ImportError as e:
            raise InputError(
                "SYNTH_VERIFY_RECOGNIZER=pocketsphinx needs the pocketsphinx package (pip install 'synth[verify]')"
            ) from e
        return PocketSphinx()
    module, _, cls = spec.partition(":")
    if not module or not cls:
        raise InputError(f"SYNTH_VERIFY_RECOGNIZER={spec!r}: give pocketsphinx or package.module:Class")
    try:
        return getattr(importlib.import_module(module), cls)()
    except (ImportError, AttributeError) as e:
        raise InputError(f"SYNTH_VERIFY_RECOGNIZER={spec!r} cannot be loaded: {e}") from e
