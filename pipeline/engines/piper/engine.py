"""Piper on the CPU, batching across jobs with a thread pool sized to the cores.

Each ONNX run is single-threaded (intra_op_num_threads=1) and onnxruntime releases the GIL, so N
threads keep N cores busy on N different requests: better throughput on short texts than one
request using all cores. espeak-ng (phonemization) is not thread-safe, so it runs under a lock; it
costs a few percent of the synthesis time.

The pool works one sentence at a time, most urgent first: realtime requests before batch ones.
Batch requests go in arrival order (a request's next sentence keeps its place). Realtime jobs take
turns, a sentence each (``SynthesisRequest.job``: a job's pieces share one turn, in text order), so
a short stream that arrives while a long one renders waits for one sentence per thread, not for
the long one's every piece. A realtime request therefore never waits for the batch work queued
before it, nor for more than a sentence of another stream.
"""

from __future__ import annotations

import itertools
import heapq
import json
import logging
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Sequence
from pathlib import Path

import numpy as np

from pipeline.engines.base import AudioChunk, Engine, EngineInfo, SynthesisRequest
from pipeline.engines.piper.voices import VOICE_PACKAGES, voice_model_path
from pipeline.errors import EngineError, EngineUnavailableError, UnknownVoiceError
from pipeline.hostinfo import cpu_name

log = logging.getLogger(__name__)

PEAK = 0.95  # normalize each sentence to this peak, leaving headroom for lossy encoders


def voice_language(config: dict) -> str:
    """A Piper voice's language as its config names it (en_US), else its espeak voice (en-us)."""
    return (config.get("language") or {}).get("code") or config["espeak"]["voice"]


class PiperEngine(Engine):
    def __init__(self, models: dict[str, Path], threads: int) -> None:
        try:
            import onnxruntime
            from piper import PiperVoice
            from piper.config import PiperConfig, SynthesisConfig
        except ImportError as e:
            raise EngineUnavailableError(f"Piper is not installed: pip install 'synth[piper]' ({e})") from e
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self._voices = {}
        languages: dict[str, tuple[str, ...]] = {}
        for name, path in models.items():
            config = json.loads(Path(f"{path}.json").read_text(encoding="utf-8"))
            languages[name] = (voice_language(config),)
            session = onnxruntime.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
            self._voices[name] = PiperVoice(session=session, config=PiperConfig.from_dict(config))
        self._synthesis_config = SynthesisConfig  # built per request, with its rate
        self._phonemize_lock = threading.Lock()
        self._pool = _UrgentFirstPool(threads)
        rates = {v.config.sample_rate for v in self._voices.values()}
        if len(rates) != 1:
            raise EngineUnavailableError(f"Piper voices with different sample rates: {sorted(rates)}")
        first = next(iter(models.values()))
        self.info = EngineInfo(
            name="piper",
            model=first.stem,
            quantization="none",
            device_type=cpu_name(),
            sample_rate=rates.pop(),
            voices=tuple(models),
            max_batch=threads,
            languages=languages,
            rate_control=True,
            phoneme_input=True,
        )

    @classmethod
    def from_settings(cls, settings) -> PiperEngine:
        if settings.model:  # a custom voice: path to a .onnx with its .onnx.json beside it
            path = Path(settings.model)
            if not path.is_file() or not Path(f"{path}.json").is_file():
                raise EngineUnavailableError(f"Piper model {path} or its {path.name}.json is missing")
            models = {path.stem: path}
        else:
            names = settings.voices or tuple(VOICE_PACKAGES)
            models = {name: voice_model_path(name) for name in names}
        return cls(models, threads=settings.threads)

    def synthesize(self, requests: Sequence[SynthesisRequest]) -> Iterator[AudioChunk]:
        out: queue.Queue[AudioChunk] = queue.Queue()
        for request in requests:
            self._pool.submit(request.realtime, request.group, self._start, request, out)
        remaining = len(requests)
        while remaining:
            chunk = out.get()
            if chunk.final:
                remaining -= 1
            yield chunk

    def _start(self, place, request: SynthesisRequest, out: queue.Queue[AudioChunk]) -> None:
        """Runs on a pool thread: phonemize, then queue the first sentence in this request's place."""
        try:
            voice = self._voices.get(request.voice)
            if voice is None:
                raise UnknownVoiceError(f"voice {request.voice!r} is not loaded in this worker")
            with self._phonemize_lock:
                sentences = [p for p in voice.phonemize(request.text) if p]
            if not sentences:
                raise EngineError(f"nothing speakable in {request.text[:60]!r}")
        except Exception as e:  # noqa: BLE001 - this request fails, the others carry on
            self._failed(request, out, e)
            return
        # A faster rate is a shorter phoneme length (SSML prosody rate).
        syn = self._synthesis_config(normalize_audio=False, length_scale=voice.config.length_scale / request.rate)
        self._pool.resubmit(place, self._sentence, request, voice, syn, sentences, 0, out)

    def _sentence(
        self, place, request: SynthesisRequest, voice, syn, sentences: list, i: int, out: queue.Queue[AudioChunk]
    ) -> None:
        """Runs on a pool thread: one sentence's chunk, then the next sentence in the same place."""
        try:
            ids = voice.phonemes_to_ids(sentences[i])
            audio = np.asarray(voice.phoneme_ids_to_audio(ids, syn), dtype=np.float32)
        except Exception as e:  # noqa: BLE001 - an onnxruntime failure on this input fails this request only
            self._failed(request, out, e)
            return
        peak = float(np.max(np.abs(audio))) if audio.size else 0.0
        if peak > 1e-8:
            audio = audio * (PEAK / peak)
        last = i == len(sentences) - 1
        out.put(AudioChunk(request.key, audio, final=last))
        if not last:
            self._pool.resubmit(place, self._sentence, request, voice, syn, sentences, i + 1, out)

    @staticmethod
    def _failed(request: SynthesisRequest, out: queue.Queue[AudioChunk], e: Exception) -> None:
        if not isinstance(e, EngineError):
            log.error("piper failed on request %r", request.key, exc_info=e)
            err = EngineError(f"piper failed: {type(e).__name__}: {e}")
            err.__cause__ = e
            e = err
        out.put(AudioChunk(request.key, np.zeros(0, np.float32), final=True, error=e))

    def close(self) -> None:
        self._pool.close()


class _UrgentFirstPool:
    """Threads that take the most urgent item first: realtime items, a turn per group (a job) in
    rotation and a group's own items in arrival order; then batch items in arrival order.
    ``fn(place, *args)`` gets its place, so a continuation can keep it (``resubmit``)."""

    def __init__(self, threads: int) -> None:
        self._ready = threading.Condition()
        self._turns: OrderedDict[Hashable, list] = OrderedDict()  # realtime: group -> its heap
        self._batch: list = []  # heap
        self._order = itertools.count()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._work, name=f"piper-{i}", daemon=True) for i in range(max(1, threads))
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, urgent: bool, group: Hashable, fn: Callable, *args) -> None:
        self.resubmit((0 if urgent else 1, next(self._order), group), fn, *args)

    def resubmit(self, place: tuple[int, int, Hashable], fn: Callable, *args) -> None:
        item = (place[:2], next(self._order), place, fn, args)  # ordered by (class, arrival)
        with self._ready:
            heapq.heappush(self._turns.setdefault(place[2], []) if place[0] == 0 else self._batch, item)
            self._ready.notify()

    def close(self) -> None:
        """Stop the threads once every queued item has run."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()
        for thread in self._threads:
            thread.join()

    def _take(self):
        """The next item, or None once closed and drained."""
        with self._ready:
            while not (self._turns or self._batch or self._closed):
                self._ready.wait()
            if self._turns:
                group, heap = self._turns.popitem(last=False)
                item = heapq.heappop(heap)
                if heap:
                    self._turns[group] = heap  # its next turn comes after every other group's
                return item
            return heapq.heappop(self._batch) if self._batch else None

    def _work(self) -> None:
        while (item := self._take()) is not None:
            _, _, place, fn, args = item
            fn(place, *args)
