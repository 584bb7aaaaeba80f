"""The engine interface.

A worker process builds its engine once at boot (``load_engine``), calls ``warmup()``, then hands it
many requests at once. ``synthesize`` yields audio chunks as they become available, interleaved across
requests, so a caller can stream the first chunk of each request long before the batch ends.
"""

from __future__ import annotations

import abc
import logging
import threading
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from pipeline.errors import EngineError, RetryableError
from pipeline.textfront import VoiceProfile

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SynthesisRequest:
    key: Hashable  # the caller's name for this request; chunks come back with it
    text: str
    voice: str
    seed: int | None = None
    realtime: bool = False  # admitted ahead of batch work where the engine schedules
    rate: float = 1.0  # speaking rate (SSML prosody); honoured where EngineInfo.rate_control
    # The job this request is a piece of (None: a job of its own). Engines share realtime turns
    # between jobs, not pieces, so a long job's many pieces do not queue a short job behind them.
    job: Hashable | None = None
    # A realtime job's: this request is piece ``key[1]`` of job ``live.job_id``'s live stream,
    # written, start to end, beside the engine's output (pipeline/live.py ``LiveStreams``).
    live: LiveSpec | None = None
    # Asked again: a piece the model left silent under another seed. It waited behind the batch
    # work once already; where the engine queues batch work, it goes ahead of what waits, so its
    # job, and a document's chapter, does not end a second queue's wait after the rest.
    again: bool = False

    @property
    def group(self) -> Hashable:
        """What shares a turn: the job, or the request alone."""
        return self.key if self.job is None else self.job


@dataclass(frozen=True)
class LiveSpec:
    job_id: str
    pieces: int  # the job's pieces: the stream ends after the last one
    fade: int  # crossfade samples between pieces, as in the stored file


@dataclass
class AudioChunk:
    key: Hashable
    audio: np.ndarray  # float32 mono in [-1, 1] at EngineInfo.sample_rate; may be empty on error
    final: bool  # the last chunk of this request
    error: EngineError | RetryableError | None = None  # retryable: run the job again later
    # On the final chunk, the engine's counters for this request (tokens, slot steps ...);
    # the renderer sums them over a job's pieces into job_metrics.extra for the reports.
    stats: dict = field(default_factory=dict)


# The precisions an engine's ``EngineInfo.extra`` may name: its weights', its KV cache's and its
# codec's (Orpheus: "auto" settings resolve at load, so the value is what ran).
PRECISION_KEYS = ("dtype", "kv_dtype", "codec_dtype")


@dataclass(frozen=True)
class EngineInfo:
    name: str  # "piper", "orpheus"
    model: str  # model id or folder name
    quantization: str  # "none", "int8", "nf4", ...
    device_type: str  # GPU name or CPU model, recorded per job
    sample_rate: int
    voices: tuple[str, ...]
    max_batch: int = 1
    max_text_chars: int | None = None  # longest text one request may carry; callers split longer
    extra: dict = field(default_factory=dict)
    # What the text front end (pipeline/textfront) needs to know: each voice's languages (their
    # scripts are kept, others dropped; a voice not listed keeps every script), the inline tags
    # the engine performs (Orpheus: laugh, sigh ...; others lose them), and whether
    # SynthesisRequest.rate changes the speaking rate.
    languages: dict[str, tuple[str, ...]] = field(default_factory=dict)
    inline_tags: tuple[str, ...] = ()
    rate_control: bool = False
    phoneme_input: bool = False  # IPA in [[ ... ]] blocks is spoken as those phonemes (Piper)

    @property
    def precision(self) -> dict:
        """The precisions the engine runs at, where it says (``extra``: PRECISION_KEYS): each job
        records them, and a stored render is reused only at the same ones (pipeline/reuse.py)."""
        return {k: self.extra[k] for k in PRECISION_KEYS if k in self.extra}

    def profile(self, voice: str) -> VoiceProfile:
        return VoiceProfile(
            voice, self.languages.get(voice, ()), frozenset(self.inline_tags), self.rate_control, self.phoneme_input
        )


class Engine(abc.ABC):
    info: EngineInfo
    # Whether the engine writes its requests' live streams itself (``SynthesisRequest.live``), in
    # a process of its own, after ``publish_live``; otherwise the caller writes them from the
    # chunks it is handed, in the engine's process too (pipeline/render.py ``_synthesize``).
    publishes_live: bool = False

    def publish_live(self, url: str, ttl: int, owner: str) -> None:
        """Publish live audio to the Redis at ``url`` as ``owner`` (pipeline/live.py), where the
        engine runs apart from its caller and can skip the hop through it. Most engines do not."""

    def warmup(self) -> None:
        """Run a short synthesis, as batch work and as a realtime stream (which an engine may run
        on paths of its own), so the first job of either kind sees no load or compile time."""
        for realtime in (False, True):
            request = SynthesisRequest("warmup", "Warm up.", self.info.voices[0], realtime=realtime)
            for _ in self.synthesize([request]):
                pass

    @abc.abstractmethod
    def synthesize(self, requests: Sequence[SynthesisRequest]) -> Iterator[AudioChunk]:
        """Yield chunks for all requests. A request the engine cannot render yields one final chunk
        with ``error`` set; the others carry on. Every request ends with exactly one final chunk."""

    def submit(self, requests: Sequence[SynthesisRequest], sink) -> None:
        """Start the requests and return; their chunks go to ``sink.put`` from the engine's threads,
        in the order ``synthesize`` would yield them. An engine with a loop of its own hands the
        requests to it; this default runs ``synthesize`` on a thread of the call's own."""

        def run() -> None:
            open_keys = {req.key for req in requests}
            try:
                for chunk in self.synthesize(requests):
                    if chunk.final:
                        open_keys.discard(chunk.key)
                    sink.put(chunk)
            except Exception as e:  # the call's unfinished requests end with the error
                log.exception("engine call failed")
                for key in open_keys:
                    sink.put(AudioChunk(key, np.zeros(0, np.float32), True, EngineError(f"engine failed: {e}")))

        threading.Thread(target=run, name="engine-call", daemon=True).start()

    def close(self) -> None:
        """Release threads, sessions and device memory."""
