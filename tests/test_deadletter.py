"""A message a worker cannot act on goes to the dead-letter list; the worker keeps consuming.

Each shape below is what a misconfigured producer, or another application sharing the Redis
database, could put on a batch queue. Every one of them used to end the worker that read it (or
was dropped without a trace), and each replacement too, since it stayed first on its queue."""

from __future__ import annotations

import base64
import json
import pickle
import uuid
from collections import Counter

import pytest
import redis
from sqlalchemy import select

from pipeline import deadletter
from pipeline.db.models import Job, JobStatus
from pipeline.live import redis_client_url
from pipeline.messages import RENDER_TASK
from pipeline.routing import REALTIME_QUEUE
from pipeline.settings import Settings
from tests.cli_helpers import start_synth, synth, synth_env
from tests.waiting import eventually
from worker.app import make_producer

QUEUE = "batch.le10s"


def real_envelope(redis_url: str, queue: str) -> dict:
    """A render message as a producer writes it, read back off the queue: the template of the shapes."""
    make_producer(Settings(), redis_url).send_task(RENDER_TASK, args=[["0" * 32]], queue=queue, routing_key=queue)
    client = redis.Redis.from_url(redis_client_url(redis_url))
    return json.loads(client.rpop(queue))


def with_body(envelope: dict, body: bytes, **changes) -> bytes:
    changed = json.loads(json.dumps(envelope))
    changed["body"] = base64.b64encode(body).decode()
    for key, value in changes.items():
        changed[key] = value
    return json.dumps(changed).encode()


def render_args(*args) -> bytes:
    return json.dumps([list(args), {}, {"callbacks": None, "errbacks": None, "chain": None, "chord": None}]).encode()


def malformed(envelope: dict) -> dict[str, tuple[bytes, str]]:
    """name -> (the bytes pushed, a word of the reason the dead-letter entry must give)."""
    no_properties = {k: v for k, v in envelope.items() if k != "properties"}
    other_task = dict(envelope, headers={**envelope["headers"], "task": "billing.charge"})
    return {
        "bytes that are not JSON": (b"\xff\xfe\x00 not json at all", "not JSON"),
        "text that is not JSON": (b"hello, queue", "not JSON"),
        "a JSON list": (b"[1, 2, 3]", "JSON list"),
        "a JSON string": (b'"hello"', "JSON str"),
        "an envelope without properties": (json.dumps(no_properties).encode(), "delivery_tag"),
        "a delivery tag that is a list": (
            json.dumps(dict(envelope, properties={**envelope["properties"], "delivery_tag": [1]})).encode(),
            "delivery_tag",
        ),
        "no routing key to restore it to": (
            json.dumps(dict(envelope, properties={**envelope["properties"], "delivery_info": {}})).encode(),
            "routing_key",
        ),
        "a body that is not base64": (json.dumps(dict(envelope, body="@@not base64@@")).encode(), "base64"),
        "a body that is not JSON": (with_body(envelope, b"{not json"), "does not decode"),
        "a content encoding that is a number": (
            with_body(envelope, render_args(["x"]), **{"content-encoding": 5}),
            "does not decode",
        ),
        "a body that is not [args, kwargs, embed]": (with_body(envelope, b'{"job_ids": ["a"]}'), "[args, kwargs"),
        "a task no worker knows": (with_body(other_task, render_args(["x"])), "unknown task"),
        "a pickled body": (
            with_body(envelope, pickle.dumps([[["x"]], {}, {}]), **{"content-type": "application/x-python-serialize"}),
            "not accepted",
        ),
        "too many arguments": (with_body(envelope, render_args(["a"], ["b"])), "cannot take"),
        "job ids that are not strings": (with_body(envelope, render_args([1, 2])), "not job ids"),
        "job ids as one string": (with_body(envelope, render_args("0123abcd")), "not a non-empty list"),
        "job ids that name no job": (
            with_body(envelope, render_args([uuid.uuid4().hex, uuid.uuid4().hex])),
            "names no job",
        ),
    }


@pytest.mark.slow
def test_malformed_messages_are_dead_lettered_and_the_worker_renders_the_batch_behind_them(
    tmp_path, redis_url, database_url, sessions
):
    env = synth_env(
        SYNTH_DATA_DIR=str(tmp_path / "data"),
        SYNTH_REDIS_URL=redis_url,
        SYNTH_DATABASE_URL=database_url,
        SYNTH_ENGINE_THREADS="1",
        SYNTH_JOBS_PER_TASK="2",
        SYNTH_WORKER_CONCURRENCY="1",
    )  # one task at a time: dead-lettered in order
    client = redis.Redis.from_url(redis_client_url(redis_url))
    shapes = malformed(real_envelope(redis_url, QUEUE))
    client.lpush(QUEUE, *[raw for raw, _ in shapes.values()])  # taken from the right: in this order
    # The realtime queue has a consumer of its own. (It renders a message whose jobs are gone as
    # skipped: a realtime client is waiting, and no second query is made for it.)
    realtime = malformed(real_envelope(redis_url, REALTIME_QUEUE))
    del realtime["job ids that name no job"]
    client.lpush(REALTIME_QUEUE, *[raw for raw, _ in realtime.values()])
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("Good morning.\nThe train is late.\nSee you soon.\n")
    submitted = synth("submit", str(corpus), "--no-wait", env=env, timeout=60)
    assert submitted.returncode == 0, submitted.stderr.decode()
    batch_id = submitted.stdout.decode().strip()

    log = tmp_path / "worker.log"
    worker = start_synth("worker", env=env, log=log)
    try:

        def batch_done() -> bool:
            assert worker.poll() is None, f"the worker exited with {worker.returncode}:\n{log.read_text()}"
            with sessions() as s:
                states = s.scalars(select(Job.status).where(Job.batch_id == batch_id)).all()
            return states == [JobStatus.DONE] * 3

        eventually(batch_done, 180, "the batch behind the malformed messages to be done", interval=0.2)
        eventually(
            lambda: deadletter.count(client) == len(shapes) + len(realtime), 30, "every malformed message dead-lettered"
        )
        assert worker.poll() is None
    finally:
        worker.terminate()
        worker.wait(timeout=60)

    every = [json.loads(e) for e in reversed(client.lrange(deadletter.DEADLETTER, 0, -1))]
    entries = [e for e in every if e["queue"] == QUEUE]
    realtime_reasons = [e["reason"] for e in every if e["queue"] == REALTIME_QUEUE]
    assert len(entries) == len(shapes) and len(realtime_reasons) == len(realtime)
    for word, n in Counter(reason for _, reason in realtime.values()).items():
        assert sum(word in r for r in realtime_reasons) == n, (word, realtime_reasons)
    for (name, (raw, reason)), entry in zip(shapes.items(), entries, strict=True):
        assert reason in entry["reason"], (name, entry)
    kept = entries[0]  # not UTF-8: kept byte for byte
    assert base64.b64decode(kept["message_b64"]) == shapes["bytes that are not JSON"][0]
    assert entries[1]["message"] == "hello, queue" and entries[2]["message"] == "[1, 2, 3]"
    assert log.read_text().count("dead-lettered a message from batch.le10s") == len(shapes)  # once each
    assert log.read_text().count("dead-lettered a message from realtime") == len(realtime)

    status = synth("status", batch_id, env=env)
    assert status.returncode == 0, status.stderr.decode()
    assert f"{len(every)} messages in synth.deadletter" in status.stderr.decode()
    as_json = json.loads(synth("status", batch_id, "--json", env=env).stdout)
    assert as_json["dead_letters"] == len(every)
