"""Emit webhook events into webhook_deliveries (the outbox) once jobs and batches have finished.

Called by the worker after a render task recorded its outcomes (worker/webhooks.py), and safe to
call again for the same jobs: each event's id is derived from (type, resource), inserted with
ON CONFLICT DO NOTHING, so a retried or redelivered task adds nothing. It returns the deliveries
still waiting for their first attempt, and the caller enqueues them; a duplicate message for one
of them is harmless because an attempt is claimed with a conditional UPDATE (deliveries.claim).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence
from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from pipeline.db import jobs as db
from pipeline.db.models import Batch, Job, JobMetrics, JobStatus, as_utc, utcnow
from pipeline.db.models_webhooks import DeliveryStatus, WebhookDelivery
from pipeline.manifest import job_audio_path
from pipeline.webhooks import events as ev

log = logging.getLogger(__name__)

_JOB_EVENTS = {JobStatus.DONE: ev.JOB_FINISHED, JobStatus.FAILED: ev.JOB_FAILED}


def emit_for_jobs(session: Session, job_ids: Sequence[str]) -> list[str]:
    """Record the events of these jobs (finished or failed) and of their batches if now finished.
    A finished job's ``audio_url`` is its API route, never a location inside the store. Returns the ids of deliveries of these jobs and batches that await their first attempt. The
    caller commits."""
    if not job_ids:
        return []
    rows = session.execute(
        select(Job, Batch, JobMetrics.audio_s, JobMetrics.verdict)
        .join(Batch, Batch.id == Job.batch_id)
        .outerjoin(JobMetrics, JobMetrics.job_id == Job.id)
        .where(Job.id.in_(list(job_ids)))
    ).all()
    ids: list[str] = []
    for job, batch, audio_s, verdict in rows:
        event_type = _JOB_EVENTS.get(job.status)
        if event_type is None:
            continue
        url = ev.job_target(job.webhook_url, job.webhook_events, batch.webhook_url, batch.webhook_events, event_type)
        if not url or not _has_owner(batch):
            continue
        payload = ev.job_payload(
            event_type=event_type,
            at=as_utc(job.finished_at or utcnow()),
            batch_id=batch.id,
            job_id=job.id,
            client_id=job.client_id,
            status=job.status.value,
            error=job.error,
            object_key=job.object_key,
            audio_url=job_audio_path(job.id) if job.object_key else None,
            audio_seconds=audio_s,
            verdict=verdict,
        )
        ids.append(_insert(session, event_type, job.id, batch, url, payload))
    for batch in {b.id: b for _, b, _, _ in rows}.values():
        delivery_id = emit_batch_finished(session, batch)
        if delivery_id:
            ids.append(delivery_id)
    return _awaiting_first_attempt(session, ids)


def emit_batch_finished(session: Session, batch: Batch) -> str | None:
    """The batch.finished event of a batch whose jobs are all terminal (done, failed, cancelled);
    None if it has no webhook for it, is a single-job batch, or is still running. The caller commits."""
    if (
        not batch.webhook_url
        or not ev.wants(batch.webhook_events, ev.BATCH_FINISHED)
        or batch.kind == "job"
        or not _has_owner(batch)
        or not db.batch_finished(session, batch.id)
    ):
        return None
    counts = {status.value: n for status, n in db.status_counts(session, batch.id).items() if status.terminal}
    audio_s = session.scalar(
        select(func.coalesce(func.sum(JobMetrics.audio_s), 0.0))
        .join(Job, Job.id == JobMetrics.job_id)
        .where(Job.batch_id == batch.id)
    )
    finished_at = session.scalar(select(func.max(Job.finished_at)).where(Job.batch_id == batch.id))
    payload = ev.batch_payload(
        at=as_utc(finished_at or utcnow()),
        batch_id=batch.id,
        name=batch.name,
        counts=counts,
        audio_seconds=float(audio_s or 0.0),
        manifest_key=batch.manifest_key,
        cancelled=batch.cancelled_at is not None,
    )
    return _insert(session, ev.BATCH_FINISHED, batch.id, batch, batch.webhook_url, payload)


def emit_document_finished(session: Session, batch: Batch, chapters: dict) -> list[str]:
    """The document.finished event of a document assembled (``chapters``: its chapters.json), if
    its batch's webhook wants it; once per assembly of its renders, however often it runs. Returns
    the delivery awaiting its first attempt, if any. The caller commits."""
    if not batch.webhook_url or not ev.wants(batch.webhook_events, ev.DOCUMENT_FINISHED) or not _has_owner(batch):
        return []
    payload = ev.document_payload(
        at=utcnow(),
        document_id=batch.id,
        title=chapters["title"],
        format=chapters["file"].rsplit(".", 1)[-1],
        duration_s=chapters["duration_s"],
        files=chapters["files"],
    )
    return _awaiting_first_attempt(
        session, [_insert(session, ev.DOCUMENT_FINISHED, _assembly(session, batch), batch, batch.webhook_url, payload)]
    )


def _assembly(session: Session, batch: Batch) -> str:
    """What one assembly of a document is, as an event's resource: the document's id, and once
    chapters were rendered again with new seeds (pipeline/documents/rerender.py), a digest of
    those seeds too. Each rerender's assembly is then an event of its own, while assembling the
    same renders twice (a redelivered message) is still one."""
    seeds = session.execute(
        select(Job.id, Job.seed).where(Job.batch_id == batch.id, Job.seed.is_not(None)).order_by(Job.id)
    ).all()
    if not seeds:
        return batch.id
    digest = hashlib.sha256("".join(f"{job_id}:{seed};" for job_id, seed in seeds).encode()).hexdigest()
    return f"{batch.id}:{digest[:16]}"


def emit_missed_batch_events(session: Session, *, within: timedelta = timedelta(days=1), limit: int = 100) -> list[str]:
    """batch.finished for batches closed in the last ``within`` that have a webhook but no such event
    yet: batches closed without a render task (every remaining job cancelled), or whose render hook
    could not write. Returns the new deliveries' ids. The caller commits."""
    sent = select(WebhookDelivery.id).where(
        WebhookDelivery.event_type == ev.BATCH_FINISHED, WebhookDelivery.resource_id == Batch.id
    )
    still_open = select(Job.id).where(
        Job.batch_id == Batch.id, Job.status.in_([s for s in JobStatus if not s.terminal])
    )
    batches = session.scalars(
        select(Batch)
        .where(
            Batch.finished_at >= utcnow() - within,
            Batch.webhook_url.is_not(None),
            Batch.owner_key_id.is_not(None),
            Batch.kind != "job",
            ~sent.exists(),
            ~still_open.exists(),
        )
        .order_by(Batch.finished_at.desc())
        .limit(limit)
    ).all()
    ids = [i for i in (emit_batch_finished(session, b) for b in batches) if i]
    return _awaiting_first_attempt(session, ids)


def _has_owner(batch: Batch) -> bool:
    if batch.owner_key_id is None:  # CLI batches have no key, so no secret to sign with
        log.warning("batch %s has a webhook URL but no owner key; its events are not sent", batch.id)
        return False
    return True


def _insert(session: Session, event_type: str, resource_id: str, batch: Batch, url: str, payload: dict) -> str:
    delivery_id = ev.event_id(event_type, resource_id)
    now = utcnow()
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    session.execute(
        dialect.insert(WebhookDelivery)
        .values(
            id=delivery_id,
            event_type=event_type,
            resource_id=resource_id,
            key_id=batch.owner_key_id,
            batch_id=batch.id,
            url=url,
            body=ev.encode(payload),
            status=DeliveryStatus.PENDING.value,
            attempts=0,
            next_attempt_at=now,
            created_at=now,
            updated_at=now,
        )
        .on_conflict_do_nothing()
    )
    return delivery_id


def _awaiting_first_attempt(session: Session, ids: Iterable[str]) -> list[str]:
    ids = list(dict.fromkeys(ids))
    if not ids:
        return []
    found = set(
        session.scalars(
            select(WebhookDelivery.id).where(
                WebhookDelivery.id.in_(ids),
                WebhookDelivery.attempts == 0,
                WebhookDelivery.status == DeliveryStatus.PENDING.value,
            )
        )
    )
    return [i for i in ids if i in found]
