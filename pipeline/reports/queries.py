"""The SQL a report needs: counts and sums in the database, per-job rows where Python does the rest
(interval unions and percentiles are awkward in portable SQL)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from pipeline.db.models import Batch, Job, JobMetrics, JobStatus, as_utc
from pipeline.db.models_api import ApiKey


@dataclass(frozen=True)
class DoneJob:
    priority: str
    started_at: datetime | None
    finished_at: datetime
    queue_wait_s: float | None
    ttfb_s: float | None
    rtf: float | None
    audio_s: float
    engine: str
    model: str
    quantization: str
    device_type: str
    worker_host: str
    batch_size: int | None
    extra: dict | None


def jobs_by_state(session: Session, since: datetime, until: datetime) -> dict[str, int]:
    rows = session.execute(
        select(Job.status, func.count()).where(Job.created_at >= since, Job.created_at < until).group_by(Job.status)
    )
    counts = {s.value: 0 for s in JobStatus}
    counts.update({JobStatus(s).value: n for s, n in rows})
    return counts


def batches_by_state(session: Session, since: datetime, until: datetime) -> dict[str, int]:
    state = case((Batch.finished_at.is_(None), "open"), else_="finished")
    rows = session.execute(
        select(state, func.count()).where(Batch.created_at >= since, Batch.created_at < until).group_by(state)
    )
    counts = {"open": 0, "finished": 0}
    counts.update(dict(rows.all()))
    return counts


def _finished_in(since: datetime, until: datetime, status: JobStatus):
    return (Job.status == status, Job.finished_at >= since, Job.finished_at < until)


def characters_done(session: Session, since: datetime, until: datetime) -> int:
    total = session.scalar(select(func.sum(func.length(Job.text))).where(*_finished_in(since, until, JobStatus.DONE)))
    return int(total or 0)


def failure_errors(session: Session, since: datetime, until: datetime) -> list[tuple[str | None, int]]:
    """(error, jobs) for the jobs that failed in the period; grouped in SQL, normalized in Python."""
    return [
        (error, n)
        for error, n in session.execute(
            select(Job.error, func.count()).where(*_finished_in(since, until, JobStatus.FAILED)).group_by(Job.error)
        )
    ]


def done_jobs(session: Session, since: datetime, until: datetime) -> list[DoneJob]:
    m = JobMetrics
    rows = session.execute(
        select(
            Job.priority,
            Job.started_at,
            Job.finished_at,
            m.queue_wait_s,
            m.ttfb_s,
            m.rtf,
            m.audio_s,
            m.engine,
            m.model,
            m.quantization,
            m.device_type,
            m.worker_host,
            m.batch_size,
            m.extra,
        )
        .join(m, m.job_id == Job.id)
        .where(*_finished_in(since, until, JobStatus.DONE))
    )
    return [
        DoneJob(
            priority=r.priority,
            started_at=as_utc(r.started_at) if r.started_at else None,
            finished_at=as_utc(r.finished_at),
            queue_wait_s=r.queue_wait_s,
            ttfb_s=r.ttfb_s,
            rtf=r.rtf,
            audio_s=r.audio_s or 0.0,
            engine=r.engine or "unknown",
            model=r.model or "unknown",
            quantization=r.quantization or "unknown",
            device_type=r.device_type or "unknown",
            worker_host=r.worker_host or "unknown",
            batch_size=r.batch_size,
            extra=r.extra,
        )
        for r in rows
    ]


def verdicts(session: Session, since: datetime, until: datetime) -> dict[str, int]:
    """Done jobs of the period by the verdict of their check (pipeline/verify); unchecked left out."""
    return {
        v: n
        for v, n in session.execute(
            select(JobMetrics.verdict, func.count())
            .join(Job, Job.id == JobMetrics.job_id)
            .where(
                *_finished_in(since, until, JobStatus.DONE),
                JobMetrics.verdict.is_not(None),
                JobMetrics.verdict != "pending",
            )  # its check waits on the verify queue: not checked yet
            .group_by(JobMetrics.verdict)
        )
        if v is not None
    }


def reused(session: Session, since: datetime, until: datetime) -> tuple[int, float]:
    """Done jobs of the period whose audio is a stored render's, and the engine seconds saved."""
    n, saved = session.execute(
        select(func.count(JobMetrics.reused_s), func.coalesce(func.sum(JobMetrics.reused_s), 0.0))
        .join(Job, Job.id == JobMetrics.job_id)
        .where(*_finished_in(since, until, JobStatus.DONE))
    ).one()
    return int(n), float(saved or 0.0)


def flagged_jobs(session: Session, since: datetime, until: datetime, limit: int) -> list[dict]:
    """The bad, then suspect, jobs of the period, highest character error rate first."""
    rows = session.execute(
        select(Job.batch_id, Job.client_id, JobMetrics.verdict, JobMetrics.extra)
        .join(JobMetrics, JobMetrics.job_id == Job.id)
        .where(*_finished_in(since, until, JobStatus.DONE), JobMetrics.verdict.in_(("bad", "suspect")))
        .order_by(JobMetrics.verdict, Job.finished_at.desc())
        .limit(50 * limit)
    ).all()
    found = []
    for batch_id, client_id, verdict, extra in rows:
        checked = (extra or {}).get("verify") or {}
        found.append(
            {
                "batch_id": batch_id,
                "client_id": client_id,
                "verdict": verdict,
                "reasons": checked.get("reasons") or [],
                "cer": (checked.get("scores") or {}).get("cer"),
            }
        )
    found.sort(key=lambda j: (j["verdict"] != "bad", -(j["cer"] or 0.0)))
    return found[:limit]


def usage_by_key(session: Session, since: datetime, until: datetime) -> list[dict]:
    """Per API key, the jobs that finished in the period: done, failed, characters and audio seconds
    of the done ones, most characters first. Work without a key (the CLI's) is one row, key None."""
    done = Job.status == JobStatus.DONE
    rows = session.execute(
        select(
            Batch.owner_key_id,
            ApiKey.name,
            func.sum(case((done, 1), else_=0)),
            func.sum(case((done, 0), else_=1)),
            func.sum(case((done, func.length(Job.text)), else_=0)),
            func.sum(case((done, JobMetrics.audio_s), else_=0.0)),
        )
        .join(Batch, Batch.id == Job.batch_id)
        .outerjoin(ApiKey, ApiKey.id == Batch.owner_key_id)
        .outerjoin(JobMetrics, JobMetrics.job_id == Job.id)
        .where(Job.status.in_([JobStatus.DONE, JobStatus.FAILED]), Job.finished_at >= since, Job.finished_at < until)
        .group_by(Batch.owner_key_id, ApiKey.name)
    )
    out = [
        {
            "key_id": key_id,
            "name": name if key_id else "(no key: CLI)",
            "jobs_done": int(d or 0),
            "jobs_failed": int(f or 0),
            "characters": int(c or 0),
            "audio_s": float(a or 0.0),
        }
        for key_id, name, d, f, c, a in rows
    ]
    return sorted(out, key=lambda r: (-r["characters"], r["name"]))
