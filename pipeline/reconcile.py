"""Find work the queue has lost and put it back or close it. `synth beat` runs it periodically and
every worker once at start (worker/maintenance.py); rendering is idempotent, so an extra enqueue
costs a skipped message, never a second object.

- a job open (pending, queued or running) untouched for ``stale_after`` that no message in Redis
  names (pipeline/messages.py: a queue's list or a worker's unacked hash) is re-enqueued;
- a batch whose jobs are all finished but which was never closed is closed, with its manifest;
- a done job whose check waits on the verify queue (verdict ``pending``) since ``stale_after``
  that no verify message names is sent again (pipeline/verify/queued.py);
- an audio object no done job refers to (its job failed or never recorded it, or its batch is
  gone) is removed once older than ``object_grace``, and so is a retake whose check is not
  waiting (pipeline/retake.py) and a manifest of a batch that is gone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

import redis
from sqlalchemy import exists, select
from sqlalchemy.orm import Session, sessionmaker

from pipeline.db import jobs as db
from pipeline.db.models import Batch, Job, JobMetrics, JobStatus, as_utc, utcnow
from pipeline.manifest import close_if_finished
from pipeline.messages import job_ids_in_messages
from pipeline.storage import ObjectStore
from pipeline.storage.base import manifest_key
from pipeline.verify.queued import stranded

log = logging.getLogger(__name__)

# A message moves between a queue's list and the unacked hash in a few milliseconds; a job younger
# than this is never judged stranded, so that move is never mistaken for a loss.
STALE_AFTER = timedelta(minutes=2)
# A worker stores a job's audio, then records it: an object is only an orphan well after that.
OBJECT_GRACE = timedelta(hours=1)
OPEN = (JobStatus.PENDING, JobStatus.QUEUED, JobStatus.RUNNING)
LOST_MESSAGE = "its message was lost; re-enqueued"


@dataclass
class Reconciled:
    requeued: int = 0  # jobs re-enqueued
    closed: int = 0  # batches closed
    removed: int = 0  # orphan objects removed
    rechecked: int = 0  # jobs whose lost verify message was sent again

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def reconcile(
    sessions: sessionmaker[Session],
    store: ObjectStore,
    client: redis.Redis,
    *,
    queues: Sequence[str],
    send: Callable[[str, list[str]], None],
    jobs_per_task: int,
    send_check: Callable[[str], None] | None = None,
    now: datetime | None = None,
    stale_after: timedelta = STALE_AFTER,
    object_grace: timedelta = OBJECT_GRACE,
) -> Reconciled:
    """One pass. ``send(queue, job_ids)`` puts one render message on a queue; ``send_check(job_id)``
    one verify message on the verify queue."""
    now = now or utcnow()
    done = Reconciled(
        requeued=requeue_stranded(
            sessions, client, queues=queues, send=send, jobs_per_task=jobs_per_task, before=now - stale_after
        ),
        closed=close_unclosed(sessions, store),
        removed=remove_orphans(sessions, store, before=now - object_grace),
        rechecked=stranded(sessions, client, send=send_check, before=now - stale_after) if send_check else 0,
    )
    if any(done.as_dict().values()):
        log.warning(
            "reconciled: %d jobs re-enqueued, %d batches closed, %d orphan objects removed, %d checks sent again",
            done.requeued,
            done.closed,
            done.removed,
            done.rechecked,
        )
    return done


def requeue_stranded(
    sessions: sessionmaker[Session],
    client: redis.Redis,
    *,
    queues: Sequence[str],
    send: Callable[[str, list[str]], None],
    jobs_per_task: int,
    before: datetime,
) -> int:
    # Redis is read before and after the database: a message in passing is seen in one of them.
    held = job_ids_in_messages(client, queues)
    with sessions() as session:
        stale = session.execute(
            select(Job.id, Job.queue)
            .where(Job.status.in_(OPEN), Job.updated_at < before)
            .order_by(Job.queue, Job.batch_id, Job.line_no)
        ).all()
    if not stale:
        return 0
    held |= job_ids_in_messages(client, queues)
    by_queue: dict[str, list[str]] = {}
    for job_id, queue in stale:
        if job_id not in held and queue:
            by_queue.setdefault(queue, []).append(job_id)
    sent = 0
    for queue, ids in by_queue.items():
        for start in range(0, len(ids), jobs_per_task):
            group = ids[start : start + jobs_per_task]
            with sessions() as session:  # QUEUED, and fresh: the next pass leaves them alone a while
                moved = db.requeue_stale(session, group, before=before, error=LOST_MESSAGE)
                session.commit()
            if moved:  # the few a worker took meanwhile are skipped by claim() when this message comes
                send(queue, group)
                sent += len(moved)
                log.warning("re-enqueued %d jobs on %s whose message was lost: %s", len(moved), queue, ", ".join(moved))
    return sent


def close_unclosed(sessions: sessionmaker[Session], store: ObjectStore) -> int:
    open_job = exists().where(Job.batch_id == Batch.id, Job.status.in_(OPEN))
    with sessions() as session:
        ids = list(session.scalars(select(Batch.id).where(Batch.finished_at.is_(None), ~open_job)))
    closed = 0
    for batch_id in ids:
        with sessions() as session:
            if close_if_finished(session, store, batch_id, rewrite=False):
                session.commit()
                closed += 1
                log.warning("closed batch %s: its jobs were all finished but it was never closed", batch_id)
    return closed


def remove_orphans(sessions: sessionmaker[Session], store: ObjectStore, *, before: datetime) -> int:
    old = {key: at for key, at in store.list_modified("batches/").items() if as_utc(at) < before}
    if not old:
        return 0
    batch_ids = {key.split("/")[1] for key in old if key.count("/") >= 2}
    with sessions() as session:
        alive = set(session.scalars(select(Batch.id).where(Batch.id.in_(batch_ids))))
        kept = set(
            session.scalars(
                select(Job.object_key).where(
                    Job.batch_id.in_(alive), Job.status == JobStatus.DONE, Job.object_key.is_not(None)
                )
            )
        )
        # A retake whose check still waits (pipeline/retake.py) is kept; one left by a worker that
        # died after settling it is an orphan.
        kept |= {
            ((extra or {}).get("retake") or {}).get("key")
            for extra in session.scalars(
                select(JobMetrics.extra)
                .join(Job, Job.id == JobMetrics.job_id)
                .where(Job.batch_id.in_(alive), JobMetrics.verdict == "pending")
            )
        }
    removed = 0
    for key in sorted(old):
        batch_id = key.split("/")[1] if key.count("/") >= 2 else None
        if key in kept or (batch_id in alive and key == manifest_key(batch_id)):
            continue
        if batch_id in alive and not key.startswith((f"batches/{batch_id}/audio/", f"batches/{batch_id}/retakes/")):
            continue  # not something a job writes: leave it
        store.delete(key)
        removed += 1
        log.warning("removed %s: no done job refers to it", key)
    return removed
