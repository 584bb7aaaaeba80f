"""Compute a Report for a period from the jobs, batches and job_metrics tables."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from pipeline.db.models import utcnow
from pipeline.reports import queries
from pipeline.reports.model import (
    DIMENSIONS,
    HEADLINE_FIELDS,
    Batching,
    Percentiles,
    Report,
    Series,
    ThroughputRow,
    Verification,
)
from pipeline.reports.queries import DoneJob
from pipeline.reports.stats import busy_seconds, change, ratio, reason


def default_period(now: datetime | None = None, hours: float = 24) -> tuple[datetime, datetime]:
    until = (now or utcnow()).astimezone(UTC)
    return until - timedelta(hours=hours), until


def compute_report(
    session: Session,
    since: datetime,
    until: datetime,
    *,
    gpu_prices: Mapping[str, float] | None = None,
    compare: bool = True,
) -> Report:
    """The report for [since, until); with ``compare``, also the previous period of equal length."""
    since, until = since.astimezone(UTC), until.astimezone(UTC)
    if until <= since:
        raise ValueError(f"empty period: {since.isoformat()} .. {until.isoformat()}")
    prices = dict(gpu_prices or {})
    report = _compute(session, since, until, prices)
    if compare:
        before = _compute(session, since - (until - since), since, prices)
        report.previous = before.headline
        report.changes = {k: change(report.headline[k], before.headline[k]) for k in HEADLINE_FIELDS}
    return report


def _compute(session: Session, since: datetime, until: datetime, prices: dict[str, float]) -> Report:
    done = queries.done_jobs(session, since, until)
    period_s = (until - since).total_seconds()
    failures: Counter[str] = Counter()
    for error, n in queries.failure_errors(session, since, until):
        failures[reason(error)] += n
    report = Report(
        period_start=since,
        period_end=until,
        generated_at=utcnow(),
        jobs_by_state=queries.jobs_by_state(session, since, until),
        batches_by_state=queries.batches_by_state(session, since, until),
        jobs_done=len(done),
        jobs_failed=sum(failures.values()),
        characters=queries.characters_done(session, since, until),
        audio_s=sum(j.audio_s for j in done),
        failures_by_reason=dict(failures.most_common()),
        overall=throughput_row("all", done, prices, period_s),
        throughput={dim: _rows_by(done, dim, prices, period_s) for dim in DIMENSIONS},
        ttfb=_percentiles_by_priority(done, lambda j: j.ttfb_s),
        rtf=_percentiles_by_priority(done, lambda j: j.rtf),
        queue_wait=_percentiles_by_priority(done, lambda j: j.queue_wait_s),
        batching=batching(done),
        unpriced_device_types=sorted({j.device_type for j in done} - set(prices)),
        series=series(done, since, until),
        verification=verification(session, since, until),
        by_key=queries.usage_by_key(session, since, until),
    )
    report.reused, report.reused_s = queries.reused(session, since, until)
    report.headline = _headline(report)
    return report


WORST_JOBS = 10


def verification(session: Session, since: datetime, until: datetime) -> Verification:
    counts = queries.verdicts(session, since, until)
    checked = sum(counts.values())
    return Verification(
        checked=checked,
        verdicts=counts,
        clean_share=counts.get("clean", 0) / checked if checked else None,
        worst=queries.flagged_jobs(session, since, until, WORST_JOBS),
    )


def throughput_row(key: str, jobs: list[DoneJob], prices: Mapping[str, float], period_s: float) -> ThroughputRow:
    """Audio over busy time. Busy time is summed per worker (each worker: one GPU or CPU pool)."""
    by_worker: dict[str, list[DoneJob]] = defaultdict(list)
    for j in jobs:
        by_worker[j.worker_host].append(j)
    busy_by_type: dict[str, float] = defaultdict(float)
    for worker_jobs in by_worker.values():
        for device_type, typed in _group(worker_jobs, lambda j: j.device_type).items():
            busy_by_type[device_type] += busy_seconds(
                (j.started_at, j.finished_at) for j in typed if j.started_at is not None
            )
    busy = sum(busy_by_type.values())
    audio = sum(j.audio_s for j in jobs)
    priced = all(t in prices for t in busy_by_type)
    cost = sum(prices[t] * s / 3600 for t, s in busy_by_type.items()) if priced and busy_by_type else None
    return ThroughputRow(
        key=key,
        jobs=len(jobs),
        audio_s=audio,
        busy_s=busy,
        workers=len(by_worker),
        x_realtime=ratio(audio, busy),
        audio_s_per_gpu_hour=ratio(audio * 3600, busy),
        utilization=ratio(busy, len(by_worker) * period_s),
        cost=cost,
        cost_per_audio_hour=ratio(cost, audio / 3600),
        device_types=sorted(busy_by_type),
    )


def _rows_by(jobs: list[DoneJob], dim: str, prices, period_s: float) -> list[ThroughputRow]:
    groups = _group(jobs, lambda j: getattr(j, dim))
    rows = [throughput_row(key, group, prices, period_s) for key, group in groups.items()]
    return sorted(rows, key=lambda r: (-r.audio_s, r.key))


def _group(jobs: Iterable[DoneJob], key: Callable[[DoneJob], str]) -> dict[str, list[DoneJob]]:
    out: dict[str, list[DoneJob]] = defaultdict(list)
    for j in jobs:
        out[key(j)].append(j)
    return dict(out)


def _percentiles_by_priority(jobs: list[DoneJob], value: Callable[[DoneJob], float | None]) -> dict[str, Percentiles]:
    out = {"all": Percentiles.of([v for j in jobs if (v := value(j)) is not None])}
    for priority, group in sorted(_group(jobs, lambda j: j.priority).items()):
        out[priority] = Percentiles.of([v for j in group if (v := value(j)) is not None])
    return out


def batching(jobs: list[DoneJob]) -> Batching:
    sizes = [n for j in jobs if (n := j.batch_size)]
    with_max = [(n, m) for j in jobs if (n := j.batch_size) and (m := (j.extra or {}).get("max_batch"))]
    extra = [j.extra for j in jobs if j.extra]
    tokens = sum(e.get("tokens", 0) for e in extra if "padded_tokens" in e)
    padded = sum(e.get("padded_tokens", 0) for e in extra)
    slot_steps = sum(e.get("slot_steps", 0) for e in extra if "idle_slot_steps" in e)
    idle = sum(e.get("idle_slot_steps", 0) for e in extra)
    return Batching(
        jobs_with_size=len(sizes),
        mean_batch_size=ratio(sum(sizes), len(sizes)),
        sizes=dict(sorted(Counter(sizes).items())),
        slot_fill=ratio(sum(n / m for n, m in with_max), len(with_max)),
        padding_fraction=ratio(padded, tokens + padded) if any("padded_tokens" in e for e in extra) else None,
        idle_slot_fraction=ratio(idle, slot_steps) if any("idle_slot_steps" in e for e in extra) else None,
        jobs_with_extra=len(extra),
    )


def series(jobs: list[DoneJob], since: datetime, until: datetime) -> Series:
    """Audio finished per bin: hourly for periods up to two days, daily beyond."""
    period_s = (until - since).total_seconds()
    bin_s = 3600 if period_s <= 2 * 86400 else 86400
    n = max(1, int(-(-period_s // bin_s)))
    audio = [0.0] * n
    for j in jobs:
        audio[min(n - 1, int((j.finished_at - since).total_seconds() // bin_s))] += j.audio_s
    return Series(
        bin_s=bin_s,
        starts=[since + timedelta(seconds=i * bin_s) for i in range(n)],
        audio_s=audio,
        ttfb_s=sorted(j.ttfb_s for j in jobs if j.ttfb_s is not None),
    )


def _headline(r: Report) -> dict[str, float | None]:
    return {
        "jobs_done": r.jobs_done,
        "jobs_failed": r.jobs_failed,
        "audio_hours": r.audio_hours,
        "x_realtime": r.overall.x_realtime,
        "audio_s_per_gpu_hour": r.overall.audio_s_per_gpu_hour,
        "ttfb_p50_s": r.ttfb["all"].p50,
        "ttfb_p95_s": r.ttfb["all"].p95,
        "cost_per_audio_hour": r.overall.cost_per_audio_hour,
    }
