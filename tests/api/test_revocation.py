"""Revoking a key stops its work in flight: `synth keys revoke` (a subprocess, as an operator runs
it) ends the key's open live stream within seconds, cancels its queued jobs, a job of it that a
worker takes later is not rendered, and no webhook is sent for it. A real API on a loopback port,
`synth worker` and Celery worker threads with Piper, real Redis, both databases."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest
from sqlalchemy import select

from synth_testkit.webhook_receiver import Receiver
from pipeline import api_keys
from pipeline.db.models import Job, JobStatus
from pipeline.db.models_webhooks import DeliveryStatus, WebhookDelivery
from pipeline.routing import REALTIME_QUEUE
from pipeline.submit import BatchOptions, Item, create_item_batch
from pipeline.webhooks import outbox
from pipeline.webhooks.delivery import DeliveryConfig, deliver
from tests.api.conftest import client_for
from tests.cli_helpers import start_synth, synth, synth_env
from tests.waiting import eventually
from tests.workers import app_with_worker
from worker.enqueue import enqueue_batch

LONG = "The committee reviewed every proposal carefully before the final vote was taken. " * 40
SPEECH = "/v1/audio/speech"


@pytest.fixture
def api_settings(settings):
    return settings.with_overrides(
        api_rate_limit=0, webhook_allow_hosts=("127.0.0.0/8",), webhook_retry_schedule=(0.2,)
    )


@pytest.fixture
def env(tmp_path, redis_url, database_url):
    return synth_env(
        SYNTH_DATA_DIR=str(tmp_path / "data"),
        SYNTH_REDIS_URL=redis_url,
        SYNTH_DATABASE_URL=database_url,
        SYNTH_ENGINE_THREADS="1",
    )


@pytest.fixture
def realtime_worker(env, tmp_path):
    """`synth worker -Q realtime`: speech renders, batch work stays queued."""
    process = start_synth("worker", "-Q", REALTIME_QUEUE, env=env, log=tmp_path / "worker.log")
    yield process
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)  # it may be mid-way through the revoked key's job
        process.wait(timeout=30)


def key_id_of(sessions, plaintext: str) -> str:
    with sessions() as s:
        return api_keys.authenticate(s, plaintext).id


def revoke(env, key_id: str) -> None:
    done = synth("keys", "revoke", key_id, env=env, timeout=60)
    assert done.returncode == 0, done.stderr.decode()


def statuses(sessions, batch_id: str) -> list[JobStatus]:
    with sessions() as s:
        return list(s.scalars(select(Job.status).where(Job.batch_id == batch_id)))


def test_revoking_a_key_ends_its_open_stream_and_cancels_its_queued_jobs(
    api_server, new_key, sessions, env, realtime_worker
):
    plaintext = new_key("leaving")
    key_id = key_id_of(sessions, plaintext)
    with Receiver(secrets=[]) as receiver, client_for(api_server, plaintext) as client:
        batch = client.post(
            "/v1/batches", json={"items": [{"text": f"Line {i}."} for i in range(4)], "webhook_url": receiver.url}
        )
        assert batch.status_code == 201, batch.text
        with client.stream(
            "POST", SPEECH, json={"model": "tts-1", "input": LONG, "voice": "alloy", "response_format": "pcm"}
        ) as r:
            assert r.status_code == 200
            chunks = r.iter_bytes()
            next(chunks)  # the stream plays
            revoke(env, key_id)
            revoked = time.monotonic()
            with pytest.raises(httpx.RemoteProtocolError):  # cut off: an incomplete transfer
                for _ in chunks:
                    pass
            cut_after = time.monotonic() - revoked
        assert client.post(SPEECH, json={"model": "tts-1", "input": "Hi.", "voice": "alloy"}).status_code == 401
    assert cut_after < 15, f"the revoked key's stream ran {cut_after:.1f} s after the revocation"
    assert set(statuses(sessions, batch.json()["id"])) == {JobStatus.CANCELLED}
    assert receiver.requests == []
    hub = api_server.server.config.app.state.synth.live
    eventually(lambda: hub.streams == 0, 10, "the revoked stream's listener to be closed")


def test_a_revoked_keys_job_that_reaches_a_worker_is_cancelled_there_not_rendered(
    settings, api_settings, new_key, sessions, env, redis_url, piper_engine
):
    key_id = key_id_of(sessions, new_key("late"))
    with Receiver(secrets=[]) as receiver:
        # Written in the moment before the revocation: the revocation's cancel did not see it.
        with sessions() as s:
            batch = create_item_batch(
                s,
                settings,
                [Item(text="Too late."), Item(text="Also too late.")],
                BatchOptions(),
                source="api",
                owner_key_id=key_id,
                webhook_url=receiver.url,
            )
            s.commit()
        with sessions() as s:
            assert api_keys.revoke_key(s, key_id)
            s.commit()
        with app_with_worker(api_settings, redis_url, piper_engine) as app:
            enqueue_batch(app, sessions, batch.id, jobs_per_task=1)
            eventually(
                lambda: set(statuses(sessions, batch.id)) == {JobStatus.CANCELLED},
                60,
                "the worker to cancel the revoked key's jobs",
            )
            # The batch closed, cancelled: its event is recorded and its delivery refused, unsent.
            closed = eventually(
                lambda: (d := deliveries(sessions)) and all(x.status == "failed" for x in d) and d,
                60,
                "the batch's event to be closed",
            )
        with sessions() as s:
            jobs = s.scalars(select(Job).where(Job.batch_id == batch.id)).all()
            assert all(j.error == "the API key was revoked" and j.object_key is None for j in jobs)
    assert [d.event_type for d in closed] == ["batch.finished"] and "revoked" in closed[0].last_error
    assert receiver.requests == []


def deliveries(sessions) -> list[WebhookDelivery]:
    with sessions() as s:
        return s.scalars(select(WebhookDelivery)).all()


def test_no_webhook_is_sent_for_a_revoked_key(sessions, api_settings, new_key):
    key_id = key_id_of(sessions, new_key("hooked"))
    with Receiver(secrets=[]) as receiver:
        with sessions() as s:
            batch = create_item_batch(
                s,
                api_settings,
                [Item(text="Done before.")],
                BatchOptions(),
                source="api",
                owner_key_id=key_id,
                webhook_url=receiver.url,
                webhook_events=["job.finished"],
            )
            s.commit()
        with sessions() as s:  # rendered before the revocation; its event waits for delivery
            (job,) = s.scalars(select(Job).where(Job.batch_id == batch.id)).all()
            job.status, job.object_key = JobStatus.DONE, "k/done.wav"
            [delivery_id] = outbox.emit_for_jobs(s, [job.id])
            assert api_keys.revoke_key(s, key_id)
            s.commit()
        result = deliver(sessions, DeliveryConfig.from_settings(api_settings), delivery_id, 1)
    assert result.claimed and not result.succeeded and result.retry_in is None
    assert receiver.requests == []
    with sessions() as s:
        delivery = s.get(WebhookDelivery, delivery_id)
        assert delivery.status == DeliveryStatus.FAILED.value and "revoked" in delivery.last_error
