"""The nightly report task through a real Celery worker (thread) and Redis, writing to S3 over HTTP
(moto's server) and recording the report in the database (SQLite and PostgreSQL)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest
from celery.beat import PersistentScheduler

from pipeline.reports.publish import latest_report
from pipeline.routing import all_queues
from pipeline.storage import make_store
from tests.reports.known_fleet import PRICES, T0, UNTIL, at, fill
from worker.app import make_app
from worker.beat import REPORT_TASK, beat_schedule, parse_cron, report_period
from tests.waiting import eventually
from tests.workers import thread_worker


@pytest.fixture
def s3_settings(settings, s3_endpoint, s3_bucket):
    return settings.with_overrides(s3_bucket=s3_bucket, s3_endpoint_url=s3_endpoint, gpu_prices=PRICES)


def wait_report(sessions, timeout=60):
    def recorded():
        with sessions() as s:
            return latest_report(s)

    return eventually(recorded, timeout, "a report to be recorded", interval=0.2)


def test_nightly_task_writes_html_and_json_to_s3_and_records_them(s3_settings, sessions, redis_url):
    with sessions() as s:
        fill(s)
    app = make_app(s3_settings, redis_url)
    with thread_worker(app, all_queues(s3_settings.bucket_seconds), concurrency=1):
        # As beat sends it at 06:00:07 the next morning, minus the 6 h: the period is the day [T0, T0+24h).
        app.send_task(REPORT_TASK, kwargs={"until": at(24, 7).isoformat()})
        row = wait_report(sessions)

    assert row.html_key == "reports/2026-01-11.html" and row.json_key == "reports/2026-01-11.json"
    assert row.period_start.replace(tzinfo=None) == T0.replace(tzinfo=None)
    assert row.period_end.replace(tzinfo=None) == UNTIL.replace(tzinfo=None)
    assert row.summary["jobs_done"] == 5 and row.summary["headline"]["audio_hours"] == pytest.approx(4100 / 3600)
    assert "series" not in row.summary  # the stored summary is the numbers, not the plot data

    store = make_store(s3_settings)
    stored = json.loads(store.get(row.json_key))
    assert stored["overall"]["busy_s"] == pytest.approx(1300) and stored["jobs_failed"] == 4
    devices = {r["key"]: r for r in stored["throughput"]["device_type"]}
    assert devices["NVIDIA H100 80GB HBM3"]["cost"] == pytest.approx(0.7)
    html = store.get(row.html_key).decode()
    images = html.split('src="data:image/png;base64,')[1:]
    assert len(images) == 3  # throughput over time, TTFB distribution, per-GPU bars
    for img in images:
        assert base64.b64decode(img.split('"', 1)[0])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "hostA/gpu0" in html and "nothing speakable in line" in html


def test_schedule_has_the_report_and_hourly_expiry(settings):
    schedule = beat_schedule(settings.with_overrides(report_cron="30 5 * * 1"))
    assert schedule["nightly-report"]["task"] == REPORT_TASK
    assert schedule["expire-batches"]["task"] == "synth.expire"
    report_cron = schedule["nightly-report"]["schedule"]
    assert report_cron.minute == {30} and report_cron.hour == {5} and report_cron.day_of_week == {1}
    assert (
        schedule["expire-batches"]["schedule"].minute == {0} and len(schedule["expire-batches"]["schedule"].hour) == 24
    )
    with pytest.raises(Exception, match="5 fields"):
        parse_cron("0 6 * *")
    assert report_period(at(30, 59)) == (at(6), at(30))


def beat_state(app, path) -> PersistentScheduler:
    """The state `synth beat` keeps in the data folder, opened with the same app and celery."""
    return PersistentScheduler(app=app, schedule_filename=str(path))


@pytest.mark.timeout(200)
def test_synth_beat_sends_a_missed_report_at_start_and_a_worker_writes_it(tmp_path, redis_url):
    """`synth beat` as a subprocess, with the default schedule (06:00 UTC) and its state saying the
    report last ran two days ago, as after a beat that was down over 06:00: it sends the missed
    report as it starts, and a real worker writes it. The test waits for the report, not for a
    cron minute to come round."""
    from cli.beat import schedule_path
    from cli.context import open_database
    from pipeline.settings import Settings
    from tests.cli_helpers import start_synth, synth_env

    settings = Settings(data_dir=tmp_path / "data", redis_url=redis_url)  # the embedded SQLite of the data folder
    engine, sessions = open_database(settings)
    app = make_app(settings, redis_url)
    missed = datetime.now(UTC) - timedelta(days=2)
    state = beat_state(app, schedule_path(settings))
    state.schedule["nightly-report"].last_run_at = missed
    state.close()

    log = tmp_path / "beat.log"
    proc = start_synth(
        "beat",
        "--loglevel",
        "INFO",
        log=log,
        env=synth_env(SYNTH_REDIS_URL=redis_url, SYNTH_DATA_DIR=str(settings.data_dir)),
    )
    try:
        with thread_worker(app, all_queues(settings.bucket_seconds), concurrency=1):
            row = wait_report(sessions, timeout=120)
    except AssertionError as failed:
        raise AssertionError(f"{failed}; beat's log ends:\n{log.read_text()[-3000:]}") from None
    finally:
        proc.terminate()
        proc.wait(30)
        engine.dispose()
    assert row.period_end.replace(tzinfo=UTC) > missed + timedelta(days=1)  # the last day's, not the missed one's
    assert "Sending due task nightly-report" in log.read_text()

    state = beat_state(app, schedule_path(settings))  # beat recorded the run where it keeps its state
    assert state.schedule["nightly-report"].last_run_at > missed + timedelta(days=1)
    state.close()
