"""Checks on the verify queue (SYNTH_VERIFY with a Redis of the fleet's): a render worker records
each job done with its verdict pending and queues its check; a verify worker checks it once, also
when a message comes twice, is lost (the reconciler sends it again) or a verify worker is killed
mid-check, and the batch's manifest is written again with every verdict."""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import timedelta

import pytest
import redis
from sqlalchemy import select, update

from pipeline.corpus import parse_corpus
from pipeline.db.models import Batch, Job, JobMetrics, utcnow
from pipeline.live import redis_client_url
from pipeline.messages import UNACKED, VERIFY_TASK
from pipeline.routing import VERIFY_QUEUE, all_queues
from pipeline.storage import make_store
from pipeline.submit import BatchOptions, create_batch
from pipeline.verify.jobs import caption_key
from pipeline.verify.queued import stranded
from tests.cli_helpers import start_synth, synth_env
from tests.waiting import eventually
from tests.workers import app_with_worker, thread_worker
from worker.app import make_app
from worker.enqueue import enqueue_batch
from worker.verify import check_later

pytest.importorskip("pocketsphinx")

LINES = (
    "The library opens at nine in the morning and closes at six in the evening.\n"
    "Please remember to bring your ticket and a form of identification.\n"
)


def render_pending(settings, sessions, redis_url, engine) -> str:
    """A batch of two jobs rendered by a render worker that checks nothing itself; its id."""
    with sessions() as s:
        batch = create_batch(
            s,
            settings,
            parse_corpus(LINES.encode(), source="c", max_line_chars=500),
            BatchOptions(format="mp3"),
            source="c",
        )
        s.commit()
    with app_with_worker(settings, redis_url, engine, all_queues(settings.bucket_seconds)) as app:
        enqueue_batch(app, sessions, batch.id, jobs_per_task=2)

        def closed():
            with sessions() as s:
                return s.get(Batch, batch.id).finished_at is not None

        eventually(closed, 120, "the batch to render", interval=0.1)
    return batch.id


def verdicts(sessions, batch_id: str) -> dict[str, str | None]:
    with sessions() as s:
        return dict(
            s.execute(
                select(Job.id, JobMetrics.verdict)
                .join(JobMetrics, JobMetrics.job_id == Job.id)
                .where(Job.batch_id == batch_id)
            ).all()
        )


def manifest_verdicts(sessions, settings, batch_id: str) -> list[str]:
    with sessions() as s:
        key = s.get(Batch, batch_id).manifest_key
    return [json.loads(line)["verdict"] for line in make_store(settings).get(key).decode().splitlines()]


def checked(sessions, batch_id: str) -> bool:
    return "pending" not in verdicts(sessions, batch_id).values()


def test_a_verify_worker_checks_each_queued_job_once_and_the_manifest_gets_the_verdicts(
    settings, sessions, redis_url, piper_engine, tmp_path, monkeypatch
):
    log = tmp_path / "recognizer.log"
    monkeypatch.setenv("SYNTH_TEST_RECOGNIZER_LOG", str(log))
    settings = settings.with_overrides(verify="all", verify_recognizer="tests.verify_plugs:Counted")
    batch_id = render_pending(settings, sessions, redis_url, piper_engine)
    assert set(verdicts(sessions, batch_id).values()) == {"pending"}
    assert manifest_verdicts(sessions, settings, batch_id) == ["pending", "pending"]
    assert not log.exists()  # the render worker checked nothing itself

    metered = unmeter_first(sessions, batch_id)  # as a GPU worker records a job of a batch not levelled
    app = make_app(settings, redis_url)
    client = redis.Redis.from_url(redis_client_url(redis_url))
    client.delete(VERIFY_QUEUE)  # the messages are lost: the reconciler sends them again
    later = utcnow() + timedelta(minutes=5)
    assert stranded(sessions, client, send=check_later(app), before=later) == 2
    assert stranded(sessions, client, send=check_later(app), before=later) == 0  # named by a message now
    with thread_worker(app, [VERIFY_QUEUE]):
        eventually(lambda: checked(sessions, batch_id), 120, "every job to be checked", interval=0.1)
        assert log.read_text().splitlines() == ["transcribed"] * 2
        for job_id in verdicts(sessions, batch_id):  # a second message per job: a redelivery, the reconciler's
            app.send_task(VERIFY_TASK, args=[[job_id]], queue=VERIFY_QUEUE, routing_key=VERIFY_QUEUE)
        eventually(
            lambda: client.llen(VERIFY_QUEUE) == 0 and client.hlen(UNACKED) == 0,
            60,
            "the second messages to be worked",
            interval=0.1,
        )

    assert log.read_text().splitlines() == ["transcribed"] * 2  # the second copies found them checked
    assert set(verdicts(sessions, batch_id).values()) == {"clean"}
    assert manifest_verdicts(sessions, settings, batch_id) == ["clean", "clean"]
    store = make_store(settings)
    with sessions() as s:
        keys = s.scalars(select(Job.object_key).where(Job.batch_id == batch_id)).all()
    assert all(store.exists(caption_key(key, fmt)) for key in keys for fmt in ("json", "srt", "vtt"))
    # The check metered the job its render worker did not (from the mp3 delivered: close to the
    # render worker's figure for the samples), and left the other's figures as they were.
    levels = loudness_of(sessions, batch_id)
    first, second = sorted(levels)
    assert levels[second] == metered[second]
    assert levels[first][0] == pytest.approx(metered[first][0], abs=0.5)
    assert levels[first][1] == pytest.approx(metered[first][1], abs=1.0)


def loudness_of(sessions, batch_id: str) -> dict[str, tuple[float | None, float | None]]:
    with sessions() as s:
        rows = s.execute(
            select(Job.client_id, JobMetrics.loudness_lufs, JobMetrics.true_peak_dbtp)
            .join(JobMetrics, JobMetrics.job_id == Job.id)
            .where(Job.batch_id == batch_id)
        ).all()
    return {client_id: (lufs, peak) for client_id, lufs, peak in rows}


def unmeter_first(sessions, batch_id: str) -> dict[str, tuple[float | None, float | None]]:
    """Forget the first job's loudness and true peak; returns every job's as metered."""
    metered = loudness_of(sessions, batch_id)
    assert all(lufs is not None and peak is not None for lufs, peak in metered.values())
    with sessions() as s:
        first = s.scalar(select(Job.id).where(Job.batch_id == batch_id).order_by(Job.client_id).limit(1))
        s.execute(update(JobMetrics).where(JobMetrics.job_id == first).values(loudness_lufs=None, true_peak_dbtp=None))
        s.commit()
    return metered


@pytest.mark.slow
def test_a_verify_worker_killed_mid_check_leaves_each_job_checked_once_by_the_next(
    settings, database_url, sessions, redis_url, piper_engine, tmp_path
):
    log = tmp_path / "recognizer.log"
    settings = settings.with_overrides(verify="all")
    batch_id = render_pending(settings, sessions, redis_url, piper_engine)
    env = synth_env(
        SYNTH_DATA_DIR=str(settings.data_dir),
        SYNTH_REDIS_URL=redis_url,
        SYNTH_DATABASE_URL=database_url,
        SYNTH_VISIBILITY_TIMEOUT="4",
        SYNTH_TEST_RECOGNIZER_LOG=str(log),
        SYNTH_VERIFY_RECOGNIZER="tests.verify_plugs:Stuck",
    )

    first = start_synth("worker", "--verify", "-c", "1", env=env, log=tmp_path / "verify1.log")
    try:
        eventually(lambda: log.exists() and "started" in log.read_text(), 60, "a check to start", interval=0.1)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the worker and its pool's process, as a lost machine
        first.wait()
    assert set(verdicts(sessions, batch_id).values()) == {"pending"}

    env["SYNTH_VERIFY_RECOGNIZER"] = "tests.verify_plugs:Counted"
    second = start_synth("worker", "--verify", "-c", "1", env=env, log=tmp_path / "verify2.log")
    try:
        eventually(lambda: checked(sessions, batch_id), 120, "the next worker to check every job", interval=0.2)
        time.sleep(2)  # a copy of a message checked twice would show in the log meanwhile
    finally:
        second.terminate()
        second.wait(timeout=30)
    # The first worker's check ran in a pool process SYNTH_VERIFY_NICE (10) below this one, so a
    # render worker on the same host gets the CPU first.
    nice = min(19, os.nice(0) + 10)
    assert log.read_text().splitlines() == [f"started at nice {nice}", "transcribed", "transcribed"]
    assert set(verdicts(sessions, batch_id).values()) == {"clean"}
    assert manifest_verdicts(sessions, settings, batch_id) == ["clean", "clean"]
