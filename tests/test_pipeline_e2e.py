"""A batch through the whole path: Redis, a real Celery worker (thread), Piper, SQL, storage."""

import json

import pytest

from pipeline.corpus import parse_corpus
from pipeline.db import jobs as db
from pipeline.db.models import Batch, JobStatus
from pipeline.routing import all_queues
from pipeline.storage import make_store
from pipeline.submit import BatchOptions, create_batch
from pipeline.summary import summarize
from worker.app import default_queues, make_app
from worker.boot import boot
from worker.enqueue import enqueue_batch
from tests.waiting import eventually
from tests.workers import app_with_worker, thread_worker

CORPUS = (
    """\
The quick brown fox jumps over the lazy dog.

--- ... ---
Dr. Patel will see you in room 12 after lunch.
"""
    + " ".join(f"This is sentence {i} of a long paragraph." for i in range(30))
    + "\n"
)


@pytest.fixture(params=["local", "s3"])
def store_settings(request, settings):
    if request.param == "local":
        return settings
    return settings.with_overrides(
        s3_bucket=request.getfixturevalue("s3_bucket"), s3_endpoint_url=request.getfixturevalue("s3_endpoint")
    )


@pytest.fixture
def running_worker(store_settings, redis_url, piper_engine):
    queues = all_queues(store_settings.bucket_seconds)
    with app_with_worker(store_settings, redis_url, piper_engine, queues) as app:
        yield app


def wait_finished(sessions, batch_id, timeout=120):
    """Until the batch is closed: every job ended, then its manifest written and its key stored
    (the worker does that just after the last job, so the jobs alone can end first)."""

    def closed():
        with sessions() as s:
            return db.batch_finished(s, batch_id) and s.get(Batch, batch_id).manifest_key

    eventually(closed, timeout, f"batch {batch_id} to finish with its manifest", interval=0.2)


def test_batch_renders_with_one_bad_line_failing_alone(store_settings, sessions, running_worker):
    corpus = parse_corpus(CORPUS.encode(), source="c.txt", max_line_chars=5000)
    with sessions() as s:
        batch = create_batch(s, store_settings, corpus, BatchOptions(format="mp3", name="e2e"), source="c.txt")
        s.commit()
    messages = enqueue_batch(running_worker, sessions, batch.id, store_settings.jobs_per_task)
    assert messages == 2  # three short lines share a bucket message; the paragraph has its own bucket
    wait_finished(sessions, batch.id)

    store = make_store(store_settings)
    with sessions() as s:
        rows = {job.client_id: (job, m) for job, m in db.jobs_with_metrics(s, batch.id)}
        summary = summarize(s, s.get(Batch, batch.id))
        manifest_key = s.get(Batch, batch.id).manifest_key
    assert summary.counts["done"] == 3 and summary.counts["failed"] == 1
    bad, _ = rows["line-000003"]
    assert bad.status == JobStatus.FAILED and "nothing speakable" in bad.error
    for client_id in ("line-000001", "line-000004", "line-000005"):
        job, m = rows[client_id]
        assert job.status == JobStatus.DONE and job.attempts == 1
        assert store.get(job.object_key)[:3] in (b"ID3", b"\xff\xfb", b"\xff\xf3")  # an mp3
        assert m.engine == "piper" and m.model == "en_US-joe-medium" and m.device_type
        assert 0 < m.ttfb_s and 0 < m.synth_s and m.rtf == pytest.approx(m.synth_s / m.audio_s)
        assert m.queue_wait_s >= 0 and m.worker_host and m.batch_size >= 1
    paragraph = rows["line-000005"][1]
    assert paragraph.audio_s > 30  # 30 sentences joined into one file
    assert sorted(store.list(f"batches/{batch.id}/audio/")) == sorted(
        rows[c][0].object_key for c in ("line-000001", "line-000004", "line-000005")
    )
    manifest = [json.loads(line) for line in store.get(manifest_key).decode().splitlines()]
    assert [m["client_id"] for m in manifest] == ["line-000001", "line-000003", "line-000004", "line-000005"]
    assert manifest[1]["status"] == "failed" and manifest[1]["error"]
    assert manifest[0]["duration_s"] > 1
    # an S3 URL a user elsewhere can read; a local folder's paths are never given out
    assert manifest[0]["url"] == (store.url(manifest[0]["object_key"]) if store_settings.s3_bucket else None)
    assert all(m["object_key"] is None or m["object_key"].startswith(f"batches/{batch.id}/audio/") for m in manifest)


@pytest.mark.slow
@pytest.mark.parametrize("order", ["longest", "shortest"])
def test_workers_poll_the_long_bucket_first(settings, sessions, redis_url, piper_engine, order):
    """With a backlog in several buckets, a worker takes the longest bucket first (the default), so
    the last jobs of a batch are short and GPUs finish together; ``bucket_order=shortest`` reverses it."""
    settings = settings.with_overrides(bucket_order=order, jobs_per_task=1)
    app = make_app(settings, redis_url)
    corpus = parse_corpus(CORPUS.replace("--- ... ---\n", "").encode(), source="c.txt", max_line_chars=5000)
    with sessions() as s:
        batch = create_batch(s, settings, corpus, BatchOptions(name="order"), source="c.txt")
        s.commit()
    enqueue_batch(app, sessions, batch.id, settings.jobs_per_task)  # the backlog exists before any worker
    boot(app, engine=piper_engine)
    with thread_worker(app, default_queues(settings), concurrency=1):
        wait_finished(sessions, batch.id)
    with sessions() as s:
        jobs = sorted((job for job, _ in db.jobs_with_metrics(s, batch.id)), key=lambda j: j.started_at)
    queues = [job.queue for job in jobs]
    assert sorted(set(queues)) == ["batch.le10s", "batch.le120s"] and len(jobs) == 3
    assert queues[0 if order == "longest" else -1] == "batch.le120s"  # the paragraph
