"""Render reuse: a job whose content identity was rendered before, in the same scope, copies that
audio instead of rendering it again.

The identity is what decides the audio: the engine, its model and quantization, the voice, the
text after the front end (the chunks the engine is given, their rates, and the pauses between),
the format settings (format, sample rate, loudness target and ceiling, crossfade) and the seed.
The scope is the job's API key by default (SYNTH_REUSE=key): a cache shared across keys would let
one tenant learn, from a job that costs nothing and finishes at once, that another had rendered
the same text. An operator serving one organisation can widen it (shared), or turn reuse off.
Batches submitted from the command line, which have no key, share the scope "".

A reused job's audio is a copy under its own key, so deleting the batch that rendered it first
takes nothing from it; the ``stored_renders`` row goes with the job that rendered it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from pipeline.db import jobs as db
from pipeline.db.models import Batch, Job, JobMetrics, JobStatus, StoredRender, as_utc, utcnow
from pipeline.errors import StorageError
from pipeline.formats import get_format
from pipeline.storage import ObjectStore
from pipeline.verify.jobs import CAPTION_TYPES, caption_key

log = logging.getLogger(__name__)

REUSE_MODES = ("key", "shared", "off")
SHARED_SCOPE = "*"
# Metrics a reused job takes from the job it copies: they describe the audio, not the work.
AUDIO_METRICS = (
    "audio_s",
    "loudness_lufs",
    "true_peak_dbtp",
    "verdict",
    "engine",
    "model",
    "quantization",
    "device_type",
)


def identity(
    info,
    job: Job,
    chunks: Sequence,
    pauses: Sequence[float] | None,
    *,
    crossfade_ms: int,
    lexicon: dict | None = None,
    seed: int | None = None,
) -> str:
    """sha256 of everything that decides a job's audio (``chunks``: the front end's Speech)."""
    parts = {
        "engine": info.name,
        "model": info.model,
        "quantization": info.quantization,
        "voice": job.voice,
        "chunks": [[c.text, c.rate] for c in chunks],
        "pauses": list(pauses or ()),
        "lexicon": lexicon,
        "format": job.format,
        "sample_rate": job.sample_rate,
        "loudness": job.loudness_target,
        "true_peak": job.true_peak_max,
        "crossfade_ms": crossfade_ms,
        "seed": seed,
    }
    if info.precision:  # Orpheus: its weights', cache's and codec's precisions change the audio
        parts["precision"] = info.precision
    return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def scopes(session: Session, jobs: Sequence[Job], mode: str) -> dict[str, str]:
    """Each job's scope by job id; empty when reuse is off."""
    if mode == "off" or not jobs:
        return {}
    if mode == "shared":
        return {j.id: SHARED_SCOPE for j in jobs}
    owners = dict(
        session.execute(select(Batch.id, Batch.owner_key_id).where(Batch.id.in_({j.batch_id for j in jobs}))).all()
    )
    return {j.id: owners.get(j.batch_id) or "" for j in jobs}


def remember(
    sessions: sessionmaker[Session], scope: str, ident: str, *, job_id: str, object_key: str, metrics: dict
) -> None:
    """Record a rendered job's identity. Two jobs of one identity rendered at once both try: the
    second finds the row taken and keeps the first, which is as good. Reuse saves work and is
    never needed, so a database fault here leaves the job done and is only logged."""
    kept = {k: metrics.get(k) for k in (*AUDIO_METRICS, "synth_s")}
    try:
        with sessions() as session:
            session.add(StoredRender(scope=scope, identity=ident, job_id=job_id, object_key=object_key, metrics=kept))
            session.commit()
    except IntegrityError:
        pass
    except OperationalError as e:
        log.warning("job %s is done; its render is not kept for reuse: %s", job_id, e.orig)


def forget(session: Session, job_ids: Sequence[str]) -> None:
    """Offer these jobs' renders no more: they are queued to render again (a new seed), and their
    rows would hand out the new audio under the old identity. The caller commits."""
    ids = list(job_ids)
    for start in range(0, len(ids), 1000):
        session.execute(
            delete(StoredRender)
            .where(StoredRender.job_id.in_(ids[start : start + 1000]))
            .execution_options(synchronize_session=False)
        )


def finish_with_copy(
    sessions: sessionmaker[Session], store: ObjectStore, job: Job, ident: tuple[str, str], key: str, *, worker_host: str
) -> bool:
    """Finish ``job`` with a copy, under ``key``, of the audio and captions of the job that rendered
    its identity, as that job is now (a retake may have replaced its audio). False where there is
    none, it is gone (its batch deleted), or the store or database failed: then the job renders.
    IllegalTransitionError where the job was cancelled or finished meanwhile."""
    with sessions() as session:
        found = session.get(StoredRender, ident)
        source = session.get(Job, found.job_id) if found is not None else None
        if (
            found is None
            or source is None
            or source.id == job.id
            or source.status != JobStatus.DONE
            or not source.object_key
        ):
            return False
        had = session.get(JobMetrics, source.id)
        kept = (found.metrics or {}) if had is None else {k: getattr(had, k) for k in (*AUDIO_METRICS, "synth_s")}
        verify = (had.extra or {}).get("verify") if had is not None else None
        precision = (had.extra or {}).get("precision") if had is not None else None
        source_key = source.object_key
    try:
        store.put(key, store.get(source_key), get_format(job.format).content_type)
        if store.exists(caption_key(source_key, "json")):
            for fmt, content_type in CAPTION_TYPES.items():
                store.put(caption_key(key, fmt), store.get(caption_key(source_key, fmt)), content_type)
        now = utcnow()
        metrics = {k: kept.get(k) for k in AUDIO_METRICS}
        metrics.update(
            queue_wait_s=_seconds(job.queued_at or job.created_at, now),
            ttfb_s=_seconds(job.created_at, now),
            synth_s=0.0,
            rtf=0.0,
            reused_s=kept.get("synth_s") or 0.0,
            batch_size=1,
            worker_host=worker_host,
            extra={
                "reused": {"job": found.job_id},
                **({"verify": verify} if verify else {}),
                **({"precision": precision} if precision else {}),
            },
        )
        with sessions() as session:
            db.finish(session, job, object_key=key, metrics=metrics)
            session.commit()
    except (StorageError, OperationalError) as e:
        log.info("job %s is rendered: the stored render of its text could not be copied: %s", job.id, e)
        return False
    return True


def _seconds(start, end) -> float:
    return (as_utc(end) - as_utc(start)).total_seconds()
