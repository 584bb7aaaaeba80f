"""The reconciler against real Redis, a real database and store: it re-enqueues open jobs that no
message names, leaves alone those whose message waits in a queue or is held by a worker, closes
finished batches that were never closed, and removes objects no done job refers to."""

import time
from datetime import timedelta

import pytest
import redis
from sqlalchemy import update

from pipeline.corpus import parse_corpus
from pipeline.db import jobs as db
from pipeline.db.models import Batch, Job, JobStatus, utcnow
from pipeline.errors import StorageError
from pipeline.live import redis_client_url
from pipeline.messages import job_ids_in_messages
from pipeline.reconcile import reconcile
from pipeline.render import render_jobs
from pipeline.renderer import Renderer
from pipeline.routing import all_queues
from pipeline.storage import make_store
from pipeline.submit import BatchOptions, create_batch
from tests.waiting import eventually
from tests.workers import app_with_worker
from worker.app import make_app
from worker.beat import beat_schedule
from worker.boot import boot
from worker.maintenance import RECONCILE_LOCK, RECONCILE_TASK, RECONCILE_TURN, reconcile_pass
from worker.tasks import RENDER_TASK

LINES = "".join(f"Line {n} of the corpus.\n" for n in range(1, 7))


def new_batch(settings, sessions) -> tuple[str, list[str]]:
    with sessions() as s:
        batch = create_batch(
            s, settings, parse_corpus(LINES.encode(), source="c", max_line_chars=500), BatchOptions(), source="c"
        )
        s.commit()
        db.mark_batch_queued(s, batch.id)
        s.commit()
        return batch.id, [j for group in db.job_ids_by_queue(s, batch.id).values() for j in group]


def age(sessions, job_ids, minutes=30):
    with sessions() as s:
        s.execute(update(Job).where(Job.id.in_(job_ids)).values(updated_at=utcnow() - timedelta(minutes=minutes)))
        s.commit()


def test_open_jobs_with_no_message_are_re_enqueued_and_those_with_one_are_left(settings, sessions, redis_url):
    app = make_app(settings, redis_url)
    client = redis.Redis.from_url(redis_client_url(redis_url))
    queues = all_queues(settings.bucket_seconds)
    batch_id, ids = new_batch(settings, sessions)
    lost, waiting, held, fresh = ids[:2], ids[2:3], ids[3:4], ids[4:]
    queue = queues[1]
    app.send_task(RENDER_TASK, args=[waiting], queue=queue, routing_key=queue)
    app.send_task(RENDER_TASK, args=[held], queue=queue, routing_key=queue)
    with app.connection_for_read() as conn:  # a worker takes the first message and has not acked it
        channel = conn.default_channel
        taken = channel.basic_get(queue, no_ack=False)
        assert taken is not None
    age(sessions, lost + waiting + held)
    with sessions() as s:
        db.claim(s, held)  # its worker holds it: running
    age(sessions, held)

    sent = []
    done = reconcile(
        sessions,
        make_store(settings),
        client,
        queues=queues,
        jobs_per_task=8,
        send=lambda q, group: (
            sent.append((q, group)),
            app.send_task(RENDER_TASK, args=[group], queue=q, routing_key=q),
        ),
    )
    assert done.requeued == 2 and [sorted(g) for _, g in sent] == [sorted(lost)]
    assert set(ids[:4]) <= job_ids_in_messages(client, queues)
    assert not set(fresh) & job_ids_in_messages(client, queues)  # too young to judge
    with sessions() as s:
        assert {s.get(Job, j).status for j in lost} == {JobStatus.QUEUED}
    again = reconcile(
        sessions,
        make_store(settings),
        client,
        queues=queues,
        jobs_per_task=8,
        send=lambda q, group: sent.append((q, group)),
    )
    assert again.requeued == 0 and len(sent) == 1  # a re-enqueued job is not sent twice


def test_a_finished_batch_never_closed_is_closed_and_orphans_are_removed(settings, sessions, redis_url, piper_engine):
    client = redis.Redis.from_url(redis_client_url(redis_url))
    store = make_store(settings)
    batch_id, ids = new_batch(settings, sessions)
    r = Renderer(engine=piper_engine, store=store, sessions=sessions)
    blocked = settings.object_dir / f"batches/{batch_id}/manifest.jsonl"
    blocked.mkdir(parents=True)  # the closing worker fails to write the manifest, then dies
    with pytest.raises(StorageError):
        render_jobs(r, ids)
    blocked.rmdir()
    with sessions() as s:
        # A job that failed after its audio was stored.
        s.execute(update(Job).where(Job.id == ids[0]).values(status=JobStatus.FAILED, object_key=None))
        s.commit()
    gone = "batches/0123456789abcdef0123456789abcdef/audio/line-000001.wav"
    store.put(gone, b"RIFF", "audio/wav")  # a batch deleted while its worker wrote
    kept_audio = set(store.list(f"batches/{batch_id}/audio/"))

    def run(grace):
        return reconcile(
            sessions,
            store,
            client,
            queues=all_queues(settings.bucket_seconds),
            jobs_per_task=8,
            send=lambda q, g: None,
            object_grace=grace,
        )

    first = run(timedelta(hours=1))
    assert (first.closed, first.removed) == (1, 0)  # everything is younger than the grace period
    with sessions() as s:
        batch = s.get(Batch, batch_id)
        done_keys = {s.get(Job, j).object_key for j in ids[1:]}
    assert batch.finished_at is not None and len(store.get(batch.manifest_key).splitlines()) == 6
    time.sleep(0.01)
    second = run(timedelta(0))
    assert (second.closed, second.removed) == (0, 2)
    assert set(store.list(f"batches/{batch_id}/audio/")) == done_keys and len(kept_audio) == 6
    assert store.list("batches/0123456789abcdef0123456789abcdef/") == []
    assert store.exists(batch.manifest_key)


def test_the_reconcile_task_runs_in_a_worker_and_puts_a_lost_message_back(settings, sessions, redis_url, piper_engine):
    batch_id, ids = new_batch(settings, sessions)
    age(sessions, ids)  # queued long ago; the messages were lost with Redis
    with app_with_worker(settings, redis_url, piper_engine) as app:
        app.send_task(RECONCILE_TASK)

        def closed():
            with sessions() as s:
                return s.get(Batch, batch_id).finished_at is not None

        eventually(
            closed, 60, f"the reconciler to put the lost messages back and batch {batch_id} to close", interval=0.2
        )
    with sessions() as s:
        statuses = {s.get(Job, j).status for j in ids}
        assert statuses == {JobStatus.DONE} and s.get(Batch, batch_id).manifest_key


def test_beat_leaves_the_reconciler_to_the_workers(settings):
    schedule = beat_schedule(settings.with_overrides(reconcile_interval=45))
    assert set(schedule) == {"nightly-report", "expire-batches"}
    assert RECONCILE_TASK not in {entry["task"] for entry in schedule.values()}


def test_one_pass_per_interval_across_workers_and_the_task_runs_one_at_once(
    settings, sessions, redis_url, piper_engine
):
    settings = settings.with_overrides(reconcile_interval=600)
    first, second = make_app(settings, redis_url), make_app(settings, redis_url)  # two workers' apps
    for app in (first, second):
        boot(app, engine=piper_engine)
    batch_id, ids = new_batch(settings, sessions)
    age(sessions, ids)  # queued long ago; the messages were lost with Redis
    client = redis.Redis.from_url(redis_client_url(redis_url))

    done = reconcile_pass(first, take_turn=True)
    assert done is not None and done.requeued == len(ids)
    assert 0 < client.ttl(RECONCILE_TURN) <= 600
    assert reconcile_pass(second, take_turn=True) is None  # this interval's pass has run
    assert reconcile_pass(first, take_turn=True) is None
    asked = reconcile_pass(second, take_turn=False)  # synth.reconcile, sent by hand
    assert asked is not None and asked.requeued == 0  # every job has its message again
    with client.lock(RECONCILE_LOCK, timeout=10):  # a pass is running elsewhere
        client.delete(RECONCILE_TURN)
        assert reconcile_pass(second, take_turn=True) is None
        assert reconcile_pass(second, take_turn=False) is None
