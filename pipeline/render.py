"""Render jobs: claim them, hand all their text chunks to the engine at once, join each job's audio,
encode it, store it, and record the outcome and metrics. The worker's task is a thin call to this."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from pipeline import audio, text
from pipeline.db import jobs as db
from pipeline.db.models import Job, as_utc, utcnow
from pipeline.engines.base import AudioChunk, Engine, SynthesisRequest
from pipeline.errors import EngineError, PermanentError, RetryableError, ServiceUnavailableError
from pipeline.hostinfo import hostname
from pipeline.live import LiveAudio, LiveJob
from pipeline.manifest import write_manifest
from pipeline.storage import ObjectStore
from pipeline.storage.base import audio_key

log = logging.getLogger(__name__)


@dataclass
class Renderer:
    engine: Engine
    store: ObjectStore
    sessions: sessionmaker[Session]
    max_chunk_chars: int = 400
    crossfade_ms: int = 30
    live: LiveAudio | None = None       # publishes realtime jobs' audio as it is made (pipeline/live.py)
    worker_host: str | None = None      # recorded per job; None: the host name


@dataclass
class Outcome:
    done: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    retry: list[str] = field(default_factory=list)     # requeued: the caller schedules them again
    skipped: list[str] = field(default_factory=list)   # already finished, cancelled or unknown


@dataclass
class _JobState:
    job: Job
    pieces: list[list[np.ndarray]]
    open_pieces: int
    admitted: float                     # monotonic time the job went to the engine
    admitted_wall: datetime
    batch_size: int                     # jobs handed to the engine together
    first_audio: float | None = None    # monotonic time of its first audio
    live: LiveJob | None = None
    stats: dict = field(default_factory=dict)   # the engine's counters, summed over pieces


def render_jobs(r: Renderer, job_ids: Sequence[str]) -> Outcome:
    outcome = Outcome()
    try:
        with r.sessions() as session:
            jobs = db.claim(session, list(job_ids))
    except OperationalError as e:
        raise ServiceUnavailableError(f"database unreachable while claiming jobs: {e.orig}") from e
    claimed = {j.id for j in jobs}
    outcome.skipped = [jid for jid in job_ids if jid not in claimed]

    states, requests = _plan(r, jobs, outcome)
    for chunk in r.engine.synthesize(requests) if requests else ():
        _take(r, states, chunk, outcome)
    if states:  # an engine that ended without a final chunk for every request is a bug: say so
        for job_id in list(states):
            _fail(r, job_id, "engine ended without finishing this job", outcome)
            states.pop(job_id)

    _close_finished_batches(r, {j.batch_id for j in jobs})
    return outcome


def _plan(r: Renderer, jobs: list[Job], outcome: Outcome):
    states: dict[str, _JobState] = {}
    per_job: list[tuple[str, list[str], Job]] = []
    now, wall = time.monotonic(), utcnow()
    for job in jobs:
        clean = text.normalize(job.text)
        if not text.has_speakable_content(clean):
            _fail(r, job.id, f"nothing speakable in line: {job.text[:60]!r}", outcome)
            continue
        if job.voice not in r.engine.info.voices:
            _fail(r, job.id, f"voice {job.voice!r} is not served by engine {r.engine.info.name!r}", outcome)
            continue
        chunks = text.split_chunks(clean, min(r.max_chunk_chars, r.engine.info.max_text_chars or r.max_chunk_chars))
        states[job.id] = _JobState(job, [[] for _ in chunks], len(chunks), now, wall, len(jobs),
                                   live=_live_job(r, job, len(chunks)))
        per_job.append((job.id, chunks, job))
    # First chunks of every job first, so each job's first audio comes early.
    requests = [
        SynthesisRequest((job_id, i), chunks[i], job.voice, seed=None, realtime=job.priority == "realtime")
        for i in range(max((len(c) for _, c, _ in per_job), default=0))
        for job_id, chunks, job in per_job if i < len(chunks)
    ]
    return states, requests


def _live_job(r: Renderer, job: Job, pieces: int) -> LiveJob | None:
    if r.live is None or job.priority != "realtime":
        return None
    if not r.live.start(job.id, r.engine.info.sample_rate):
        return None
    return LiveJob(r.live, job.id, pieces, int(r.engine.info.sample_rate * r.crossfade_ms / 1000))


def _take(r: Renderer, states: dict[str, _JobState], chunk: AudioChunk, outcome: Outcome) -> None:
    job_id, index = chunk.key
    state = states.get(job_id)
    if state is None:  # the job already failed on another piece
        return
    if chunk.error is not None:
        states.pop(job_id)
        if isinstance(chunk.error, RetryableError):   # the engine shed load: run the job again
            _requeue(r, job_id, str(chunk.error), outcome)
        else:
            _fail(r, job_id, str(chunk.error), outcome)
        return
    if state.live is not None:
        state.live.add(index, chunk.audio, chunk.final)
    if chunk.audio.size:
        state.pieces[index].append(chunk.audio)
        if index == 0 and state.first_audio is None:
            state.first_audio = time.monotonic()
    if chunk.final:
        _add_stats(state.stats, chunk.stats)
        state.open_pieces -= 1
        if state.open_pieces == 0:
            states.pop(job_id)
            if state.live is not None:
                state.live.close()
            _finish(r, state, outcome)


def _finish(r: Renderer, state: _JobState, outcome: Outcome) -> None:
    job, info = state.job, r.engine.info
    pieces = [np.concatenate(p) if p else np.zeros(0, np.float32) for p in state.pieces]
    samples = audio.join(pieces, info.sample_rate, r.crossfade_ms)
    synth_s = time.monotonic() - state.admitted
    if samples.size == 0:
        _fail(r, job.id, "engine produced no audio", outcome)
        return
    try:
        fmt = audio.get_format(job.format)
        data = audio.encode(samples, info.sample_rate, job.format, job.sample_rate)
        key = audio_key(job.batch_id, job.id, job.client_id, fmt.extension)
        r.store.put(key, data, fmt.content_type)
        audio_s = audio.duration_seconds(samples, info.sample_rate)
        first = state.first_audio or time.monotonic()
        first_wall = state.admitted_wall + timedelta(seconds=first - state.admitted)
        metrics = dict(
            queue_wait_s=_seconds(job.queued_at or job.created_at, state.admitted_wall),
            ttfb_s=_seconds(job.created_at, first_wall),
            synth_s=synth_s, audio_s=audio_s, rtf=synth_s / audio_s,
            engine=info.name, model=info.model, quantization=info.quantization,
            device_type=info.device_type, worker_host=r.worker_host or hostname(),
            batch_size=state.batch_size, extra=state.stats or None,
        )
        with r.sessions() as session:
            db.finish(session, job, object_key=key, metrics=metrics)
            session.commit()
        outcome.done.append(job.id)
    except PermanentError as e:
        _fail(r, job.id, str(e), outcome)
    except (RetryableError, OperationalError) as e:
        log.warning("job %s will be retried: %s", job.id, e)
        _requeue(r, job.id, str(e), outcome)


def _add_stats(total: dict, piece: dict) -> None:
    """Counters add up over a job's pieces; ``max_batch`` is a property of the engine, kept."""
    for k, v in piece.items():
        total[k] = v if k == "max_batch" else total.get(k, 0) + v


def _fail(r: Renderer, job_id: str, reason: str, outcome: Outcome) -> None:
    with r.sessions() as session:
        db.fail(session, job_id, reason)
        session.commit()
    if r.live is not None:  # ends a live reader's wait (a no-op key with a TTL for batch jobs)
        r.live.end(job_id, reason)
    outcome.failed.append(job_id)


def _requeue(r: Renderer, job_id: str, reason: str, outcome: Outcome) -> None:
    with r.sessions() as session:
        db.requeue(session, [job_id], reason)
        session.commit()
    outcome.retry.append(job_id)


def _seconds(start: datetime, end: datetime) -> float:
    return max(0.0, (end - as_utc(start)).total_seconds())


def _close_finished_batches(r: Renderer, batch_ids: set[str]) -> None:
    for batch_id in batch_ids:
        with r.sessions() as session:
            if db.batch_finished(session, batch_id):
                key = write_manifest(session, r.store, batch_id)
                db.close_batch(session, batch_id, key)
                session.commit()
