"""A database outage longer than the retry budget loses nothing: the messages of jobs whose outcome
cannot be recorded are kept (retried) until the database is back, then every job is done and the
batch closes with its manifest."""

import time

import pytest
from sqlalchemy import select
from sqlalchemy.engine import make_url

from synth_testkit.faults import TcpProxy
from pipeline.corpus import parse_corpus
from pipeline.db.models import Batch, Job, JobStatus
from pipeline.storage import make_store
from pipeline.submit import BatchOptions, create_batch
from tests.waiting import eventually
from tests.workers import app_with_worker
from worker.app import make_app
from worker.enqueue import enqueue_batch

LINES = "".join(f"Sentence number {n} is short.\n" for n in range(1, 7))


@pytest.mark.slow
def test_a_database_outage_past_the_retry_budget_leaves_every_job_done_and_the_batch_closed(
    settings, database_url, sessions, redis_url, piper_engine
):
    if not database_url.startswith("postgresql"):
        pytest.skip("the outage is a TCP proxy in front of PostgreSQL")
    url = make_url(database_url)
    with TcpProxy((url.host, url.port or 5432)) as proxy:
        proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        # One retry of a second or two, so the outage below outlasts the whole budget.
        worker_settings = settings.with_overrides(
            database_url=proxied, max_retries=1, retry_backoff_max=1, jobs_per_task=2
        )
        with sessions() as s:
            batch = create_batch(
                s, settings, parse_corpus(LINES.encode(), source="c", max_line_chars=500), BatchOptions(), source="c"
            )
            s.commit()
        enqueue_batch(make_app(settings, redis_url), sessions, batch.id, jobs_per_task=2)

        proxy.cut()
        with app_with_worker(worker_settings, redis_url, piper_engine):
            time.sleep(8)  # every message tries, retries once, and finds the database still gone
            proxy.restore()

            def closed():
                with sessions() as s:
                    return s.get(Batch, batch.id).finished_at is not None

            eventually(closed, 90, "the batch to close after the outage", interval=0.2)

    with sessions() as s:
        jobs = s.scalars(select(Job).where(Job.batch_id == batch.id)).all()
        manifest_key = s.get(Batch, batch.id).manifest_key
    assert [j.status for j in jobs] == [JobStatus.DONE] * 6
    store = make_store(settings)
    assert sorted(store.list(f"batches/{batch.id}/audio/")) == sorted(j.object_key for j in jobs)
    assert len(store.get(manifest_key).decode().splitlines()) == 6
