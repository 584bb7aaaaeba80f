"""Rows -> response bodies."""

from __future__ import annotations

from typing import Literal

from sqlalchemy.orm import Session

from api.schemas import BatchOut, JobOut
from pipeline.db import owned
from pipeline.db.models import Batch, Job, JobMetrics, JobStatus, as_utc
from pipeline.manifest import job_audio_path


def _utc(value):
    return as_utc(value) if value is not None else None


def job_out(job: Job, metrics: JobMetrics | None) -> JobOut:
    return JobOut(
        id=job.id,
        batch_id=job.batch_id,
        client_id=job.client_id,
        status=job.status.value,
        voice=job.voice,
        format=job.format,
        sample_rate=job.sample_rate,
        priority=job.priority,
        characters=len(job.text),
        attempts=job.attempts,
        error=job.error,
        seed=job.seed,
        renders=((metrics.renders or 1) if metrics else None) if job.object_key else None,
        audio_seconds=metrics.audio_s if metrics else None,
        ttfb_seconds=metrics.ttfb_s if metrics else None,
        created_at=_utc(job.created_at),
        finished_at=_utc(job.finished_at),
        audio_url=job_audio_path(job.id) if job.status == JobStatus.DONE else None,
        stream_url=f"/v1/jobs/{job.id}/stream",
        text_notes=((metrics.extra or {}).get("text") or None) if metrics else None,
        loudness_target=job.loudness_target,
        lexicon_id=job.lexicon_id,
        lexicon_version=job.lexicon_version,
        loudness_lufs=metrics.loudness_lufs if metrics else None,
        true_peak_dbtp=metrics.true_peak_dbtp if metrics else None,
        **_verdict(job, metrics),
    )


def _verdict(job: Job, metrics: JobMetrics | None) -> dict:
    if metrics is None or metrics.verdict is None:
        return {}
    found = (metrics.extra or {}).get("verify") or {}
    return {
        "verdict": metrics.verdict,
        "verdict_reasons": found.get("reasons") or [],
        "captions_url": f"/v1/jobs/{job.id}/captions" if found.get("captions") else None,
    }


def batch_out(session: Session, batch: Batch) -> BatchOut:
    stats = owned.batch_stats(session, batch.id)
    finished = stats.finished == stats.total
    status: Literal["queued", "running", "finished", "cancelled"]
    if finished:
        status = "cancelled" if batch.cancelled_at is not None else "finished"
    elif stats.counts[JobStatus.RUNNING] or stats.finished:
        status = "running"
    else:
        status = "queued"
    return BatchOut(
        id=batch.id,
        name=batch.name,
        status=status,
        voice=batch.voice,
        format=batch.format,
        sample_rate=batch.sample_rate,
        priority=batch.priority,
        total=stats.total,
        counts={s.value: n for s, n in stats.counts.items()},
        progress=round(stats.finished / stats.total, 4) if stats.total else 1.0,
        audio_seconds=round(stats.audio_seconds, 3),
        billable_characters=stats.billable_characters,
        reused=stats.reused,
        reused_seconds=round(stats.reused_seconds, 3),
        webhook_url=batch.webhook_url,
        webhook_events=batch.webhook_events,
        created_at=_utc(batch.created_at),
        finished_at=_utc(batch.finished_at),
        cancelled_at=_utc(batch.cancelled_at),
        expires_at=_utc(batch.expires_at),
        loudness_target=batch.loudness_target,
        true_peak_max=batch.true_peak_max,
        lexicon_id=batch.lexicon_id,
        lexicon_version=batch.lexicon_version,
    )
