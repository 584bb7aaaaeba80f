"""Live audio of a job while it renders: the worker appends PCM16 chunks to a Redis stream
``synth:audio:<job_id>``; a reader (the API) reads it from the start, so a late joiner gets what was
already produced and then blocks for the rest.

Entries, in order: ``start`` (sample rate), ``pcm`` (little-endian int16 mono bytes) ..., ``end``
(empty ``error`` on success). The key expires ``ttl`` seconds after its last write. The stored file
stays the source of truth: a failure to publish is logged and ends the live copy, never the job.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import redis

from pipeline import audio
from pipeline.errors import ServiceUnavailableError

log = logging.getLogger(__name__)

STREAM_PREFIX = "synth:audio:"
START, PCM, END = b"start", b"pcm", b"end"


def stream_key(job_id: str) -> str:
    return f"{STREAM_PREFIX}{job_id}"


def delete_live(client: redis.Redis, job_ids: Sequence[str]) -> None:
    """Remove these jobs' live copies, so a deleted job's audio is served from nowhere."""
    keys = [stream_key(job_id) for job_id in job_ids]
    try:
        for i in range(0, len(keys), 1000):
            client.delete(*keys[i:i + 1000])
    except redis.RedisError as e:
        raise ServiceUnavailableError(f"cannot delete the live audio copies: {e}") from e


def redis_client_url(url: str) -> str:
    """kombu's ``redis+socket://`` (the embedded server) in the ``unix://`` form redis-py reads."""
    return "unix://" + url[len("redis+socket://"):] if url.startswith("redis+socket://") else url


class LiveAudio:
    """The publishing side, one per worker process."""

    def __init__(self, client: redis.Redis, ttl: int) -> None:
        self.client = client
        self.ttl = ttl

    @classmethod
    def from_url(cls, url: str, ttl: int) -> LiveAudio:
        return cls(redis.Redis.from_url(redis_client_url(url)), ttl)

    def _add(self, job_id: str, fields: dict, *, reset: bool = False) -> bool:
        key = stream_key(job_id)
        try:
            pipe = self.client.pipeline(transaction=False)
            if reset:  # a retried job starts its live copy over
                pipe.delete(key)
            pipe.xadd(key, fields)
            pipe.expire(key, self.ttl)
            pipe.execute()
            return True
        except redis.RedisError as e:
            log.warning("live audio of job %s stopped: %s", job_id, e)
            return False

    def start(self, job_id: str, sample_rate: int) -> bool:
        return self._add(job_id, {"kind": START, "rate": sample_rate}, reset=True)

    def pcm(self, job_id: str, samples: np.ndarray) -> bool:
        return self._add(job_id, {"kind": PCM, "data": audio.to_int16(samples).astype("<i2").tobytes()})

    def end(self, job_id: str, error: str | None = None) -> None:
        self._add(job_id, {"kind": END, "error": (error or "")[:500]})


@dataclass
class LiveJob:
    """Publishes one job's pieces in text order as the engine yields them (pieces may finish out of
    order), joined with the same crossfade as the stored file: the last ``fade`` samples are held
    back until the next piece (or the end) arrives."""

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
        cut = max(0, joined.size - self.fade)
        self._tail = joined[cut:]
        if cut:
            self._ok = self.live.pcm(self.job_id, joined[:cut])

    def close(self, error: str | None = None) -> None:
        if self._ok and error is None and self._tail.size:
            self._ok = self.live.pcm(self.job_id, self._tail)
        self.live.end(self.job_id, error if error is not None else (None if self._ok else "live copy lost"))
