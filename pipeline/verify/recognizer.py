"""Speech recognizers for checking audio against its text: a transcript, and the time of each word.

A recognizer is pluggable (``SYNTH_VERIFY_RECOGNIZER``): ``pocketsphinx``, whose US-English model
ships in its wheel and runs offline, or ``package.module:Class`` for one a deployment installs
(a class with the ``Recognizer`` methods, built with no arguments). A recognizer with a closed
vocabulary may also have ``knows(word)``: the words it lacks are not held against the engine
(pipeline/verify/spoken.py).
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
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
    @property
    def name(self) -> str: ...

    @property
    def languages(self) -> tuple[str, ...]:
        """Language prefixes served: ("en",) serves en_US and en-gb."""

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


def load_recognizer(spec: str, *, own_process: bool = False) -> Recognizer:
    """``pocketsphinx`` or ``package.module:Class``. InputError names what is missing.
    ``own_process``: the recognizer runs in processes of its own (``InOwnProcess``), for a
    process that also runs an engine."""
    cls = _recognizer_class(spec)
    return InOwnProcess(spec) if own_process else cls()


def _recognizer_class(spec: str) -> type[Recognizer]:
    if spec == "pocketsphinx":
        try:
            import pocketsphinx  # noqa: F401 - only whether it is installed
        except ImportError as e:
            raise InputError(
                "SYNTH_VERIFY_RECOGNIZER=pocketsphinx needs the pocketsphinx package (pip install 'synth[verify]')"
            ) from e
        return PocketSphinx
    module, _, cls = spec.partition(":")
    if not module or not cls:
        raise InputError(f"SYNTH_VERIFY_RECOGNIZER={spec!r}: give pocketsphinx or package.module:Class")
    try:
        return getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as e:
        raise InputError(f"SYNTH_VERIFY_RECOGNIZER={spec!r} cannot be loaded: {e}") from e


class InOwnProcess:
    """A recognizer run in child processes, one per check running at once (started as needed).

    A recognizer decodes in one C call that holds the GIL for as long as the audio takes
    (pocketsphinx: seconds, for a long line). In a process that renders, that call
    stops every other thread: the engine's loop, its codec, the live audio publisher (whose
    keepalive then lapses, and the API cuts healthy streams as if the worker had died). In a
    process of its own the check takes a core, not the process."""

    def __init__(self, spec: str, processes: int | None = None) -> None:
        self.spec = spec
        self.processes = processes or os.cpu_count() or 1
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._about: tuple[str, tuple[str, ...]] | None = None
        self._known: dict[str, bool] = {}

    @property
    def name(self) -> str:
        return self._identity()[0]

    @property
    def languages(self) -> tuple[str, ...]:
        return self._identity()[1]

    def transcribe(self, pcm: bytes) -> str:
        return self._call(_child_transcribe, pcm)

    def align(self, pcm: bytes, words: Sequence[str]) -> list[Word] | None:
        return self._call(_child_align, pcm, list(words))

    def knows(self, word: str) -> bool:
        """As the recognizer's ``knows``; True for one with an open vocabulary (no ``knows``)."""
        known = self._known.get(word)
        if known is None:
            known = self._known[word] = self._call(_child_knows, word)
        return known

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def _identity(self) -> tuple[str, tuple[str, ...]]:
        if self._about is None:
            self._about = self._call(_child_identity)
        return self._about

    def _call(self, fn, *args):
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    self.processes,
                    mp_context=multiprocessing.get_context("spawn"),  # no fork of a process with threads
                    initializer=_child_start,
                    initargs=(self.spec,),
                )
            pool = self._pool
        try:
            return pool.submit(fn, *args).result()
        except BrokenProcessPool:
            # a child died (killed, or the recognizer crashed it): this call fails, the next starts afresh
            with self._lock:
                if self._pool is pool:
                    self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            raise


_child: Recognizer | None = None  # the recognizer of a child process of InOwnProcess


def _child_start(spec: str) -> None:
    global _child
    _child = load_recognizer(spec)
    parent = os.getppid()
    threading.Thread(target=_exit_with, args=(parent,), name="synth-recognizer-parent", daemon=True).start()


def _exit_with(parent: int) -> None:
    """A child whose worker was killed outright (kill -9, the OOM killer) would wait for work
    forever, holding its recognizer's memory: it goes once it has another parent."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def _child_recognizer() -> Recognizer:
    assert _child is not None  # set by the pool's initializer
    return _child


def _child_identity() -> tuple[str, tuple[str, ...]]:
    recognizer = _child_recognizer()
    return recognizer.name, tuple(recognizer.languages)


def _child_transcribe(pcm: bytes) -> str:
    return _child_recognizer().transcribe(pcm)


def _child_align(pcm: bytes, words: list[str]) -> list[Word] | None:
    return _child_recognizer().align(pcm, words)


def _child_knows(word: str) -> bool:
    knows = getattr(_child_recognizer(), "knows", None)
    return True if knows is None else bool(knows(word))
