"""Batches in progress and the latest failures, for the console.

A batch's progress is its jobs counted by state (one grouped query over ``ix_jobs_batch_status``
for all the open batches shown). Its x real time is the audio its done jobs hold over the wall
time since its first job started, and its estimated finish divides the jobs left by its live
throughput: the jobs it finished in the last RECENT, or, when none, since it started."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from pipeline.db.models import Batch, Job, JobMetrics, JobStatus, as_utc
from pipeline.db.models_api import ApiKey
from pipeline.reports.stats import reason

SHOWN_BATCHES = 20
SHOWN_FAILURES = 20
RECENT = timedelta(minutes=5)
CLI_OWNER = "(CLI)"


@dataclass
class BatchProgress:
    id: str
    name: str | None
    owner: str
    total: int
    done: int
    failed: int
    running: int
    waiting: int  # pending or queued
    progress: float  # (done + failed) / total
    audio_s: float
    x_realtime: float | None
    eta_s: float | None
    created_at: str


def open_batches(session: Session, now: datetime) -> list[dict]:
    """The oldest SHOWN_BATCHES batches neither finished nor cancelled (speech requests' one-job
    batches left out: they finish in seconds)."""
    batches = session.execute(
        select(Batch.id, Batch.name, Batch.total_jobs, Batch.created_at, ApiKey.name)
        .outerjoin(ApiKey, ApiKey.id == Batch.owner_key_id)
        .where(Batch.finished_at.is_(None), Batch.cancelled_at.is_(None), Batch.kind == "batch")
        .order_by(Batch.created_at)
        .limit(SHOWN_BATCHES)
    ).all()
    ids = [b[0] for b in batches]
    if not ids:
        return []
    counts: dict[str, dict[JobStatus, int]] = {i: {} for i in ids}
    started: dict[str, datetime] = {}
    for batch_id, status, n, first in session.execute(
        select(Job.batch_id, Job.status, func.count(), func.min(Job.started_at))
        .where(Job.batch_id.in_(ids))
        .group_by(Job.batch_id, Job.status)
    ):
        counts[batch_id][JobStatus(status)] = n
        if first is not None:
            started[batch_id] = min(as_utc(first), started.get(batch_id, as_utc(first)))
    audio = dict(
        session.execute(
            select(Job.batch_id, func.sum(JobMetrics.audio_s))
            .join(JobMetrics, JobMetrics.job_id == Job.id)
            .where(Job.batch_id.in_(ids), Job.status == JobStatus.DONE)
            .group_by(Job.batch_id)
        ).all()
    )
    recent = dict(
        session.execute(
            select(Job.batch_id, func.count())
            .where(
                Job.batch_id.in_(ids),
                Job.status.in_([JobStatus.DONE, JobStatus.FAILED]),
                Job.finished_at >= now - RECENT,
            )
            .group_by(Job.batch_id)
        ).all()
    )
    return [
        asdict(_progress(b, counts[b[0]], started.get(b[0]), float(audio.get(b[0]) or 0), recent.get(b[0], 0), now))
        for b in batches
    ]


def _progress(
    batch, counts: dict[JobStatus, int], started: datetime | None, audio_s: float, recent: int, now: datetime
) -> BatchProgress:
    batch_id, name, total, created, owner = batch
    done, failed = counts.get(JobStatus.DONE, 0), counts.get(JobStatus.FAILED, 0)
    total = max(total, sum(counts.values()))
    left = total - done - failed - counts.get(JobStatus.CANCELLED, 0)
    elapsed = (now - started).total_seconds() if started else 0.0
    rate = recent / RECENT.total_seconds() if recent else ((done + failed) / elapsed if elapsed > 0 else 0.0)
    return BatchProgress(
        id=batch_id,
        name=name,
        owner=owner or CLI_OWNER,
        total=total,
        done=done,
        failed=failed,
        running=counts.get(JobStatus.RUNNING, 0),
        waiting=counts.get(JobStatus.PENDING, 0) + counts.get(JobStatus.QUEUED, 0),
        progress=(done + failed) / total if total else 0.0,
        audio_s=round(audio_s, 2),
        x_realtime=round(audio_s / elapsed, 2) if elapsed > 0 and audio_s else None,
        eta_s=round(left / rate) if rate > 0 else None,
        created_at=as_utc(created).isoformat(timespec="seconds"),
    )


def latest_failures(session: Session) -> list[dict]:
    """The SHOWN_FAILURES jobs that failed last (``ix_jobs_status_finished_at``), newest first."""
    rows = session.execute(
        select(Job.id, Job.batch_id, Job.client_id, Job.error, Job.finished_at, ApiKey.name, Batch.owner_key_id)
        .join(Batch, Batch.id == Job.batch_id)
        .outerjoin(ApiKey, ApiKey.id == Batch.owner_key_id)
        .where(Job.status == JobStatus.FAILED, Job.finished_at.is_not(None))
        .order_by(Job.finished_at.desc())
        .limit(SHOWN_FAILURES)
    )
    failures = []
    for job_id, batch_id, client_id, error, finished, owner, key_id in rows:
        assert finished is not None  # selected where it is set
        failures.append(
            {
                "job_id": job_id,
                "batch_id": batch_id,
                "client_id": client_id,
                "reason": reason(error),
                "error": (error or "")[:500],
                "finished_at": as_utc(finished).isoformat(timespec="seconds"),
                "owner": owner or CLI_OWNER,
                # the job's resource: its owner's key reads it there; CLI jobs have `synth status`
                "link": f"/v1/jobs/{job_id}" if key_id else None,
            }
        )
    return failures
