"""A worker outlives its broker: with Redis (append-only file) down for longer than Celery's old
retry budget, `synth worker` keeps waiting, engine loaded, and renders the next batch once Redis is
back, with nobody restarting it."""

import time

import pytest
import redis
from sqlalchemy import select

from synth_testkit.faults import RedisProcess
from pipeline.db.models import Job, JobStatus
from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.reports.fleet import WORKER_PREFIX
from synth_testkit.ports import free_port
from tests.cli_helpers import start_synth, synth, synth_env
from tests.waiting import eventually


@pytest.mark.slow
def test_a_worker_waits_out_a_redis_outage_and_renders_the_next_batch(tmp_path):
    server = RedisProcess(tmp_path / "redis", free_port())
    database_url = f"sqlite:///{tmp_path / 'synth.db'}"
    env = synth_env(
        SYNTH_DATA_DIR=str(tmp_path / "data"),
        SYNTH_REDIS_URL=server.url,
        SYNTH_DATABASE_URL=database_url,
        SYNTH_ENGINE_THREADS="1",
        SYNTH_WORKER_CONCURRENCY="1",
    )
    assert synth("db", "upgrade", env=env, timeout=60).returncode == 0
    with server:
        client = redis.Redis(port=server.port)
        worker = start_synth("worker", env=env, log=tmp_path / "worker.log")
        try:
            eventually(
                lambda: any(client.scan_iter(match=WORKER_PREFIX + "*")), 120, "the worker to start", interval=0.2
            )
            server.kill()
            time.sleep(20)  # Celery gave up after 3 tries, about 12 s
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
            server.start()  # from its append-only file

            corpus = tmp_path / "corpus.txt"
            corpus.write_text("Redis came back.\nThe worker never left.\n")
            submitted = synth("submit", str(corpus), "--no-wait", env=env, timeout=60)
            assert submitted.returncode == 0, submitted.stderr.decode()
            batch_id = submitted.stdout.decode().strip()
            sessions = make_sessionmaker(make_engine(database_url))

            def done():
                with sessions() as s:
                    return s.scalars(select(Job.status).where(Job.batch_id == batch_id)).all() == [JobStatus.DONE] * 2

            eventually(done, 120, "the batch to be rendered after the outage", interval=0.2)
        finally:
            worker.terminate()
            worker.wait(timeout=30)
    assert worker.returncode == 0  # a requested shutdown is not an error
