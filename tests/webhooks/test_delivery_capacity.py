"""Deliveries have capacity of their own: a receiver that accepts connections and never answers
holds no render slot and no other receiver's deliveries. `synth worker` subprocesses with Piper
and one render slot, real Redis, both databases, a black-hole receiver and a real one on loopback
ports."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from sqlalchemy import select

from synth_testkit.webhook_receiver import Receiver
from pipeline.api_keys import create_key
from pipeline.db.models import Job, JobStatus
from pipeline.submit import BatchOptions, Item, create_item_batch
from pipeline.webhooks import secrets
from tests.cli_helpers import start_synth, synth_env
from tests.waiting import eventually
from worker.app import make_producer
from worker.enqueue import enqueue_batch
from worker.webhooks import HostGate

# Each attempt to the black hole holds its connection this long; the old worker spent one render
# slot on each, so a job queued behind 8 of them waited well over a minute.
TIMEOUT_S = 10
BOUND_S = 30  # "not blocked behind the dead receiver", far below that


class BlackHole:
    """Accepts every connection and never answers: each request waits out the sender's timeout."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/hooks"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def __enter__(self) -> BlackHole:
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def env(tmp_path, redis_url, database_url):
    return synth_env(
        SYNTH_DATA_DIR=str(tmp_path / "data"),
        SYNTH_REDIS_URL=redis_url,
        SYNTH_DATABASE_URL=database_url,
        SYNTH_JOBS_PER_TASK="1",
        SYNTH_ENGINE_THREADS="1",
        SYNTH_WORKER_CONCURRENCY="1",
        SYNTH_WEBHOOK_ALLOW_HOSTS='["127.0.0.0/8"]',
        SYNTH_WEBHOOK_TIMEOUT=str(TIMEOUT_S),
        SYNTH_WEBHOOK_CONCURRENCY="2",
        SYNTH_WEBHOOK_HOST_CONCURRENCY="1",
    )


@pytest.fixture
def worker(env, tmp_path):
    process = start_synth("worker", env=env, log=tmp_path / "worker.log")
    yield process
    process.terminate()
    try:
        process.wait(timeout=30)
    except Exception:  # noqa: BLE001 - a worker that will not stop is killed
        process.kill()


@pytest.fixture
def tenants(sessions):
    """Two keys and their signing secrets."""
    made = {}
    with sessions() as s:
        for name in ("noisy", "quiet"):
            key = create_key(s, name=name).key
            made[name] = (key.id, secrets.get_or_create(s, key.id).secret)
        s.commit()
    return made


@pytest.fixture
def send(settings, sessions, redis_url):
    """send(key id, texts, webhook_url) -> batch id: written and enqueued as the API does."""
    app = make_producer(settings, redis_url)

    def batch(key_id: str, texts: list[str], url: str | None = None) -> str:
        with sessions() as s:
            made = create_item_batch(
                s,
                settings,
                [Item(text=t) for t in texts],
                BatchOptions(),
                source="api",
                owner_key_id=key_id,
                webhook_url=url,
                webhook_events=["job.finished"] if url else None,
            )
            s.commit()
        enqueue_batch(app, sessions, made.id, jobs_per_task=1)
        return made.id

    return batch


def done(sessions, batch_id: str) -> bool:
    with sessions() as s:
        return set(s.scalars(select(Job.status).where(Job.batch_id == batch_id))) == {JobStatus.DONE}


def test_a_receiver_that_never_answers_does_not_hold_back_another_tenants_job(worker, tenants, send, sessions):
    with BlackHole() as hole:
        send(tenants["noisy"][0], [f"Noisy line {i}." for i in range(8)], hole.url)
        eventually(lambda: hole.held, 120, "the first delivery to the dead receiver to hang")
        started = time.monotonic()
        quiet = send(tenants["quiet"][0], ["One quiet line."])
        eventually(lambda: done(sessions, quiet), BOUND_S, "the quiet tenant's job, beside the hanging deliveries")
        waited = time.monotonic() - started
    assert waited < BOUND_S


def test_a_dead_receiver_does_not_stop_deliveries_to_a_healthy_one(worker, tenants, send, sessions):
    with BlackHole() as hole, Receiver(secrets=[tenants["quiet"][1]]) as healthy:
        send(tenants["noisy"][0], [f"Noisy line {i}." for i in range(6)], hole.url)
        eventually(lambda: hole.held, 120, "the first delivery to the dead receiver to hang")
        send(tenants["quiet"][0], ["One quiet line."], healthy.url)
        (got,) = healthy.wait_for(1, timeout=BOUND_S)
        # Its one thread per receiver is all the dead one holds: the other deliveries wait in line.
        assert len(hole.held) == 1
    assert got.valid_for == [tenants["quiet"][1]]


def test_a_retry_waits_out_its_countdown_on_the_webhook_consumer_and_is_delivered(worker, tenants, send):
    with Receiver(secrets=[tenants["quiet"][1]], fail_first=1) as flaky:
        send(tenants["quiet"][0], ["One quiet line."], flaky.url)
        (got,) = flaky.wait_for(1, timeout=BOUND_S)  # the retry's countdown: at most 5 s
    assert [r.answered for r in flaky.requests] == [500, 200] and got.valid_for == [tenants["quiet"][1]]


def test_the_gate_lines_up_a_receivers_deliveries_past_its_limit_and_hands_on_the_slot():
    gate = HostGate(limit=1)
    dead, live = ("dead.example", 443), ("live.example", 443)
    assert gate.enter(dead, "first")
    assert not gate.enter(dead, "second") and not gate.enter(dead, "third")
    assert not gate.enter(dead)  # no item: told no, not lined up
    assert gate.enter(live, "other")  # another receiver is not held back
    assert gate.leave(dead) == "second" and gate.leave(dead) == "third"
    assert gate.leave(dead) is None and gate.enter(dead, "again")
    assert gate.enter(None, "gone") and gate.leave(None) is None
