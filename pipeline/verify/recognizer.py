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
import pickle
import signal
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, cast

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
    process of its own the check takes a core, not the process.

    The children are daemons on pipes of their own, not a ProcessPoolExecutor: at exit an executor
    waits for every check queued to it, so a worker stopped mid-batch (Ctrl-C on an embedded
    submit) waited for the whole backlog. A daemon child is stopped at its parent's exit, and
    leaves on its own once the parent is gone (its pipe closes), however the parent ended."""

    def __init__(self, spec: str, processes: int | None = None) -> None:
        self.spec = spec
        self.processes = processes or os.cpu_count() or 1
        self._ready = threading.Condition()
        self._idle: list[_Child] = []
        self._running = 0  # children started and not stopped, idle or busy
        self._about: tuple[str, tuple[str, ...]] | None = None
        self._known: dict[str, bool] = {}
        # dropped without close() (a worker's runtime ends with it): its idle children go with it
        weakref.finalize(self, _stop_all, self._idle)

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
        with self._ready:
            idle = list(self._idle)
            self._idle.clear()  # the list the finalizer holds
            self._running -= len(idle)
        _stop_all(idle)

    def _identity(self) -> tuple[str, tuple[str, ...]]:
        if self._about is None:
            self._about = self._call(_child_identity)
        return self._about

    def _call(self, fn, *args):
        child = self._take()
        try:
            ok, value = child.call(fn, args)
        except BaseException:
            # it died (killed, or the recognizer crashed it), or this thread was interrupted
            # mid-call with an answer still to come: either way it serves no other call
            child.stop()
            with self._ready:
                self._running -= 1
                self._ready.notify()
            raise
        with self._ready:
            self._idle.append(child)
            self._ready.notify()
        if not ok:
            raise cast(BaseException, value)
        return value

    def _take(self) -> _Child:
        with self._ready:
            while not self._idle and self._running >= self.processes:
                self._ready.wait()
            if self._idle:
                return self._idle.pop()
            self._running += 1
        try:
            return _Child.start(self.spec)
        except BaseException:
            with self._ready:
                self._running -= 1
                self._ready.notify()
            raise


class _Child:
    """One child process of InOwnProcess and its end of the pipe: calls go one at a time."""

    def __init__(self, process, conn) -> None:
        self.process, self.conn = process, conn

    @classmethod
    def start(cls, spec: str) -> _Child:
        context = multiprocessing.get_context("spawn")  # no fork of a process with threads
        conn, theirs = context.Pipe()
        process = context.Process(target=_serve, args=(spec, theirs), name="synth-recognizer", daemon=True)
        process.start()
        theirs.close()  # the child's end lives in the child alone: its death closes the pipe here
        child = cls(process, conn)
        ok, value = child.receive()  # loaded, or why not (an InputError for a missing package)
        if not ok:
            child.stop()
            raise cast(BaseException, value)
        return child

    def call(self, fn, args: tuple) -> tuple[bool, object]:
        self.conn.send((fn, args))
        return self.receive()

    def receive(self) -> tuple[bool, object]:
        try:
            return self.conn.recv()
        except EOFError:
            raise RuntimeError(f"the recognizer's process ended (exit code {self.process.exitcode})") from None

    def stop(self) -> None:
        self.conn.close()
        self.process.terminate()
        self.process.join(5)


def _stop_all(children: list[_Child]) -> None:
    for child in children:
        child.stop()


_child: Recognizer | None = None  # the recognizer of a child process of InOwnProcess


def _serve(spec: str, conn) -> None:
    """A child's life: load the recognizer, then answer calls until the pipe closes (the parent
    stopped it, or is gone). Ctrl-C at a terminal reaches the child too: the parent decides."""
    global _child
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _child = load_recognizer(spec)
    except Exception as e:  # noqa: BLE001 - the parent raises it where the recognizer was asked for
        conn.send((False, e))
        return
    conn.send((True, None))
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            answer = (True, fn(*args))
        except Exception as e:  # noqa: BLE001 - the call's own error, raised in the parent
            answer = (False, e)
        try:
            try:
                conn.send(answer)
            except (pickle.PicklingError, TypeError, AttributeError):  # an answer or error pickle cannot carry
                conn.send((False, RuntimeError(f"the recognizer's {fn.__name__}: {answer[1]!r}")))
        except OSError:  # the parent is gone
            return


def _child_recognizer() -> Recognizer:
    assert _child is not None  # set by _serve before any call
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
