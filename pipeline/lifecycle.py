"""The end of a batch's life: cancel (queued jobs stop, running ones finish, results kept), retry
(failed jobs queued again), delete (objects and rows), and expiry after the results TTL
(``expire_batches``, run by the synth.expire task). The CLI and the API both call these."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

import redis
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from pipeline.db import jobs as db
from pipeline.db.models import Batch, Job, JobStatus, sources_of, utcnow
from pipeline.db.session import rows_matched
from pipeline.errors import PermanentError
from pipeline.live import delete_live
from pipeline.manifest import write_manifest
from pipeline.storage import ObjectStore

log = logging.getLogger(__name__)


class BatchBusyError(PermanentError):
    """The batch still has running jobs; it can be deleted once they finish."""


class NothingToRetryError(PermanentError):
    """The batch has no failed job to retry (matching the filter), or it was cancelled."""


def cancel(session: Session, store: ObjectStore, batch_id: str, job_ids: Sequence[str] | None = None) -> int:
    """Cancel the batch's pending and queued jobs (or only ``job_ids``). A worker that later takes
    a cancelled job's message skips it (claim() only moves PENDING/QUEUED/RUNNING). Running jobs
    finish; finished ones keep their audio. Closes the batch (manifest) when nothing is left open.
    Returns the jobs cancelled; the caller commits."""
    now = utcnow()
    where = [Job.batch_id == batch_id, Job.status.in_(sources_of(JobStatus.CANCELLED))]
    if job_ids is not None:
        where.append(Job.id.in_(list(job_ids)))
    moved = rows_matched(
        session.execute(
            update(Job)
            .where(*where)
            .values(status=JobStatus.CANCELLED, finished_at=now, updated_at=now)
            .execution_options(synchronize_session=False)
        )
    )
    if job_ids is None:
        session.execute(
            update(Batch).where(Batch.id == batch_id, Batch.cancelled_at.is_(None)).values(cancelled_at=now)
        )
    if moved and db.batch_finished(session, batch_id):
        db.close_batch(session, batch_id, write_manifest(session, store, batch_id))
    return moved


def cancel_owned(session: Session, store: ObjectStore, key_id: str) -> int:
    """Cancel the open (pending and queued) jobs of every batch an API key owns, as a batch cancel
    does: what a revoked key had waiting is never rendered. Returns the jobs cancelled; the caller
    commits."""
    batch_ids = session.scalars(
        select(Batch.id).where(
            Batch.owner_key_id == key_id,
            Batch.finished_at.is_(None),
            select(Job.id).where(Job.batch_id == Batch.id, Job.status.in_(sources_of(JobStatus.CANCELLED))).exists(),
        )
    )
    return sum(cancel(session, store, batch_id) for batch_id in list(batch_ids))


def retry(session: Session, batch_id: str, *, reason: str | None = None) -> dict[str, list[str]]:
    """Queue the batch's failed jobs again (only those whose error contains ``reason``, given one):
    FAILED -> QUEUED with a conditional UPDATE, keeping their ids, client ids and attempt counts
    (the next claim counts on), and reopen the batch, which closes again with a fresh manifest at
    its last job. Returns the jobs moved, by queue, for ``send_messages`` once the caller has
    committed; a job whose message is never sent is found and re-sent by the reconciler. Refused
    (NothingToRetryError) for a cancelled batch or when no job matches."""
    batch = session.get(Batch, batch_id)
    if batch is not None and batch.cancelled_at is not None:
        raise NothingToRetryError(f"batch {batch_id} was cancelled; submit its lines again instead")
    where = [Job.batch_id == batch_id, Job.status == JobStatus.FAILED]
    if reason:
        where.append(Job.error.contains(reason, autoescape=True))
    rows = session.execute(
        select(Job.id, Job.queue).where(*where).order_by(Job.line_no, Job.client_id).with_for_update()
    ).all()
    if not rows:
        raise NothingToRetryError(
            f"batch {batch_id} has no failed jobs" + (f" whose reason contains {reason!r}" if reason else "")
        )
    now = utcnow()
    session.execute(
        update(Job)
        .where(*where)
        .values(status=JobStatus.QUEUED, queued_at=now, finished_at=None, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    session.execute(update(Batch).where(Batch.id == batch_id).values(finished_at=None))
    by_queue: dict[str, list[str]] = {}
    for job_id, queue in rows:
        by_queue.setdefault(queue, []).append(job_id)
    return by_queue


def running_jobs(session: Session, batch_id: str) -> int:
    return (
        session.scalar(select(func.count()).where(Job.batch_id == batch_id, Job.status == JobStatus.RUNNING)) or 0
    )  # a count is never NULL; the session's scalar() is typed for any statement


def delete(session: Session, store: ObjectStore, batch_id: str, live: redis.Redis | None = None) -> int:
    """Cancel what is queued, remove every object under the batch's prefix and (given ``live``, the
    Redis of pipeline/live.py) the jobs' live audio copies, then its rows. Refused (BatchBusyError)
    while a job is running: its worker would write an object after the delete. Returns the objects
    removed; the caller commits."""
    cancel(session, store, batch_id)
    running = running_jobs(session, batch_id)
    if running:
        raise BatchBusyError(f"batch {batch_id} has {running} running job(s); delete it when they finish")
    if live is not None:
        delete_live(live, list(session.scalars(select(Job.id).where(Job.batch_id == batch_id))))
    keys = store.list(f"batches/{batch_id}/")
    for key in keys:
        store.delete(key)
    batch = session.get(Batch, batch_id)
    if batch is not None:
        session.delete(batch)
    return len(keys)


def expire_batches(sessions: sessionmaker[Session], store: ObjectStore, now: datetime | None = None) -> int:
    """Delete every batch whose ``expires_at`` has passed (API batches; CLI batches have none).
    A batch still running is cancelled now and deleted on a later run. Returns batches deleted."""
    now = now or utcnow()
    with sessions() as session:
        ids = list(session.scalars(select(Batch.id).where(Batch.expires_at <= now)))
    deleted = 0
    for batch_id in ids:
        with sessions() as session:
            try:
                delete(session, store, batch_id)
            except BatchBusyError as e:
                session.commit()  # keep the cancellation
                log.info("expiry deferred: %s", e)
                continue
            session.commit()
            deleted += 1
    return deleted
