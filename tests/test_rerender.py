"""A job whose check says bad is rendered again with another seed (SYNTH_RERENDER_BUDGET), and
the better render is kept: the job's one object replaced once, in place, or left as it was; the
job records how many renders it took, also when a worker is killed during the retake."""

from __future__ import annotations

import json
import os
import signal
from datetime import timedelta

import pytest
import redis
from sqlalchemy import select

from pipeline.corpus import parse_corpus
from pipeline.db.models import Batch, Job, JobMetrics, utcnow
from pipeline.live import redis_client_url
from pipeline.reconcile import remove_orphans
from pipeline.messages import RERENDER_TASK, UNACKED
from pipeline.routing import VERIFY_QUEUE, all_queues
from pipeline.settings import Settings
from pipeline.storage import make_store
from pipeline.submit import BatchOptions, create_batch
from tests.cli_helpers import start_synth, synth, synth_env
from tests.waiting import eventually
from tests.workers import app_with_worker
from worker.enqueue import enqueue_batch

pytest.importorskip("pocketsphinx")

LINE = "The library opens at nine in the morning and closes at six in the evening."


def job_row(sessions, batch_id: str) -> tuple[Job, JobMetrics]:
    with sessions() as s:
        return s.execute(
            select(Job, JobMetrics).outerjoin(JobMetrics, JobMetrics.job_id == Job.id).where(Job.batch_id == batch_id)
        ).one()


def settled(sessions, batch_id: str, renders: int):
    _, m = job_row(sessions, batch_id)
    return m is not None and m.renders == renders and m.verdict != "pending"


def objects(store, batch_id: str, folder: str) -> list[str]:
    return store.list(f"batches/{batch_id}/{folder}/")


@pytest.mark.parametrize(("plug", "verdict", "kept"), [("DeafFirst", "clean", True), ("Deaf", "bad", False)])
def test_a_bad_job_is_rendered_again_once_and_the_better_render_is_its_one_object(
    settings, sessions, redis_url, piper_engine, tmp_path, monkeypatch, plug, verdict, kept
):
    log = tmp_path / "recognizer.log"
    monkeypatch.setenv("SYNTH_TEST_RECOGNIZER_LOG", str(log))
    settings = settings.with_overrides(verify="all", rerender_budget=1, verify_recognizer=f"tests.verify_plugs:{plug}")
    with sessions() as s:
        batch = create_batch(
            s,
            settings,
            parse_corpus(LINE.encode(), source="c", max_line_chars=500),
            BatchOptions(format="mp3"),
            source="c",
        )
        s.commit()
    queues = all_queues(settings.bucket_seconds)
    with app_with_worker(settings, redis_url, piper_engine, queues) as app:  # renders; checks wait
        enqueue_batch(app, sessions, batch.id, jobs_per_task=1)
        eventually(
            lambda: getattr(job_row(sessions, batch.id)[1], "verdict", None) == "pending",
            60,
            "the render",
            interval=0.1,
        )
    store = make_store(settings)
    job, _ = job_row(sessions, batch.id)
    first = store.get(job.object_key)

    with app_with_worker(settings, redis_url, piper_engine, [*queues, VERIFY_QUEUE]):
        eventually(lambda: settled(sessions, batch.id, renders=2), 120, "the retake to be settled", interval=0.1)

    job, metrics = job_row(sessions, batch.id)
    assert metrics.verdict == verdict
    assert metrics.extra["retakes"] == [
        {"render": 2, "verdict": verdict, "kept": kept, "reasons": metrics.extra["retakes"][0]["reasons"]}
    ]
    assert (store.get(job.object_key) != first) is kept  # replaced by the retake, or left as it was
    assert objects(store, batch.id, "audio") == [job.object_key] and objects(store, batch.id, "retakes") == []
    assert log.read_text().splitlines() == ["deaf", "transcribed" if kept else "deaf"]  # one check a render
    with sessions() as s:
        manifest = store.get(s.get(Batch, batch.id).manifest_key).decode()
    line = json.loads(manifest)
    assert (line["renders"], line["verdict"]) == (2, verdict)

    # A retake a worker left behind, killed after settling it, is removed as an orphan; the audio stays.
    store.put(f"batches/{batch.id}/retakes/left.r2.mp3", first, "audio/mpeg")
    assert remove_orphans(sessions, store, before=utcnow() + timedelta(hours=2)) == 1
    assert objects(store, batch.id, "audio") == [job.object_key] and objects(store, batch.id, "retakes") == []


@pytest.mark.slow
def test_a_worker_killed_during_the_retake_leaves_one_object_and_two_renders(
    tmp_path, redis_url, database_url, sessions
):
    log = tmp_path / "recognizer.log"
    env = synth_env(
        SYNTH_DATA_DIR=str(tmp_path / "data"),
        SYNTH_REDIS_URL=redis_url,
        SYNTH_DATABASE_URL=database_url,
        SYNTH_VISIBILITY_TIMEOUT="4",
        SYNTH_ENGINE_THREADS="1",
        SYNTH_VERIFY="all",
        SYNTH_RERENDER_BUDGET="1",
        SYNTH_TEST_RECOGNIZER_LOG=str(log),
        SYNTH_VERIFY_RECOGNIZER="tests.verify_plugs:DeafFirst",
    )
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(" ".join([LINE] * 6) + "\n")
    submitted = synth("submit", str(corpus), "--no-wait", env=env, timeout=60)
    assert submitted.returncode == 0, submitted.stderr.decode()
    batch_id = submitted.stdout.decode().strip()
    client = redis.Redis.from_url(redis_client_url(redis_url))

    def retake_in_hand():  # the retake's message delivered to the worker, not yet acked
        return any(RERENDER_TASK.encode() in raw for raw in client.hvals(UNACKED))

    first = start_synth("worker", env=env, log=tmp_path / "worker1.log")  # a CPU worker: renders and checks
    try:
        eventually(retake_in_hand, 120, "the retake to start", interval=0.05)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert job_row(sessions, batch_id)[1].renders == 1

    second = start_synth("worker", env=env, log=tmp_path / "worker2.log")
    try:
        eventually(lambda: settled(sessions, batch_id, renders=2), 120, "the retake to be settled", interval=0.2)
    finally:
        second.terminate()
        second.wait(timeout=30)
    job, metrics = job_row(sessions, batch_id)
    assert [r["render"] for r in metrics.extra["retakes"]] == [2]  # settled once
    store = make_store(Settings(data_dir=tmp_path / "data"))
    assert objects(store, batch_id, "audio") == [job.object_key] and objects(store, batch_id, "retakes") == []


def test_synth_submit_waits_for_the_retake_and_writes_the_kept_render(tmp_path):
    """With -o, the files and the manifest written are the renders kept: the command waits for the
    retakes of its bad jobs before its summary, not only for every job to be done."""
    corpus = tmp_path / "line.txt"
    corpus.write_text(LINE + "\n")
    env = synth_env(
        SYNTH_DATA_DIR=str(tmp_path / "data"),
        SYNTH_VERIFY="all",
        SYNTH_RERENDER_BUDGET="1",
        SYNTH_VERIFY_RECOGNIZER="tests.verify_plugs:DeafFirst",
        SYNTH_TEST_RECOGNIZER_LOG=str(tmp_path / "recognizer.log"),
    )
    done = synth("submit", str(corpus), "-o", str(tmp_path / "out"), env=env)
    assert done.returncode == 0, done.stderr.decode()
    (row,) = [json.loads(line) for line in (tmp_path / "out" / "manifest.jsonl").read_text().splitlines()]
    assert (row["renders"], row["verdict"]) == (2, "clean"), row
    assert "checked against the text: 1 of 1 job clean" in done.stderr.decode(), done.stderr
    kept = make_store(Settings(data_dir=tmp_path / "data")).get(row["object_key"])
    assert (tmp_path / "out" / "line-000001.wav").read_bytes() == kept
