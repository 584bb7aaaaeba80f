"""Webhooks through the whole path: a batch rendered by a real Celery worker (thread) with Piper,
Redis, SQLite/PostgreSQL; events emitted by the render hook, delivered by synth.deliver_webhook on
the "webhooks" queue to a real receiver that verifies signatures and fails its first two attempts
of every event. Each event must be accepted exactly once, also after the render messages are sent
again (a redelivery), with every attempt logged."""

import json

import pytest
from celery.signals import task_postrun

from pipeline.db import jobs as db
from pipeline.db.models_webhooks import DeliveryStatus
from pipeline.webhooks import events as ev
from tests.webhooks.conftest import deliveries_and_attempts, make_batch
from worker.enqueue import enqueue_batch
from worker.tasks import RENDER_TASK
from tests.waiting import eventually
from tests.workers import app_with_worker

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "--- ... ---",
    "Webhooks are signed.",
    "Every event arrives once.",
]


@pytest.fixture
def running_worker(wh_settings, redis_url, piper_engine):
    with app_with_worker(wh_settings, redis_url, piper_engine) as app:
        yield app


def wait_closed(sessions, n, timeout=60):
    def closed():
        rows, attempts = deliveries_and_attempts(sessions)
        if len(rows) >= n and all(r.status in ("succeeded", "failed") for r in rows.values()):
            return rows, attempts
        return None

    try:
        return eventually(closed, timeout, f"{n} deliveries to close", interval=0.1)
    except AssertionError as timed_out:
        rows, _ = deliveries_and_attempts(sessions)
        raise AssertionError(f"{timed_out}: {[(r.event_type, r.status) for r in rows.values()]}") from None


def test_each_event_is_delivered_once_after_the_receiver_recovers(sessions, wh_settings, key, receiver, running_worker):
    batch_id = make_batch(sessions, wh_settings, key[0], receiver.url, TEXTS)
    enqueue_batch(running_worker, sessions, batch_id, wh_settings.jobs_per_task)
    accepted = receiver.wait_for(5)  # 3 job.finished, 1 job.failed, 1 batch.finished
    rows, attempts = wait_closed(sessions, 5)

    # The render messages again, as after a redelivery: jobs are skipped, events not re-emitted.
    with sessions() as s:
        job_ids = [j for ids in db.job_ids_by_queue(s, batch_id).values() for j in ids]
    # Wait for that task to have run (the worker is a thread of this process), not for a fixed time.
    finished = {}

    def on_postrun(task_id=None, state=None, retval=None, **_):
        finished[task_id] = (state, retval)

    task_postrun.connect(on_postrun, weak=False)
    try:
        resent = running_worker.send_task(RENDER_TASK, args=[job_ids], queue="batch.le10s")
        state, retval = eventually(lambda: finished.get(resent.id), 60, f"the re-sent render task {resent.id}")
    finally:
        task_postrun.disconnect(on_postrun)
    assert state == "SUCCESS" and retval["skipped"] == len(job_ids) == 4, (state, retval)

    types = sorted(json.loads(r.body)["type"] for r in receiver.accepted())
    assert types == ["batch.finished", "job.failed", "job.finished", "job.finished", "job.finished"]
    assert all(n == 1 for n in receiver.accepted_ids().values())  # accepted exactly once each
    assert len(receiver.requests) == 15  # 2 failures + 1 success, 5 events
    assert all(r.valid_for == [key[1]] for r in receiver.requests)
    rows_after, attempts_after = deliveries_and_attempts(sessions)
    assert rows_after.keys() == rows.keys() and len(rows) == 5
    for delivery_id, delivery in rows_after.items():
        seen = [r for r in receiver.requests if r.webhook_id == delivery_id]
        assert [r.answered for r in seen] == [500, 500, 200]  # one id across its retries
        assert delivery.status == DeliveryStatus.SUCCEEDED.value and delivery.attempts == 3
        assert [(a.attempt_no, a.status_code) for a in attempts_after[delivery_id]] == [(1, 500), (2, 500), (3, 200)]
        assert json.loads(seen[-1].body) == json.loads(delivery.body)

    batch_event = next(json.loads(r.body) for r in accepted if json.loads(r.body)["type"] == "batch.finished")
    assert receiver.requests[0].headers["webhook-id"] in rows
    assert batch_event["data"]["counts"] == {"total": 4, "done": 3, "failed": 1, "cancelled": 0}
    assert batch_event["data"]["audio_seconds"] > 2
    finished = [json.loads(r.body)["data"] for r in accepted if json.loads(r.body)["type"] == "job.finished"]
    assert all(
        d["object_key"].startswith(f"batches/{batch_id}/audio/")
        and d["audio_seconds"] > 0
        and d["audio_url"] == f"/v1/jobs/{d['job_id']}/audio"
        for d in finished
    )  # no store path
    failed = next(json.loads(r.body)["data"] for r in accepted if json.loads(r.body)["type"] == "job.failed")
    assert "nothing speakable" in failed["error"] and failed["client_id"] == "item-000002"
    assert ev.event_id("batch.finished", batch_id) in rows


def test_the_sweep_re_enqueues_deliveries_whose_message_was_lost(sessions, wh_settings, key, receiver, running_worker):
    from datetime import timedelta

    from sqlalchemy import update

    from pipeline.db.models import utcnow
    from pipeline.db.models_webhooks import WebhookDelivery
    from tests.webhooks.test_delivery import emitted, finish_all
    from worker.webhooks import SWEEP_TASK, WEBHOOK_QUEUE

    batch_id = make_batch(sessions, wh_settings, key[0], receiver.url, ["Lost."], events=["batch.finished"])
    [delivery_id] = emitted(sessions, finish_all(sessions, batch_id))  # recorded, never enqueued
    with sessions() as s:
        s.execute(update(WebhookDelivery).values(next_attempt_at=utcnow() - timedelta(minutes=5)))
        s.commit()
    running_worker.send_task(SWEEP_TASK, queue=WEBHOOK_QUEUE)
    [got] = receiver.wait_for(1)
    assert got.webhook_id == delivery_id
    rows, attempts = wait_closed(sessions, 1)
    assert rows[delivery_id].status == "succeeded" and len(attempts[delivery_id]) == 3


def test_a_delivery_sent_to_the_former_queue_name_goes_out(sessions, wh_settings, key, receiver, running_worker):
    """A message that the previous release put on "callbacks" (the webhook queue's former name)
    before an upgrade is consumed and delivered by today's worker."""
    from tests.webhooks.test_delivery import emitted, finish_all
    from pipeline.routing import FORMER_WEBHOOK_QUEUE as FORMER_QUEUE
    from worker.webhooks import DELIVER_TASK

    batch_id = make_batch(sessions, wh_settings, key[0], receiver.url, ["Queued before."], events=["batch.finished"])
    [delivery_id] = emitted(sessions, finish_all(sessions, batch_id))  # recorded, never enqueued
    running_worker.send_task(DELIVER_TASK, args=[delivery_id, 1], queue=FORMER_QUEUE)
    [got] = receiver.wait_for(1)
    assert got.webhook_id == delivery_id
    rows, _ = wait_closed(sessions, 1)
    assert rows[delivery_id].status == "succeeded"
