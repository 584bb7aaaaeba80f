"""Data access for the API: every lookup is scoped to the owning key, so another key's ids are
simply not found. Pagination is keyset (a cursor names the last row seen), never OFFSET."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from pipeline.db.models import Batch, Job, JobMetrics, JobStatus


@dataclass(frozen=True)
class BatchStats:
    counts: dict[JobStatus, int]
    audio_seconds: float
    billable_characters: int  # characters of the jobs that produced audio
    reused: int = 0  # done jobs whose audio is a stored render's (pipeline/reuse.py)
    reused_seconds: float = 0.0  # the engine seconds those renders took, not spent again

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def finished(self) -> int:
        return sum(n for s, n in self.counts.items() if s.terminal)


def get_batch(session: Session, *, owner: str, batch_id: str) -> Batch | None:
    return session.scalars(select(Batch).where(Batch.id == batch_id, Batch.owner_key_id == owner)).first()


def get_job(session: Session, *, owner: str, job_id: str) -> Job | None:
    return session.scalars(
        select(Job).join(Batch, Batch.id == Job.batch_id).where(Job.id == job_id, Batch.owner_key_id == owner)
    ).first()


def job_metrics(session: Session, job_id: str) -> JobMetrics | None:
    return session.get(JobMetrics, job_id)


def batch_stats(session: Session, batch_id: str) -> BatchStats:
    counts = {s: 0 for s in JobStatus}
    for status, n in session.execute(
        select(Job.status, func.count()).where(Job.batch_id == batch_id).group_by(Job.status)
    ):
        counts[JobStatus(status)] = n
    audio_s, chars, reused, reused_s = session.execute(
        select(
            func.coalesce(func.sum(JobMetrics.audio_s), 0.0),
            func.coalesce(func.sum(func.length(Job.text)), 0),
            func.count(JobMetrics.reused_s),
            func.coalesce(func.sum(JobMetrics.reused_s), 0.0),
        )
        .select_from(Job)
        .outerjoin(JobMetrics, JobMetrics.job_id == Job.id)
        .where(Job.batch_id == batch_id, Job.status == JobStatus.DONE)
    ).one()
    return BatchStats(
        counts=counts,
        audio_seconds=float(audio_s),
        billable_characters=int(chars),
        reused=int(reused),
        reused_seconds=float(reused_s),
    )


def list_batches(session: Session, *, owner: str, limit: int, after: tuple[datetime, str] | None = None) -> list[Batch]:
    """The key's batches (not single-job wrappers), newest first."""
    query = select(Batch).where(Batch.owner_key_id == owner, Batch.kind == "batch")
    if after is not None:
        created, batch_id = after
        query = query.where(or_(Batch.created_at < created, and_(Batch.created_at == created, Batch.id < batch_id)))
    return list(session.scalars(query.order_by(Batch.created_at.desc(), Batch.id.desc()).limit(limit)))


def list_items(
    session: Session, *, batch_id: str, limit: int, state: JobStatus | None = None, after: tuple[int, str] | None = None
) -> list[tuple[Job, JobMetrics | None]]:
    """A batch's jobs in item (line) order."""
    query = select(Job, JobMetrics).outerjoin(JobMetrics, JobMetrics.job_id == Job.id).where(Job.batch_id == batch_id)
    if state is not None:
        query = query.where(Job.status == state)
    if after is not None:
        line_no, job_id = after
        query = query.where(or_(Job.line_no > line_no, and_(Job.line_no == line_no, Job.id > job_id)))
    rows = session.execute(query.order_by(Job.line_no, Job.id).limit(limit))
    return [(job, m) for job, m in rows]
