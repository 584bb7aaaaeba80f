"""The console's plots of the last 24 hours, as aggregates the database computes per time bucket:
audio seconds per minute by device type, first-byte (TTFB) p50 and p95 per priority, and failures
per reason per hour.

Each query reads one day of one indexed timestamp (``job_metrics.recorded_at``; ``jobs.status,
finished_at``) and returns one row per bucket and group, not one per job, so its cost follows the
day's jobs through the index and its answer stays a few thousand numbers. PostgreSQL computes the
percentiles itself; SQLite has no percentile function, so there the day's TTFBs come back and
Python takes nearest-rank percentiles (a laptop's day is small).

A series is sparse: ``[[bucket_index, value], ...]`` over ``buckets`` buckets of ``bucket_s``
seconds from ``start``; buckets without jobs are left out, so an idle day costs nothing to send.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

from sqlalchemy import Integer, cast, func, select
from sqlalchemy.orm import Session

from pipeline.db.models import Job, JobMetrics, JobStatus
from pipeline.reports.stats import percentile, reason

WINDOW = timedelta(hours=24)
MINUTE_S = 60
HOUR_S = 3600
JOIN_SLACK = timedelta(minutes=1)
TOP_REASONS = 6  # failure reasons plotted by name; the rest are summed as "other"


def bucket_of(session: Session, column, size_s: int):
    """``column``'s bucket number (epoch seconds // size_s), in the database's own dialect."""
    if session.get_bind().dialect.name == "postgresql":
        return cast(func.floor(func.extract("epoch", column) / size_s), Integer)
    return cast(func.strftime("%s", column), Integer) / size_s


def window(now: datetime) -> tuple[datetime, int]:
    """The day's start (a whole minute, so buckets line up) and its first minute's number."""
    start = (now - WINDOW).astimezone(UTC).replace(second=0, microsecond=0)
    return start, int(start.timestamp()) // MINUTE_S


def audio_by_device(session: Session, start: datetime, first: int) -> dict[str, list[list[float]]]:
    b = bucket_of(session, JobMetrics.recorded_at, MINUTE_S)
    rows = session.execute(
        select(b, JobMetrics.device_type, func.sum(JobMetrics.audio_s))
        .where(JobMetrics.recorded_at >= start)
        .group_by(b, JobMetrics.device_type)
        .order_by(b)
    )
    out: dict[str, list[list[float]]] = defaultdict(list)
    for bucket, device, audio in rows:
        out[device or "unknown"].append([int(bucket) - first, round(float(audio or 0), 3)])
    return dict(out)


def ttfb(session: Session, start: datetime, first: int) -> dict[str, dict[str, list[list[float]]]]:
    """{priority: {"p50": series, "p95": series}} of first-byte seconds per minute."""
    b = bucket_of(session, JobMetrics.recorded_at, MINUTE_S)
    # The job's side is narrowed through its own index too: its priority is all that is read from
    # it, and joined on the id alone PostgreSQL reads the whole jobs table to hash it. A job is
    # marked done a moment before its metrics are written, so a minute's slack loses none.
    where = (
        JobMetrics.recorded_at >= start,
        JobMetrics.ttfb_s.is_not(None),
        Job.status == JobStatus.DONE,
        Job.finished_at >= start - JOIN_SLACK,
    )
    out: dict[str, dict[str, list[list[float]]]] = defaultdict(lambda: {"p50": [], "p95": []})
    if session.get_bind().dialect.name == "postgresql":
        rows = session.execute(
            select(
                b,
                Job.priority,
                func.percentile_cont(0.5).within_group(JobMetrics.ttfb_s),
                func.percentile_cont(0.95).within_group(JobMetrics.ttfb_s),
            )
            .join(Job, Job.id == JobMetrics.job_id)
            .where(*where)
            .group_by(b, Job.priority)
            .order_by(b)
        )
        for bucket, priority, p50, p95 in rows:
            out[priority]["p50"].append([int(bucket) - first, round(p50, 4)])
            out[priority]["p95"].append([int(bucket) - first, round(p95, 4)])
        return dict(out)
    values: dict[tuple[int, str], list[float]] = defaultdict(list)
    for bucket, priority, seconds in session.execute(
        select(b, Job.priority, JobMetrics.ttfb_s).join(Job, Job.id == JobMetrics.job_id).where(*where)
    ):
        values[(int(bucket), priority)].append(seconds)
    for (bucket, priority), seconds in sorted(values.items()):
        p50, p95 = percentile(seconds, 50), percentile(seconds, 95)
        assert p50 is not None and p95 is not None  # a bucket has a value at least
        out[priority]["p50"].append([bucket - first, round(p50, 4)])
        out[priority]["p95"].append([bucket - first, round(p95, 4)])
    return dict(out)


def failures(session: Session, start: datetime) -> dict[str, list[list[int]]]:
    """Failed jobs per hour by reason (the report's reasons: error strings without their per-job
    parts), the most frequent TOP_REASONS by name."""
    first_hour = int(start.timestamp()) // HOUR_S
    b = bucket_of(session, Job.finished_at, HOUR_S)
    rows = session.execute(
        select(b, Job.error, func.count())
        .where(Job.status == JobStatus.FAILED, Job.finished_at >= start)
        .group_by(b, Job.error)
    )
    per: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for bucket, error, n in rows:
        per[reason(error)][int(bucket) - first_hour] += n
    ranked = sorted(per, key=lambda r: -sum(per[r].values()))
    out = {r: per[r] for r in ranked[:TOP_REASONS]}
    if len(ranked) > TOP_REASONS:
        other: dict[int, int] = defaultdict(int)
        for r in ranked[TOP_REASONS:]:
            for hour, n in per[r].items():
                other[hour] += n
        out["other"] = other
    return {r: sorted([h, n] for h, n in hours.items()) for r, hours in out.items()}


def last_day(session: Session, now: datetime) -> dict:
    start, first = window(now)
    return {
        "start": int(start.timestamp()),
        "minute_buckets": int(WINDOW.total_seconds()) // MINUTE_S,
        "hour_buckets": int(WINDOW.total_seconds()) // HOUR_S + 1,
        "audio_s_by_device": audio_by_device(session, start, first),
        "ttfb_s": ttfb(session, start, first),
        "failures_by_reason": failures(session, start),
    }
