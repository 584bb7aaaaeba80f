"""Render jobs: claim them, hand all their text chunks to the engine at once, join each job's audio,
encode it, store it, and record the outcome and metrics. The worker's task is a thin call to this."""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import cast

import numpy as np
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from pipeline import audio, loudness, reuse, textfront
from pipeline.db import jobs as db
from pipeline.db.models import Batch, Job, utcnow
from pipeline.engines.base import AudioChunk, LiveSpec, SynthesisRequest
from pipeline.errors import (
    DatabaseUnavailableError,
    IllegalTransitionError,
    MarkupError,
    OutageError,
    PermanentError,
    RetryableError,
    SilentRenderError,
    StorageFullError,
)
from pipeline.formats import get_format
from pipeline.hostinfo import hostname
from pipeline.job_record import check_job, level_job, metrics_row
from pipeline.renderer import JobState, Outcome, Renderer
from pipeline.lexicon.store import NotFound as LexiconNotFound
from pipeline.lexicon.store import Pin
from pipeline.live import LiveAudio, LiveStreams
from pipeline.manifest import close_if_finished
from pipeline.retake import SEED_STEP
from pipeline.storage.base import audio_key
from pipeline.verify.jobs import CAPTION_TYPES, LaterChecks, caption_key
from pipeline.verify.verdict import PENDING

log = logging.getLogger(__name__)


def warm(r: Renderer) -> None:
    """Pay the render path's first-use costs at boot, with no job: the SQL statements' compiles,
    the live publisher's connection and thread, the text front end. The first job after boot, a
    realtime stream's above all, then pays none of them. A worker that boots while the database
    is away still starts: its messages wait for the database, as they would at any other time."""
    try:
        with r.sessions() as session:
            db.claim(session, ["warm-up"])  # no such job: compiles the claim, changes nothing
    except OperationalError as e:
        log.warning("database unreachable at boot, the claim is compiled at the first job: %s", e.orig)
    info = r.engine.info
    textfront.prepare("Warm up.", info.profile(info.voices[0]), read_emoji=r.read_emoji)
    # The meter's imports (scipy's signal package, a second of CPU) load beside the first jobs'
    # render rather than in front of it; a job that finishes first waits for them.
    threading.Thread(
        target=loudness.measure,
        args=(np.zeros(info.sample_rate, np.float32), info.sample_rate),
        name="loudness-warm-up",
        daemon=True,
    ).start()
    if r.live is not None:
        r.live.connect()
        _warm_live(r, r.live)


def _warm_live(r: Renderer, publisher: LiveAudio) -> None:
    """One short realtime request the way a speech request's job goes: its live stream written
    beside the engine's output (in the engine's own process, where it has one). The engine's own
    warm-up ran without a live stream and, for an engine in a process of its own, on the far side
    of the pipe: the first stream after boot paid for both (30 ms on a GPU). The stream's key
    expires with the live TTL; nobody listens to it."""
    info = r.engine.info
    job_id = f"warm-up-{publisher.owner}"
    request = SynthesisRequest(
        (job_id, 0),
        "Warm up.",
        info.voices[0],
        realtime=True,
        job=job_id,
        live=LiveSpec(job_id, 1, int(info.sample_rate * r.crossfade_ms / 1000)),
    )
    for _ in _synthesize(r, [request]):
        pass


def render_jobs(r: Renderer, job_ids: Sequence[str], *, realtime: bool = False) -> Outcome:
    """``realtime``: the realtime consumer's call, which never waits at the batch gate."""
    outcome = Outcome()
    gate = contextlib.nullcontext() if realtime else r.batch_gate
    _check_storage(r)
    with gate:
        try:
            with r.sessions() as session:
                jobs = db.claim(session, list(job_ids))
        except OperationalError as e:
            raise DatabaseUnavailableError(f"database unreachable while claiming jobs: {e.orig}") from e
        claimed = {j.id for j in jobs}
        outcome.skipped = [jid for jid in job_ids if jid not in claimed]
        states, requests = _plan(r, jobs, outcome)
    for state in states.values():
        state.gate = gate
    _render_pieces(r, states, requests, outcome)
    if states:  # an engine that ended without a final chunk for every request is a bug: say so
        # (and end its live streams here: the engine's side, their writer, never will)
        for job_id in list(states):
            _fail(r, job_id, "engine ended without finishing this job", outcome)
            states.pop(job_id)

    _close_finished_batches(r, job_ids, {j.batch_id for j in jobs}, set(outcome.closed))
    return outcome


def _render_pieces(
    r: Renderer, states: dict[str, JobState], requests: list[SynthesisRequest], outcome: Outcome
) -> None:
    """The requests through the engine, each chunk to its job. A piece the model left silent
    (SilentRenderError) is asked for again with another seed, as a retake is (pipeline/retake.py),
    up to ``r.silent_retries`` times; on the last, its job fails. One such piece in a book would
    otherwise hold back the whole book's assembly.

    A piece is asked again as soon as it comes back silent, on a thread of its own beside the
    other pieces' render, and ahead of the batch work waiting in the engine (``again``). Asked
    once the others had ended, it waited for the message's slowest piece, then for the engine's
    queue: on the H200 a book's slowest jobs, which fit that, took a minute where the others took
    20 s. Its chunks are taken here, in this thread, once the others' are."""
    by_key = {req.key: req for req in requests}
    tries: dict = {}
    later: queue.SimpleQueue = queue.SimpleQueue()  # the chunks of pieces asked again
    open_again = 0  # pieces asked again whose final chunk is not taken yet

    def take(chunk: AudioChunk) -> None:
        nonlocal open_again
        key = chunk.key
        silent: list | None = [] if tries.get(key, 0) < r.silent_retries else None
        _take(r, states, chunk, outcome, silent)
        if silent:
            tries[key] = tries.get(key, 0) + 1
            log.warning("piece %r came out silent; rendering it again with another seed", key)
            again = replace(by_key[key], seed=(by_key[key].seed or 0) + tries[key] * SEED_STEP, again=True)
            open_again += 1
            threading.Thread(target=_feed, args=(r, again, later), name="synth-again", daemon=True).start()

    for chunk in _synthesize(r, requests) if requests else ():
        take(chunk)
    while open_again:
        item = later.get()
        if isinstance(item, BaseException):
            raise item
        open_again -= item.final
        take(item)


def _feed(r: Renderer, request: SynthesisRequest, into: queue.SimpleQueue) -> None:
    """A piece asked again through the engine, its chunks (or what the engine raised) into ``into``."""
    try:
        for chunk in _synthesize(r, [request]):
            into.put(chunk)
    except Exception as e:  # noqa: BLE001 - whatever the engine raised, the caller raises in its thread
        into.put(e)


def _synthesize(r: Renderer, requests: list[SynthesisRequest]) -> Iterator[AudioChunk]:
    """The engine's chunks. An engine in a process of its own writes its realtime jobs' live
    streams there (``publishes_live``); any other's are written here, as its chunks pass."""
    if r.live is None or r.engine.publishes_live:
        return r.engine.synthesize(requests)
    streams = LiveStreams(r.live, requests, r.engine.info.sample_rate)
    return _tee(r.engine.synthesize(requests), streams) if streams else r.engine.synthesize(requests)


def _tee(chunks: Iterator[AudioChunk], streams: LiveStreams) -> Iterator[AudioChunk]:
    for chunk in chunks:
        streams.put(chunk)
        yield chunk


def _check_storage(r: Renderer) -> None:
    """While the store refuses writes, raise its StorageFullError before any job is claimed: the
    message waits the outage out without rendering audio that could not be kept."""
    if r.storage_fault is None:
        return
    try:
        r.store.check()
    except StorageFullError as e:
        r.storage_fault = e
        raise
    r.storage_fault = None


def retry_error(outcome: Outcome) -> RetryableError:
    """One error for the jobs ``outcome`` requeued, whose text says each distinct reason once: an
    outage where any job met one (the whole message then waits it out), else a RetryableError."""
    errors = [outcome.retry_errors[j] for j in outcome.retry if j in outcome.retry_errors]
    reasons = list(dict.fromkeys(str(e) for e in errors)) or ["requeued"]
    text = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} other reasons" if len(reasons) > 3 else "")
    outage = next((e for e in errors if isinstance(e, OutageError)), None)
    if isinstance(outage, StorageFullError):
        return StorageFullError(text, state=outage.state)
    return DatabaseUnavailableError(text) if outage is not None else RetryableError(text)


def _plan(r: Renderer, jobs: list[Job], outcome: Outcome):
    states: dict[str, JobState] = {}
    per_job: list[tuple[str, list[textfront.Speech], Job]] = []
    now, wall = time.monotonic(), utcnow()
    max_chars = min(r.max_chunk_chars, r.engine.info.max_text_chars or r.max_chunk_chars)
    with r.sessions() as session:
        scopes = reuse.scopes(session, [j for j in jobs if j.priority != "realtime"], r.reuse)
    for job in jobs:
        if job.voice not in r.engine.info.voices:
            _fail(r, job.id, f"voice {job.voice!r} is not served by engine {r.engine.info.name!r}", outcome)
            continue
        planned = _front(r, job, max_chars, outcome)
        if planned is None:
            continue
        chunks, pauses, notes = planned
        ident = (
            (
                scopes[job.id],
                reuse.identity(
                    r.engine.info,
                    job,
                    chunks,
                    pauses,
                    crossfade_ms=r.crossfade_ms,
                    lexicon=_lexicon_record(job),
                    seed=job.seed,
                ),
            )
            if job.id in scopes
            else None
        )
        if ident is not None and _reuse(r, job, ident, outcome):
            continue
        states[job.id] = JobState(
            job,
            [[] for _ in chunks],
            len(chunks),
            now,
            wall,
            len(jobs),
            live=r.live is not None and job.priority == "realtime",
            pauses=pauses,
            text_notes=notes,
            lexicon=_lexicon_record(job),
            identity=ident,
        )
        per_job.append((job.id, chunks, job))
    return states, _requests(r, states, per_job)


def _requests(
    r: Renderer, states: dict[str, JobState], per_job: list[tuple[str, list[textfront.Speech], Job]]
) -> list[SynthesisRequest]:
    """The engine's requests for the jobs' chunks: the first chunks of every job first, so each
    job's first audio comes early."""
    return [
        SynthesisRequest(
            (job_id, i),
            chunks[i].text,
            job.voice,
            seed=job.seed,
            realtime=job.priority == "realtime",
            rate=chunks[i].rate,
            job=job_id,
            live=_live_spec(r, states[job_id], len(chunks)),
        )
        for i in range(max((len(c) for _, c, _ in per_job), default=0))
        for job_id, chunks, job in per_job
        if i < len(chunks)
    ]


def _front(r: Renderer, job: Job, max_chars: int, outcome: Outcome):
    """The text front end (pipeline/textfront) over one job: its chunks, the pauses around them,
    and what was changed; None when the job failed here (malformed SSML, nothing to say)."""
    voice = r.engine.info.profile(job.voice)
    try:
        lexicon = _lexicon(r, job)
        prepared = textfront.prepare(job.text, voice, read_emoji=r.read_emoji, lexicon=lexicon)
    except (MarkupError, LexiconNotFound) as e:
        _fail(r, job.id, str(e), outcome)
        return None
    chunks, pauses = prepared.pieces(max_chars)
    if not chunks:
        _fail(r, job.id, textfront.unspeakable_reason(job.text, voice, prepared.notes), outcome)
        return None
    return chunks, pauses, prepared.notes


def _lexicon(r: Renderer, job: Job):
    """The job's lexicon version, compiled; LexiconNotFound where it was deleted since."""
    if job.lexicon_id is None:
        return None
    assert job.lexicon_version is not None  # plan_batch writes the two together
    with r.sessions() as session:
        return r.lexicons.get(session, Pin(job.lexicon_id, job.lexicon_version))


def _lexicon_record(job: Job) -> dict | None:
    return {"id": job.lexicon_id, "version": job.lexicon_version} if job.lexicon_id else None


def _live_spec(r: Renderer, state: JobState, pieces: int) -> LiveSpec | None:
    """What the writer of a realtime job's live stream needs to start, join and end it."""
    if not state.live:
        return None
    return LiveSpec(state.job.id, pieces, int(r.engine.info.sample_rate * r.crossfade_ms / 1000))


def _take(
    r: Renderer, states: dict[str, JobState], chunk: AudioChunk, outcome: Outcome, silent: list | None = None
) -> None:
    """``silent``: where a piece the model left silent goes to be asked for again (None: its job
    fails). A live stream's writer has ended its stream on the error already: its job fails."""
    job_id, index = cast(tuple[str, int], chunk.key)  # the keys _plan gave its requests
    state = states.get(job_id)
    if state is None:  # the job already failed on another piece
        return
    if isinstance(chunk.error, SilentRenderError) and silent is not None and not state.live:
        state.pieces[index] = []
        silent.append(chunk.key)
        return
    if chunk.error is not None:
        states.pop(job_id)
        if isinstance(chunk.error, RetryableError):  # the engine shed load: run the job again
            _requeue(r, job_id, chunk.error, outcome)
        else:  # a live stream was ended with this error by its writer
            _fail(r, job_id, str(chunk.error), outcome, end_live=not state.live)
        return
    if chunk.audio.size:
        state.pieces[index].append(chunk.audio)
        if index == 0 and state.first_audio is None:
            state.first_audio = time.monotonic()
    if chunk.final:
        _add_stats(state.stats, chunk.stats)
        state.open_pieces -= 1
        if state.open_pieces == 0:
            states.pop(job_id)
            with state.gate:
                _finish(r, state, outcome)


def _finish(r: Renderer, state: JobState, outcome: Outcome) -> None:
    job, info = state.job, r.engine.info
    pieces = [np.concatenate(p) if p else np.zeros(0, np.float32) for p in state.pieces]
    samples = audio.join(pieces, info.sample_rate, r.crossfade_ms, state.pauses)
    synth_s = time.monotonic() - state.admitted
    if samples.size == 0:
        _fail(r, job.id, "engine produced no audio", outcome, end_live=not state.live)
        return
    try:
        fmt = get_format(job.format)
        samples, level = level_job(job, samples, info.sample_rate, meter=r.meter_every_job)
        data = audio.encode(samples, info.sample_rate, job.format, job.sample_rate)
        key = audio_key(job.batch_id, job.id, job.client_id, fmt.extension)
        r.store.put(key, data, fmt.content_type)
        r.storage_fault = None
        checked = check_job(r, job, key, samples)
        metrics = metrics_row(r, state, samples, synth_s, level, checked)
        with r.sessions() as session:
            db.finish(session, job, object_key=key, metrics=metrics)
            if _only_job_of_batch(session, job) and close_if_finished(session, r.store, job.batch_id):
                outcome.closed.append(job.batch_id)  # one write for a speech request's job and batch
            session.commit()
        if checked and checked[0] == PENDING:  # recorded first: a check never finds its job unfinished
            assert isinstance(r.verifier, LaterChecks)  # the only verifier that leaves a job pending
            r.verifier.send(job.id)
        elif checked and r.retakes is not None:  # a bad render is rendered again (pipeline/retake.py)
            r.retakes.after(job, checked[0], 1)
        outcome.done.append(job.id)
        if state.identity is not None:
            reuse.remember(r.sessions, *state.identity, job_id=job.id, object_key=key, metrics=metrics)
    except IllegalTransitionError:
        _lost_race(r, job, key, outcome)
    except PermanentError as e:
        _fail(r, job.id, str(e), outcome, end_live=not state.live)
    except StorageFullError as e:
        r.storage_fault = e
        log.warning("job %s waits for storage (%s): %s", job.id, e.state, e)
        _requeue(r, job.id, e, outcome)
    except (RetryableError, OperationalError) as e:
        log.warning("job %s will be retried: %s", job.id, e)
        _requeue(
            r,
            job.id,
            e
            if isinstance(e, RetryableError)
            else DatabaseUnavailableError(f"database unreachable while recording the job: {e.orig}"),
            outcome,
        )


def _reuse(r: Renderer, job: Job, ident: tuple[str, str], outcome: Outcome) -> bool:
    """Finish ``job`` with a copy of a stored render of its identity (pipeline/reuse.py); False
    where there is none to be had, and the job renders as usual."""
    key = audio_key(job.batch_id, job.id, job.client_id, get_format(job.format).extension)
    try:
        copied = reuse.finish_with_copy(r.sessions, r.store, job, ident, key, worker_host=r.worker_host or hostname())
    except IllegalTransitionError:  # cancelled or finished meanwhile
        _lost_race(r, job, key, outcome)
        return True
    if copied:
        outcome.done.append(job.id)
    return copied


def _add_stats(total: dict, piece: dict) -> None:
    """Counters add up over a job's pieces; ``max_batch`` is a property of the engine, kept."""
    for k, v in piece.items():
        total[k] = v if k == "max_batch" else total.get(k, 0) + v


def _lost_race(r: Renderer, job: Job, key: str, outcome: Outcome) -> None:
    """The job was no longer running when its audio was stored: another copy of a redelivered
    message finished it first, or its batch was withdrawn or deleted. Either way this run did
    not fail; an object that no job refers to is removed at once."""
    with r.sessions() as session:
        current = session.get(Job, job.id)
        recorded = current.object_key if current is not None else None
    if recorded != key:
        for stored in (key, *(caption_key(key, fmt) for fmt in CAPTION_TYPES)):
            r.store.delete(stored)
    log.info("job %s was finished elsewhere or withdrawn while it rendered; this copy is dropped", job.id)
    outcome.skipped.append(job.id)


def _fail(r: Renderer, job_id: str, reason: str, outcome: Outcome, *, end_live: bool = True) -> None:
    """``end_live``: False where the job's live stream has a writer of its own (pipeline/live.py),
    which ended it: with the stored file made, or with the engine's error."""
    with r.sessions() as session:
        moved = db.fail(session, job_id, reason)
        session.commit()
    if r.live is not None and end_live:  # ends a live reader's wait (a no-op key with a TTL for batch jobs)
        r.live.end(job_id, reason)
    # Nothing moved: a concurrent copy of the message already finished the job (or it is gone).
    (outcome.failed if moved else outcome.skipped).append(job_id)


def _requeue(r: Renderer, job_id: str, error: RetryableError, outcome: Outcome) -> None:
    with r.sessions() as session:
        moved = db.requeue(session, [job_id], str(error))
        session.commit()
    if moved:
        outcome.retry.append(job_id)
        outcome.retry_errors[job_id] = error
    else:
        outcome.skipped.append(job_id)


def _only_job_of_batch(session: Session, job: Job) -> bool:
    batch = session.get(Batch, job.batch_id)
    return batch is not None and batch.total_jobs == 1


def fail_jobs(r: Renderer, reasons: dict[str, str]) -> None:
    """Record each job failed with its reason, outside a render (retries spent, an internal error),
    and close the batches that are now finished, as a render's last job does. A database error
    propagates: the caller keeps the message. A manifest that cannot be written is left to the
    message's next copy or the reconciler: the jobs' outcome is recorded."""
    with r.sessions() as session:
        for job_id, reason in reasons.items():
            db.fail(session, job_id, reason)
        session.commit()
    try:
        _close_finished_batches(r, list(reasons), set(), set())
    except RetryableError as e:
        log.warning("the batch of %d failed jobs is not closed yet: %s", len(reasons), e)


def _close_finished_batches(r: Renderer, job_ids: Sequence[str], claimed: set[str], closed: set[str]) -> None:
    """Close every finished batch this message touches, but those ``closed`` with their job's
    result. A batch of claimed jobs gets its manifest (re)written; a batch whose jobs were all
    skipped is closed only if it never was: the copy of the message that finished it may have
    died, or failed to write the manifest, before closing."""
    with r.sessions() as session:
        batch_ids = db.batches_of(session, job_ids) - closed
    for batch_id in sorted(batch_ids):
        with r.sessions() as session:
            if close_if_finished(session, r.store, batch_id, rewrite=batch_id in claimed):
                session.commit()
