"""Render a done job again after a ``bad`` verdict, with another seed: the retake is stored under
``retakes/`` and checked, inline where the worker checks its own jobs, else on the verify queue;
pipeline/verify/retakes.py keeps the better of the two renders."""

from __future__ import annotations

from typing import cast

import numpy as np
from sqlalchemy import or_, update

from pipeline import audio, textfront
from pipeline.db.models import Job, JobMetrics, JobStatus
from pipeline.db.session import rows_matched
from pipeline.engines.base import SynthesisRequest
from pipeline.errors import PermanentError, RetryableError
from pipeline.formats import get_format
from pipeline.lexicon.store import job_lexicon
from pipeline.manifest import close_if_finished
from pipeline.job_record import level_job
from pipeline.renderer import Renderer
from pipeline.verify.jobs import LaterChecks
from pipeline.verify.queued import pending_record
from pipeline.verify.retakes import retake_key, settle
from pipeline.verify.verdict import PENDING

# A retake's seed, for an engine that takes one (Orpheus): the job's own (0 for the engine's) plus
# its render number times this, so each retake samples differently from the render before it, and
# a redelivered retake the same way. Piper draws its noise afresh on every render, seed or not.
SEED_STEP = 7919


def render_again(r: Renderer, job_id: str, render: int) -> bool:
    """Render number ``render`` of a done job, checked and settled (inline) or queued for its
    check. False where there is nothing to do: the job is gone, not done, rendered that many
    times already, or its retake's check is queued already (a redelivered message)."""
    with r.sessions() as session:
        job, metrics = session.get(Job, job_id), session.get(JobMetrics, job_id)
    if (
        job is None
        or metrics is None
        or job.status != JobStatus.DONE
        or not job.object_key
        or (metrics.renders or 1) >= render
        or metrics.verdict == PENDING
        or r.verifier is None
    ):
        return False
    info = r.engine.info
    samples, level = level_job(
        job, _synthesize(r, job, (job.seed or 0) + render * SEED_STEP), info.sample_rate, meter=r.meter_every_job
    )
    fmt = get_format(job.format)
    key = retake_key(job.object_key, render)
    r.store.put(key, audio.encode(samples, info.sample_rate, job.format, job.sample_rate), fmt.content_type)
    take = {
        "render": render,
        "key": key,
        "audio_s": audio.duration_seconds(samples, info.sample_rate),
        "loudness_lufs": level.lufs,
        "true_peak_dbtp": level.true_peak_dbtp,
        **pending_record(info.profile(job.voice)),
    }  # the voice, for a verify worker
    extra = metrics.extra or {}
    if isinstance(r.verifier, LaterChecks):
        _queue_check(r, r.verifier, job, metrics, {**take, "prior": metrics.verdict})
        return True
    result = r.verifier.check(
        samples,
        info.sample_rate,
        job.text,
        info.profile(job.voice),
        job_lexicon(r.sessions, r.lexicons, job.lexicon_id, job.lexicon_version),
    )
    status = settle(r.sessions, r.store, job, extra, metrics.verdict, take, result)
    if status is None:
        return True
    if r.retakes is not None:
        r.retakes.after(job, status, render)
    with r.sessions() as session:  # a finished batch's manifest, with the kept render's verdict
        if close_if_finished(session, r.store, job.batch_id, rewrite=True):
            session.commit()
    return True


def _queue_check(r: Renderer, later: LaterChecks, job: Job, metrics: JobMetrics, take: dict) -> None:
    """The retake's check goes to the verify queue: the job's verdict is pending meanwhile (the
    reconciler finds a lost check by it), the kept render's verdict kept with the retake."""
    render = take["render"]
    with r.sessions() as session:
        moved = rows_matched(
            session.execute(
                update(JobMetrics)
                .where(
                    JobMetrics.job_id == job.id,
                    JobMetrics.verdict == metrics.verdict,
                    or_(JobMetrics.renders.is_(None), JobMetrics.renders < render),
                )
                .values(verdict=PENDING, extra={**(metrics.extra or {}), "retake": take})
                .execution_options(synchronize_session=False)
            )
        )
        session.commit()
        now = None if moved else session.get(JobMetrics, job.id)
    if moved:
        later.send(job.id)
    elif now is None or (now.renders or 1) >= render:
        # A delivery of this message that outlived its visibility timeout, the retake settled by
        # the one that followed it: the object just stored under the same key is no one's. (Where
        # the other's check is still pending, it is left: that check removes it as it settles.)
        r.store.delete(take["key"])


def _synthesize(r: Renderer, job: Job, seed: int) -> np.ndarray:
    """The job's whole audio, as the first render made it but for the seed."""
    info = r.engine.info
    max_chars = min(r.max_chunk_chars, info.max_text_chars or r.max_chunk_chars)
    chunks, pauses = textfront.prepare(job.text, info.profile(job.voice), read_emoji=r.read_emoji).pieces(max_chars)
    pieces: list[list[np.ndarray]] = [[] for _ in chunks]
    requests = [
        SynthesisRequest((job.id, i), c.text, job.voice, seed=seed, rate=c.rate, job=job.id)
        for i, c in enumerate(chunks)
    ]
    for chunk in r.engine.synthesize(requests):
        if isinstance(chunk.error, RetryableError):
            raise chunk.error
        if chunk.error is not None:
            raise PermanentError(f"the retake failed: {chunk.error}") from chunk.error
        if chunk.audio.size:
            pieces[cast(tuple[str, int], chunk.key)[1]].append(chunk.audio)  # the requests' keys, above
    joined = [np.concatenate(p) if p else np.zeros(0, np.float32) for p in pieces]
    samples = audio.join(joined, info.sample_rate, r.crossfade_ms, pauses)
    if samples.size == 0:
        raise PermanentError("the retake produced no audio")
    return samples
