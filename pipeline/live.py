"""Live audio of a job while it renders: the process that runs the engine appends PCM16 chunks to a
Redis stream ``synth:audio:<job_id>``; a reader (the API) reads it from the start, so a late joiner
gets what was already produced and then blocks for the rest.

Each stream has one writer. Once a realtime job is handed to the engine, ``LiveStreams`` beside the
engine's output writes all of it: the start, the audio, and the end, an engine error's included
(in the engine's own process where it has one, pipeline/engines/hosted.py; else in the worker's,
pipeline/render.py). The worker writes a job's end itself only where no stream was handed over: a
job that failed before it reached the engine.

Entries, in order: ``start`` (sample rate, and the publishing worker's ``owner`` id), ``pcm``
(little-endian int16 mono bytes) ..., ``end`` (empty ``error`` on success). The key expires ``ttl``
seconds after its last write. The stored file stays the source of truth: a failure to publish is
logged and ends the live copy, never the job.

While a worker publishes, it keeps ``synth:alive:<owner>`` alive (``ALIVE_TTL_S``, refreshed every
second by a thread of its own): a reader whose stream goes quiet checks that key, so a worker
killed mid-stream cuts its listeners' streams within seconds instead of leaving them hanging.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import uuid
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import numpy as np
import redis

from pipeline import audio
from pipeline.errors import RetryableError, ServiceUnavailableError

if TYPE_CHECKING:
    from pipeline.engines.base import AudioChunk, SynthesisRequest

log = logging.getLogger(__name__)

STREAM_PREFIX = "synth:audio:"
ALIVE_PREFIX = "synth:alive:"
ALIVE_TTL_S = 10  # a publisher silent this long is dead to its readers (a busy host can
# hold a thread off the GIL for seconds: no false cuts)
_ALIVE_EVERY_S = 1.0
START, PCM, END = b"start", b"pcm", b"end"


def stream_key(job_id: str) -> str:
    return f"{STREAM_PREFIX}{job_id}"


def alive_key(owner: str) -> str:
    return f"{ALIVE_PREFIX}{owner}"


def delete_live(client: redis.Redis, job_ids: Sequence[str]) -> None:
    """Remove these jobs' live copies, so a deleted job's audio is served from nowhere."""
    keys = [stream_key(job_id) for job_id in job_ids]
    try:
        for i in range(0, len(keys), 1000):
            client.delete(*keys[i : i + 1000])
    except redis.RedisError as e:
        raise ServiceUnavailableError(f"cannot delete the live audio copies: {e}") from e


def redis_client_url(url: str) -> str:
    """kombu's ``redis+socket://`` (the embedded server) in the ``unix://`` form redis-py reads."""
    return "unix://" + url[len("redis+socket://") :] if url.startswith("redis+socket://") else url


class LiveAudio:
    """The publishing side, one per worker process."""

    def __init__(self, client: redis.Redis, ttl: int, owner: str | None = None) -> None:
        self.client = client
        self.ttl = ttl
        self.owner = owner or f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._lost: set[str] = set()  # jobs whose live copy failed to publish
        self._publisher: threading.Thread | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, ttl: int) -> LiveAudio:
        return cls(redis.Redis.from_url(redis_client_url(url)), ttl)

    def start(self, job_id: str, sample_rate: int) -> bool:
        """Begin (or, for a retried job, begin again) a job's live copy; False if Redis refused."""
        self._start_publisher()
        self._lost.discard(job_id)
        key = stream_key(job_id)
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.delete(key)
            pipe.xadd(key, {"kind": START, "rate": sample_rate, "owner": self.owner})
            pipe.expire(key, self.ttl)
            pipe.execute()
            return True
        except redis.RedisError as e:
            log.warning("live audio of job %s not started: %s", job_id, e)
            return False

    def pcm(self, job_id: str, samples: np.ndarray) -> bool:
        """Queue a chunk; the publisher thread writes it. False once the job's live copy is lost."""
        if job_id in self._lost:
            return False
        self._outbox.put((job_id, {"kind": PCM, "data": audio.to_int16(samples).astype("<i2").tobytes()}))
        return True

    def end(self, job_id: str, error: str | None = None) -> None:
        self._start_publisher()
        self._outbox.put((job_id, {"kind": END, "error": (error or "")[:500]}))

    def connect(self) -> None:
        """Connect and start the publisher thread now rather than on the first stream."""
        self._start_publisher()

    def _start_publisher(self) -> None:
        """Start the thread that writes every stream's chunks and keeps this publisher alive."""
        if self._publisher is not None:
            return
        with self._lock:
            if self._publisher is None:
                self._beat()
                self._publisher = threading.Thread(
                    target=_publish, args=(weakref.ref(self), self._outbox), name="synth-live-publisher", daemon=True
                )
                self._publisher.start()

    def _beat(self) -> None:
        try:
            self.client.set(alive_key(self.owner), b"1", ex=ALIVE_TTL_S)
        except redis.RedisError as e:
            log.warning("live audio keepalive not written: %s", e)

    def _write(self, entries: list[tuple[str, dict]]) -> None:
        """One round trip for every chunk waiting, in order; a failed write loses those jobs' copies."""
        pipe = self.client.pipeline(transaction=False)
        ended = []
        for job_id, fields in entries:
            if fields["kind"] == END:
                ended.append(job_id)
                if job_id in self._lost:
                    fields = {"kind": END, "error": fields["error"] or "live copy lost"}
            elif job_id in self._lost:
                continue
            pipe.xadd(stream_key(job_id), fields)
        for job_id in ended:
            pipe.expire(stream_key(job_id), self.ttl)
        try:
            pipe.execute()
        except redis.RedisError as e:
            log.warning("live audio of %d jobs stopped: %s", len({j for j, _ in entries}), e)
            self._lost.update(j for j, _ in entries)
        for job_id in ended:
            self._lost.discard(job_id)


def _publish(ref: weakref.ref[LiveAudio], outbox: queue.SimpleQueue) -> None:
    """The publisher thread: drain the outbox into one pipeline per wake-up, and refresh the alive
    key every second; ends when its LiveAudio is gone."""
    next_beat = time.monotonic() + _ALIVE_EVERY_S
    while True:
        try:
            entries = [outbox.get(timeout=_ALIVE_EVERY_S)]
        except queue.Empty:
            entries = []
        while True:
            try:
                entries.append(outbox.get_nowait())
            except queue.Empty:
                break
        live = ref()
        if live is None:
            return
        if entries:
            live._write(entries)
        if time.monotonic() >= next_beat:
            live._beat()
            next_beat = time.monotonic() + _ALIVE_EVERY_S
        del live


@dataclass
class LiveJob:
    """Publishes one job's pieces in text order as the engine yields them (pieces may finish out of
    order), joined with the same crossfade as the stored file: while a later piece will fade into
    this one, its last ``fade`` samples are held back until the next chunk (or the end) arrives.
    The last piece's chunks go out whole: held back, each would reach the player ``fade`` later
    than the engine made it, and a stream whose engine keeps only a little ahead of playback
    would run dry by that much at each chunk."""

    live: LiveAudio
    job_id: str
    pieces: int
    fade: int
    _pending: dict[int, list[np.ndarray]] = field(default_factory=dict)
    _finished: set[int] = field(default_factory=set)
    _current: int = 0
    _piece_started: bool = False
    _tail: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    _ok: bool = True

    def add(self, index: int, samples: np.ndarray, final: bool) -> None:
        if samples.size:
            self._pending.setdefault(index, []).append(samples)
        if final:
            self._finished.add(index)
        while self._ok and self._current < self.pieces:
            for part in self._pending.pop(self._current, []):
                self._emit(part)
            if self._current not in self._finished:
                break
            self._current += 1
            self._piece_started = False

    @property
    def complete(self) -> bool:
        """Every piece has had its final chunk: ``close`` ends the stream."""
        return self._current >= self.pieces

    def _emit(self, part: np.ndarray) -> None:
        head = self._tail
        if not self._piece_started and head.size and self._current > 0:
            n = min(self.fade, head.size, part.size)
            if n:  # the crossfade of audio.join(), applied at the piece boundary
                ramp = np.linspace(0.0, 1.0, n, dtype=np.float32)
                head = np.concatenate([head[:-n], head[-n:] * (1.0 - ramp) + part[:n] * ramp])
                part = part[n:]
        self._piece_started = True
        joined = np.concatenate([head, part.astype(np.float32, copy=False)])
        last_piece = self._current >= self.pieces - 1
        cut = joined.size if last_piece else max(0, joined.size - self.fade)
        self._tail = joined[cut:]
        if cut:
            self._ok = self.live.pcm(self.job_id, joined[:cut])

    def close(self, error: str | None = None) -> None:
        if self._ok and error is None and self._tail.size:
            self._ok = self.live.pcm(self.job_id, self._tail)
        self.live.end(self.job_id, error if error is not None else (None if self._ok else "live copy lost"))


class LiveStreams:
    """The live streams of one engine call, kept by whoever owns the engine's output: each request
    with a ``live`` spec is a piece of a realtime job whose stream starts here, gets its pieces as
    the engine makes them (``put`` every chunk of the call) and ends here after its last piece or
    at an engine error.

    A retryable error ends nothing: the job is requeued and its retry starts the stream afresh
    (its readers are told so), where an end would cut them off from a job that still renders."""

    def __init__(self, live: LiveAudio, requests: Sequence[SynthesisRequest], sample_rate: int) -> None:
        self.streams: dict[str, LiveJob] = {}
        specs = {req.live.job_id: req.live for req in requests if req.live is not None}
        for job_id, spec in specs.items():
            if live.start(job_id, sample_rate):  # else Redis refused: the job renders without a live copy
                self.streams[job_id] = LiveJob(live, job_id, spec.pieces, spec.fade)
        # request key -> the job whose stream it is a piece of
        self.jobs = {
            req.key: req.live.job_id for req in requests if req.live is not None and req.live.job_id in self.streams
        }

    def __bool__(self) -> bool:
        return bool(self.jobs)

    def put(self, chunk: AudioChunk) -> None:
        stream = self.streams.get(self.jobs.get(chunk.key, ""))
        if stream is None:  # not live, or its stream already ended
            return
        if chunk.error is not None:
            del self.streams[stream.job_id]
            if not isinstance(chunk.error, RetryableError):
                stream.close(str(chunk.error))
            return
        stream.add(cast(tuple[str, int], chunk.key)[1], chunk.audio, chunk.final)  # a live request's (job, piece)
        if stream.complete:
            del self.streams[stream.job_id]
            stream.close()
