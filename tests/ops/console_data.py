"""A day of known fleet history, placed relative to now: done jobs with metrics on two device
types and both priorities, failed jobs, and queue depth samples, for the console's plots."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import redis

from pipeline.console import depths
from pipeline.db.models import Batch, Job, JobMetrics, JobStatus

H100, EPYC = "NVIDIA H100 80GB HBM3", "AMD EPYC 7R13"
FAILED_ERRORS = ("nothing speakable in line: '!!!'", "gave up after 5 retries: database unreachable")


def fill_day(session, now: datetime | None = None) -> datetime:
    """Jobs done over the last 20 hours, one per device and priority every two hours, and two
    failures; returns the ``now`` they are placed from."""
    now = now or datetime.now(UTC)
    batch = Batch(
        id="history",
        voice="joe",
        format="wav",
        created_at=now - timedelta(hours=23),
        finished_at=now - timedelta(hours=1),
        total_jobs=0,
    )
    session.add(batch)
    n = 0
    for hours_ago in range(20, 0, -2):
        at = now - timedelta(hours=hours_ago)
        for device, priority, audio, ttfb in ((H100, "batch", 600.0, 2.0), (EPYC, "realtime", 120.0, 0.3)):
            n += 1
            job_id = f"hist{n:04d}".ljust(32, "0")
            session.add(
                Job(
                    id=job_id,
                    batch_id=batch.id,
                    client_id=f"h{n}",
                    text="hello",
                    voice="joe",
                    format="wav",
                    priority=priority,
                    status=JobStatus.DONE,
                    attempts=1,
                    created_at=at,
                    updated_at=at,
                    started_at=at,
                    finished_at=at,
                )
            )
            session.add(
                JobMetrics(
                    job_id=job_id,
                    audio_s=audio,
                    ttfb_s=ttfb + hours_ago / 100,
                    synth_s=1.0,
                    rtf=0.1,
                    device_type=device,
                    engine="orpheus",
                    recorded_at=at,
                )
            )
    for i, error in enumerate(FAILED_ERRORS):
        at = now - timedelta(hours=3 + i)
        session.add(
            Job(
                id=f"histfail{i}".ljust(32, "0"),
                batch_id=batch.id,
                client_id=f"f{i}",
                text="!!!",
                voice="joe",
                format="wav",
                status=JobStatus.FAILED,
                error=error,
                attempts=1,
                created_at=at,
                updated_at=at,
                finished_at=at,
            )
        )
    batch.total_jobs = n + len(FAILED_ERRORS)
    session.commit()
    return now


def sample_depths(client: redis.Redis, queues: list[str], minutes: int = 180) -> None:
    """What the workers' heartbeat would have sampled over the last ``minutes``: a backlog that
    rose and drained."""
    now = time.time()
    for m in range(minutes, 0, -10):
        for q, queue in enumerate(queues[:2]):
            client.rpush(queue, *[b"m"] * (1 + (m // 10 + q * 3) % 7))
        assert depths.sample(client, queues, now=now - m * 60)
        for queue in queues[:2]:
            client.delete(queue)
