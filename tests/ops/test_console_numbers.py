"""The console's numbers from a known day, on both databases (PostgreSQL takes the percentiles in
SQL, SQLite in Python): the per-minute buckets, the percentiles, failures per hour by reason, and
a batch's progress, x real time and estimated finish."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pipeline.console import progress, series
from pipeline.db.models import Batch, Job, JobMetrics, JobStatus
from tests.ops.console_data import EPYC, H100, fill_day

NOW = datetime.now(UTC).replace(second=30, microsecond=0)


def test_the_last_day_is_bucketed_per_minute_with_its_percentiles_and_failures_per_hour(sessions):
    with sessions() as s:
        fill_day(s, NOW)
        day = series.last_day(s, NOW)
    assert day["start"] == int((NOW - timedelta(hours=24, seconds=30)).timestamp()) and day["minute_buckets"] == 1440
    at = [(24 - h) * 60 for h in range(20, 0, -2)]  # the minutes, from the start, of the jobs
    assert day["audio_s_by_device"] == {H100: [[m, 600.0] for m in at], EPYC: [[m, 120.0] for m in at]}
    ttfb = day["ttfb_s"]
    assert ttfb["batch"]["p50"] == ttfb["batch"]["p95"] == [[m, pytest.approx(2.0 + (24 * 60 - m) / 6000)] for m in at]
    assert ttfb["realtime"]["p95"][0] == [at[0], pytest.approx(0.5)]
    first_hour = day["start"] // 3600
    hour_of = [int((NOW - timedelta(hours=h)).timestamp()) // 3600 - first_hour for h in (3, 4)]
    assert day["failures_by_reason"] == {
        "nothing speakable in line": [[hour_of[0], 1]],
        "retries exhausted": [[hour_of[1], 1]],
    }


def test_a_batch_in_progress_has_its_share_done_its_speed_and_a_finish_from_its_recent_pace(sessions):
    with sessions() as s:
        s.add(
            Batch(
                id="open", name="book", voice="joe", format="wav", total_jobs=4, created_at=NOW - timedelta(minutes=1)
            )
        )
        for i, status in enumerate([JobStatus.DONE, JobStatus.DONE, JobStatus.RUNNING, JobStatus.QUEUED]):
            done = status == JobStatus.DONE
            s.add(
                Job(
                    id=f"job{i}",
                    batch_id="open",
                    client_id=f"c{i}",
                    text="hello",
                    voice="joe",
                    format="wav",
                    status=status,
                    attempts=1,
                    created_at=NOW - timedelta(minutes=1),
                    started_at=NOW - timedelta(seconds=10 - i) if status != JobStatus.QUEUED else None,
                    finished_at=NOW - timedelta(seconds=1) if done else None,
                )
            )
            if done:
                s.add(JobMetrics(job_id=f"job{i}", audio_s=10.0, device_type=H100))
        s.commit()
        (shown,) = progress.open_batches(s, NOW)
    assert (shown["name"], shown["owner"], shown["done"], shown["running"], shown["waiting"]) == (
        "book",
        "(CLI)",
        2,
        1,
        1,
    )
    assert shown["progress"] == 0.5 and shown["x_realtime"] == 2.0  # 20 s of audio in the 10 s since it started
    assert shown["eta_s"] == 300  # 2 jobs left at the 2 jobs of the last 5 minutes
