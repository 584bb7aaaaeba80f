"""Data access for batches and jobs. Every state change is one conditional UPDATE, so two workers
racing on a redelivered message cannot both move a job."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

from pipeline.db.models import Batch, Job, JobMetrics, JobStatus, new_id, sources_of, utcnow
from pipeline.db.models_api import ApiKey
from pipeline.db.session import rows_matched
from pipeline import usage
from pipeline.errors import IllegalTransitionError
from pipeline.lexicon.store import Pin


@dataclass(frozen=True)
class NewJob:
    client_id: str
    text: str
    line_no: int | None
    queue: str
    idempotency_key: str | None = None
    voice: str | None = None  # per-job overrides of the batch's defaults (API items)
    format: str | None = None
    sample_rate: int | None = None


@dataclass
class PlannedBatch:
    """A batch's row and its jobs' rows, made without the database: ``insert_batches`` writes
    many such batches in two statements, so a writer holds the database's lock only that long."""

    batch: dict
    jobs: list[dict]

    @property
    def id(self) -> str:
        return self.batch["id"]

    def job_ids_by_queue(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for row in sorted(self.jobs, key=lambda r: (r["line_no"] or 0, r["client_id"])):
            out.setdefault(row["queue"], []).append(row["id"])
        return out


def plan_batch(
    *,
    name: str | None,
    source: str | None,
    voice: str,
    format: str,
    sample_rate: int | None,
    priority: str,
    jobs: Sequence[NewJob],
    skipped_lines: int = 0,
    queued: bool = False,
    loudness_target: float | None = None,
    true_peak_max: float | None = None,
    lexicon: Pin | None = None,
    **batch_columns,
) -> PlannedBatch:
    """The rows of a batch and its jobs, PENDING, or QUEUED with ``queued`` (their messages are
    sent once the rows are committed). ``batch_columns``: the API's owner_key_id, kind,
    webhook_url/events and expires_at."""
    now = utcnow()
    # always both keys: batches planned apart are inserted in one statement (insert_batches)
    pinned = dict(
        lexicon_id=lexicon.lexicon_id if lexicon else None, lexicon_version=lexicon.version if lexicon else None
    )
    batch = dict(
        id=new_id(),
        name=name,
        source=source,
        voice=voice,
        format=format,
        sample_rate=sample_rate,
        priority=priority,
        total_jobs=len(jobs),
        skipped_lines=skipped_lines,
        created_at=now,
        loudness_target=loudness_target,
        true_peak_max=true_peak_max,
        **pinned,
        **batch_columns,
    )
    return PlannedBatch(batch, [_job_row(j, batch, queued) for j in jobs])


def _job_row(j: NewJob, batch: dict, queued: bool) -> dict:
    """The row of ``batch``'s job ``j``: the batch's voice, format and rate where it has none."""
    now = batch["created_at"]
    return dict(
        id=new_id(),
        batch_id=batch["id"],
        client_id=j.client_id,
        text=j.text,
        line_no=j.line_no,
        idempotency_key=j.idempotency_key,
        voice=j.voice or batch["voice"],
        format=j.format or batch["format"],
        sample_rate=j.sample_rate if j.sample_rate is not None else batch["sample_rate"],
        loudness_target=batch["loudness_target"],
        true_peak_max=batch["true_peak_max"],
        priority=batch["priority"],
        queue=j.queue,
        status=JobStatus.QUEUED if queued else JobStatus.PENDING,
        attempts=0,
        created_at=now,
        updated_at=now,
        queued_at=now if queued else None,
        lexicon_id=batch["lexicon_id"],
        lexicon_version=batch["lexicon_version"],
    )


def insert_batches(session: Session, planned: Sequence[PlannedBatch]) -> None:
    """Insert planned batches and their jobs with bulk inserts; the caller commits."""
    by_columns: dict[tuple, list[dict]] = {}
    for p in planned:  # one statement per set of columns (callers give the same ones)
        by_columns.setdefault(tuple(sorted(p.batch)), []).append(p.batch)
    for rows in by_columns.values():
        session.execute(insert(Batch), rows)
    jobs = [row for p in planned for row in p.jobs]
    for start in range(0, len(jobs), 5000):
        session.execute(insert(Job), jobs[start : start + 5000])


def insert_batch(session: Session, planned: PlannedBatch) -> Batch:
    """Insert one planned batch and its jobs; the caller commits."""
    insert_batches(session, [planned])
    return session.get_one(Batch, planned.id)


def create_batch(session: Session, **fields) -> Batch:
    """Insert a batch and all its jobs (PENDING) with bulk inserts (``plan_batch``'s fields); the
    caller commits."""
    return insert_batch(session, plan_batch(**fields))


def job_ids_by_queue(session: Session, batch_id: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    rows = session.execute(
        select(Job.queue, Job.id).where(Job.batch_id == batch_id).order_by(Job.line_no, Job.client_id)
    )
    for queue, job_id in rows:
        out.setdefault(queue, []).append(job_id)
    return out


def transition(session: Session, job_ids: Iterable[str], to: JobStatus, **values) -> int:
    """Move the given jobs to ``to`` where the state machine allows it; returns the rows moved."""
    ids = list(job_ids)
    if not ids:
        return 0
    result = session.execute(
        update(Job)
        .where(Job.id.in_(ids), Job.status.in_(sources_of(to)))
        .values(status=to, updated_at=utcnow(), **values)
        .execution_options(synchronize_session=False)
    )
    return rows_matched(result)


def mark_batch_queued(session: Session, batch_id: str) -> int:
    now = utcnow()
    return rows_matched(
        session.execute(
            update(Job)
            .where(Job.batch_id == batch_id, Job.status == JobStatus.PENDING)
            .values(status=JobStatus.QUEUED, queued_at=now, updated_at=now)
            .execution_options(synchronize_session=False)
        )
    )


def claim(session: Session, job_ids: Sequence[str]) -> list[Job]:
    """Take jobs for rendering: PENDING/QUEUED/RUNNING (a redelivery) -> RUNNING, attempts + 1.
    Jobs already finished or cancelled are left alone, which is what makes a redelivered message
    harmless. A job whose API key was revoked is not rendered: it is cancelled here (revocation
    cancels the key's open jobs, this catches one created in the moment before it)."""
    now = utcnow()
    claimed = rows_matched(
        session.execute(
            update(Job)
            .where(Job.id.in_(job_ids), Job.status.in_(sources_of(JobStatus.RUNNING)), ~_revoked_owner())
            .values(status=JobStatus.RUNNING, attempts=Job.attempts + 1, started_at=now, updated_at=now, error=None)
            .execution_options(synchronize_session=False)
        )
    )
    if claimed < len(set(job_ids)):  # a finished or cancelled job, or a revoked key's
        for target in (JobStatus.CANCELLED, JobStatus.FAILED):  # open; or running (a redelivery)
            session.execute(
                update(Job)
                .where(Job.id.in_(job_ids), Job.status.in_(sources_of(target)), _revoked_owner())
                .values(status=target, finished_at=now, updated_at=now, error=REVOKED)
                .execution_options(synchronize_session=False)
            )
    session.commit()
    jobs = session.scalars(select(Job).where(Job.id.in_(job_ids), Job.status == JobStatus.RUNNING)).all()
    order = {jid: i for i, jid in enumerate(job_ids)}
    return sorted(jobs, key=lambda j: order[j.id])


REVOKED = "the API key was revoked"


def _revoked_owner():
    """True for a job whose batch belongs to a revoked API key (one index lookup per job)."""
    return (
        select(Batch.id)
        .join(ApiKey, ApiKey.id == Batch.owner_key_id)
        .where(Batch.id == Job.batch_id, ApiKey.revoked_at.is_not(None))
        .exists()
    )


def finish(session: Session, job: Job, *, object_key: str, metrics: dict) -> None:
    moved = transition(session, [job.id], JobStatus.DONE, object_key=object_key, finished_at=utcnow(), error=None)
    if not moved:
        raise IllegalTransitionError(f"job {job.id} is no longer running; result not recorded")
    session.merge(JobMetrics(job_id=job.id, **metrics))
    # here, in the transaction that moved it to DONE, so the job is counted exactly once
    usage.record_done(session, batch_id=job.batch_id, chars=len(job.text), audio_s=metrics.get("audio_s"))


def fail(session: Session, job_id: str, error: str) -> int:
    return transition(session, [job_id], JobStatus.FAILED, error=error[:2000], finished_at=utcnow())


def requeue(session: Session, job_ids: Sequence[str], error: str) -> int:
    return transition(session, job_ids, JobStatus.QUEUED, error=error[:2000], queued_at=utcnow())


def requeue_stale(session: Session, job_ids: Sequence[str], *, before: datetime, error: str) -> list[str]:
    """Open jobs (pending, queued, running) not updated since ``before`` -> QUEUED, fresh: the
    reconciler's re-enqueue. A job a worker claimed or finished meanwhile is left alone. Returns
    the ids moved."""
    now = utcnow()
    where = (
        Job.id.in_(list(job_ids)),
        Job.updated_at < before,
        Job.status.in_([JobStatus.PENDING, JobStatus.QUEUED, JobStatus.RUNNING]),
    )
    moved = list(session.scalars(select(Job.id).where(*where).with_for_update()))
    if moved:
        session.execute(
            update(Job)
            .where(Job.id.in_(moved), *where[1:])
            .values(status=JobStatus.QUEUED, error=error[:2000], queued_at=now, updated_at=now)
            .execution_options(synchronize_session=False)
        )
    return moved


def status_counts(session: Session, batch_id: str) -> dict[JobStatus, int]:
    rows = session.execute(select(Job.status, func.count()).where(Job.batch_id == batch_id).group_by(Job.status))
    counts = {s: 0 for s in JobStatus}
    counts.update({JobStatus(s): n for s, n in rows})
    return counts


def batch_finished(session: Session, batch_id: str) -> bool:
    open_states = [s for s in JobStatus if not s.terminal]
    remaining = session.scalar(select(func.count()).where(Job.batch_id == batch_id, Job.status.in_(open_states)))
    return remaining == 0


def batches_of(session: Session, job_ids: Sequence[str]) -> set[str]:
    """The batches the given jobs belong to (jobs that no longer exist are ignored)."""
    return set(session.scalars(select(Job.batch_id).where(Job.id.in_(list(job_ids))).distinct()))


def close_batch(session: Session, batch_id: str, manifest_key: str) -> None:
    session.execute(
        update(Batch)
        .where(Batch.id == batch_id)
        .values(finished_at=func.coalesce(Batch.finished_at, utcnow()), manifest_key=manifest_key)
    )


def find_batch(session: Session, ref: str) -> Batch | None:
    """A batch by id, id prefix (at least 6 characters) or name (the newest of that name)."""
    batch = session.get(Batch, ref)
    if batch:
        return batch
    if len(ref) >= 6:
        found = session.scalars(select(Batch).where(Batch.id.startswith(ref)).limit(2)).all()
        if len(found) == 1:
            return found[0]
    return session.scalars(select(Batch).where(Batch.name == ref).order_by(Batch.created_at.desc()).limit(1)).first()


def count_batches_named(session: Session, name: str) -> int:
    return session.scalar(select(func.count()).select_from(Batch).where(Batch.name == name)) or 0


def jobs_with_metrics(session: Session, batch_id: str) -> list[tuple[Job, JobMetrics | None]]:
    rows = session.execute(
        select(Job, JobMetrics)
        .outerjoin(JobMetrics, JobMetrics.job_id == Job.id)
        .where(Job.batch_id == batch_id)
        .order_by(Job.line_no, Job.client_id)
    )
    return [(job, m) for job, m in rows]
