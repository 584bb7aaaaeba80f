"""One attempt at a time, against a real receiver on a loopback port and a real database
(SQLite and PostgreSQL): claiming, logging, retry schedule, giving up, SSRF at delivery time,
secret rotation."""

import json
from datetime import timedelta

from sqlalchemy import update

from pipeline.db import jobs as db
from pipeline.db.models import Job, JobStatus, utcnow
from pipeline.db.models_webhooks import DeliveryStatus, WebhookSecret
from pipeline.webhooks import events as ev
from pipeline.webhooks import outbox, secrets
from pipeline.webhooks.delivery import DeliveryConfig, deliver, retry_delay
from synth_testkit.webhook_receiver import Receiver
from tests.webhooks.conftest import deliveries_and_attempts, make_batch


def finish_all(sessions, batch_id, fail_first=False):
    with sessions() as s:
        ids = [j for ids in db.job_ids_by_queue(s, batch_id).values() for j in ids]
        db.claim(s, ids)
        for i, job_id in enumerate(ids):
            if fail_first and i == 0:
                db.fail(s, job_id, "nothing speakable")
            else:
                db.transition(s, [job_id], JobStatus.DONE, object_key=f"k/{job_id}.wav", finished_at=utcnow())
        s.commit()
    return ids


def emitted(sessions, job_ids):
    with sessions() as s:
        out = outbox.emit_for_jobs(s, job_ids)
        s.commit()
    return out


def run_until_closed(sessions, config, delivery_id):
    attempt, results = 1, []
    while True:
        result = deliver(sessions, config, delivery_id, attempt)
        results.append(result)
        if result.retry_in is None:
            return results
        attempt += 1


def test_events_are_recorded_once_however_often_emitted(sessions, wh_settings, key, receiver):
    batch_id = make_batch(sessions, wh_settings, key[0], receiver.url, ["One.", "Two.", "Three."])
    job_ids = finish_all(sessions, batch_id, fail_first=True)
    first = emitted(sessions, job_ids)
    assert len(first) == 4  # job.failed, 2 x job.finished, batch.finished
    assert emitted(sessions, job_ids) == first  # still waiting: the same ids, no new rows
    rows, _ = deliveries_and_attempts(sessions)
    assert len(rows) == 4
    types = sorted(r.event_type for r in rows.values())
    assert types == ["batch.finished", "job.failed", "job.finished", "job.finished"]
    batch_row = rows[ev.event_id("batch.finished", batch_id)]
    body = json.loads(batch_row.body)
    assert body["type"] == "batch.finished" and body["data"]["counts"] == {
        "total": 3,
        "done": 2,
        "failed": 1,
        "cancelled": 0,
    }
    failed = next(r for r in rows.values() if r.event_type == "job.failed")
    assert json.loads(failed.body)["data"]["error"] == "nothing speakable"
    # Once attempted, a re-emission enqueues nothing.
    for delivery_id in first:
        deliver(sessions, DeliveryConfig.from_settings(wh_settings), delivery_id, 1)
    assert emitted(sessions, job_ids) == []


def test_events_follow_the_subscription_and_need_an_owner(sessions, wh_settings, key, receiver):
    only_batch = make_batch(sessions, wh_settings, key[0], receiver.url, ["A.", "B."], events=["batch.finished"])
    no_owner = make_batch(sessions, wh_settings, None, receiver.url, ["C."])
    ids = finish_all(sessions, only_batch) + finish_all(sessions, no_owner)
    with sessions() as s:  # a job's own webhook wins over its batch's
        s.execute(
            update(Job)
            .where(Job.id == ids[0])
            .values(webhook_url=receiver.url + "/job", webhook_events=["job.finished"])
        )
        s.commit()
    emitted(sessions, ids)
    rows, _ = deliveries_and_attempts(sessions)
    assert sorted((r.event_type, r.url.endswith("/job")) for r in rows.values()) == [
        ("batch.finished", False),
        ("job.finished", True),
    ]


def test_retries_until_the_receiver_recovers_and_logs_every_attempt(sessions, wh_settings, key, receiver):
    batch_id = make_batch(sessions, wh_settings, key[0], receiver.url, ["One."], events=["batch.finished"])
    [delivery_id] = emitted(sessions, finish_all(sessions, batch_id))
    results = run_until_closed(sessions, DeliveryConfig.from_settings(wh_settings), delivery_id)
    assert [r.succeeded for r in results] == [False, False, True]
    assert all(0 <= r.retry_in <= d for r, d in zip(results[:2], wh_settings.webhook_retry_schedule))
    assert [r.answered for r in receiver.requests] == [500, 500, 200]
    assert {r.webhook_id for r in receiver.requests} == {delivery_id}  # same id on every retry
    assert all(r.valid_for == [key[1]] for r in receiver.requests)
    rows, attempts = deliveries_and_attempts(sessions)
    d = rows[delivery_id]
    assert d.status == DeliveryStatus.SUCCEEDED.value and d.attempts == 3 and d.last_status_code == 200
    assert [(a.attempt_no, a.status_code) for a in attempts[delivery_id]] == [(1, 500), (2, 500), (3, 200)]
    assert [a.next_attempt_at is not None for a in attempts[delivery_id]] == [True, True, False]
    assert all(a.address == "127.0.0.1" and a.duration_ms > 0 for a in attempts[delivery_id])
    assert attempts[delivery_id][0].error == "HTTP 500"
    # A second message for an attempt already made is a no-op.
    assert not deliver(sessions, DeliveryConfig.from_settings(wh_settings), delivery_id, 3).claimed
    assert len(receiver.requests) == 3


def test_gives_up_after_the_schedule(sessions, wh_settings, key):
    with Receiver(secrets=[key[1]], fail_first=100) as down:
        settings = wh_settings.with_overrides(webhook_retry_schedule=(0.01, 0.01))
        batch_id = make_batch(sessions, settings, key[0], down.url, ["One."], events=["batch.finished"])
        [delivery_id] = emitted(sessions, finish_all(sessions, batch_id))
        results = run_until_closed(sessions, DeliveryConfig.from_settings(settings), delivery_id)
    assert len(results) == 3 and not any(r.succeeded for r in results)
    rows, attempts = deliveries_and_attempts(sessions)
    assert rows[delivery_id].status == DeliveryStatus.FAILED.value and rows[delivery_id].finished_at
    assert attempts[delivery_id][-1].error == "HTTP 500; gave up after 3 attempts"


def test_gone_stops_at_once(sessions, wh_settings, key):
    with Receiver(secrets=[key[1]], fail_first=5, fail_code=410) as gone:
        batch_id = make_batch(sessions, wh_settings, key[0], gone.url, ["One."], events=["batch.finished"])
        [delivery_id] = emitted(sessions, finish_all(sessions, batch_id))
        result = deliver(sessions, DeliveryConfig.from_settings(wh_settings), delivery_id, 1)
    assert not result.succeeded and result.retry_in is None and len(gone.requests) == 1
    rows, _ = deliveries_and_attempts(sessions)
    assert rows[delivery_id].status == DeliveryStatus.FAILED.value and rows[delivery_id].last_status_code == 410


def test_refused_urls_are_never_called(sessions, wh_settings, key, receiver):
    config = DeliveryConfig.from_settings(wh_settings.with_overrides(webhook_allow_hosts=()))
    batch_id = make_batch(sessions, wh_settings, key[0], receiver.url, ["One."], events=["batch.finished"])
    [delivery_id] = emitted(sessions, finish_all(sessions, batch_id))
    result = deliver(sessions, config, delivery_id, 1)  # the allow-list no longer names 127.0.0.0/8
    assert result.claimed and result.retry_in is None and receiver.requests == []
    _, attempts = deliveries_and_attempts(sessions)
    error = attempts[delivery_id][0].error  # the key's owner reads it: no internal address in it
    assert "refused" in error and "public addresses only" in error and "loopback" not in error, error


def test_rotation_signs_with_both_secrets_during_the_grace_period(sessions, wh_settings, key):
    key_id, old = key
    with sessions() as s:
        new = secrets.rotate(s, key_id, grace_s=3600).secret
        s.commit()
    assert new != old and new.startswith("whsec_")
    with Receiver(secrets=[old, new]) as r:
        batch_id = make_batch(sessions, wh_settings, key_id, r.url, ["One."], events=["batch.finished"])
        [delivery_id] = emitted(sessions, finish_all(sessions, batch_id))
        assert deliver(sessions, DeliveryConfig.from_settings(wh_settings), delivery_id, 1).succeeded
        [got] = r.requests
        assert len(got.headers["webhook-signature"].split()) == 2
        assert got.valid_for == [old, new]  # each secret verifies one of them

        with sessions() as s:  # grace over: only the new secret signs
            s.execute(
                update(WebhookSecret)
                .where(WebhookSecret.key_id == key_id)
                .values(previous_until=utcnow() - timedelta(seconds=1))
            )
            s.commit()
        batch_2 = make_batch(sessions, wh_settings, key_id, r.url, ["Two."], events=["batch.finished"])
        [delivery_2] = emitted(sessions, finish_all(sessions, batch_2))
        assert deliver(sessions, DeliveryConfig.from_settings(wh_settings), delivery_2, 1).succeeded
        assert r.requests[1].valid_for == [new] and len(r.requests[1].headers["webhook-signature"].split()) == 1


def test_rotating_again_within_the_grace_ends_the_oldest_secrets_grace(sessions, key):
    # docs/webhooks.md: only one old secret signs, so a second rotation drops the first secret.
    key_id, first = key
    with sessions() as s:
        second = secrets.rotate(s, key_id, grace_s=3600).secret
        third = secrets.rotate(s, key_id, grace_s=3600)
        s.commit()
        assert secrets.signing_secrets(third) == [third.secret, second]
    assert first not in (third.secret, second)


def test_retry_delay_has_full_jitter_and_ends_with_the_schedule():
    import random

    rng = random.Random(7)
    delays = [retry_delay(1, (5, 300), rng) for _ in range(2000)]
    assert 0 <= min(delays) < 0.1 and 4.9 < max(delays) <= 5
    assert 140 < sum(retry_delay(2, (5, 300), rng) for _ in range(2000)) / 2000 < 160
    assert retry_delay(3, (5, 300), rng) is None


def test_a_batch_closed_by_cancelling_gets_its_event_from_the_sweep(sessions, wh_settings, key, receiver):
    from pipeline import lifecycle
    from pipeline.storage import make_store

    batch_id = make_batch(sessions, wh_settings, key[0], receiver.url, ["One.", "Two."])
    with sessions() as s:
        lifecycle.cancel(s, make_store(wh_settings), batch_id)  # no render task ever runs
        s.commit()
    with sessions() as s:
        [delivery_id] = outbox.emit_missed_batch_events(s)
        s.commit()
    with sessions() as s:
        assert outbox.emit_missed_batch_events(s) == []  # once
    rows, _ = deliveries_and_attempts(sessions)
    body = json.loads(rows[delivery_id].body)
    assert body["type"] == "batch.finished" and body["data"]["status"] == "cancelled"
    assert body["data"]["counts"] == {"total": 2, "done": 0, "failed": 0, "cancelled": 2}
