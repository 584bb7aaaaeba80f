"""`synth submit` of a large corpus interrupted while it enqueues, and two submits at once: the
database and the queues in Redis always agree, and the batch id is always printed."""

from __future__ import annotations

import base64
import json
import re
import signal
from pathlib import Path

import pytest
import redis
from sqlalchemy import func, select

from pipeline.db.models import Batch, Job
from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.live import redis_client_url
from pipeline.reports.fleet import PRIORITY_SUFFIXES
from pipeline.routing import all_queues
from pipeline.settings import Settings
from tests.cli_helpers import start_synth, synth_env
from tests.waiting import eventually

LINES = 50_000


@pytest.fixture
def env(tmp_path, database_url, redis_url):
    # One job per message: 50,000 messages take long enough to interrupt on any machine.
    return synth_env(
        SYNTH_DATA_DIR=str(tmp_path / "d"),
        SYNTH_REDIS_URL=redis_url,
        SYNTH_DATABASE_URL=database_url,
        SYNTH_JOBS_PER_TASK="1",
    )


@pytest.fixture
def corpus(tmp_path) -> Path:
    path = tmp_path / "big.txt"
    path.write_text("".join(f"Line {n} of a corpus interrupted while it is enqueued.\n" for n in range(LINES)))
    return path


def queued_job_ids(redis_url: str) -> list[str]:
    """Every job id named by a render message waiting in Redis."""
    client = redis.Redis.from_url(redis_client_url(redis_url))
    ids = []
    for queue in all_queues(Settings().bucket_seconds):
        for suffix in PRIORITY_SUFFIXES:
            for raw in client.lrange(queue + suffix, 0, -1):
                args, _kwargs, _embed = json.loads(base64.b64decode(json.loads(raw)["body"]))
                ids.extend(args[0])
    return ids


def jobs_in_database(database_url: str) -> dict[str, set[str]]:
    engine = make_engine(database_url)
    try:
        with make_sessionmaker(engine)() as s:
            out: dict[str, set[str]] = {}
            for batch_id, job_id in s.execute(select(Job.batch_id, Job.id)):
                out.setdefault(batch_id, set()).add(job_id)
            return out
    finally:
        engine.dispose()


def interrupted_submit(env, corpus: Path, log: Path, presses: int) -> str:
    """Run `synth submit`, press Ctrl-C ``presses`` times once it enqueues; returns its output."""
    # A child inherits an ignored SIGINT; a user's shell starts synth with the default, as this does.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = start_synth("submit", str(corpus), "--no-wait", env=env, log=log)
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        eventually(lambda: "enqueuing 50,000 jobs" in log.read_text(), 180, "the enqueue to start")
        process.send_signal(signal.SIGINT)
        if presses == 2:
            eventually(lambda: "Ctrl-C again to withdraw" in log.read_text(), 60, "the first Ctrl-C to be told")
            process.send_signal(signal.SIGINT)
        assert process.wait(timeout=180) == 130, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
    return log.read_text()


@pytest.mark.slow
def test_ctrl_c_once_while_enqueueing_finishes_the_enqueue_and_says_how_to_stop_the_batch(
    tmp_path, env, corpus, database_url, redis_url
):
    out = interrupted_submit(env, corpus, tmp_path / "submit.log", presses=1)
    batch_id = re.search(r"batch ([0-9a-f]{32}): enqueuing", out).group(1)
    assert "finishing the enqueue of batch " + batch_id in out
    assert f"interrupted: batch {batch_id} is queued whole" in out and f"`synth cancel {batch_id}`" in out
    in_db = jobs_in_database(database_url)
    assert len(in_db[batch_id]) == LINES
    queued = queued_job_ids(redis_url)
    assert len(queued) == LINES and set(queued) == in_db[batch_id]


@pytest.mark.slow
def test_ctrl_c_twice_while_enqueueing_withdraws_the_batch(tmp_path, env, corpus, database_url, redis_url):
    out = interrupted_submit(env, corpus, tmp_path / "submit.log", presses=2)
    batch_id = re.search(r"batch ([0-9a-f]{32}): enqueuing", out).group(1)
    assert f"interrupted: batch {batch_id} withdrawn" in out
    assert jobs_in_database(database_url) == {}
    queued = queued_job_ids(redis_url)
    assert 0 < len(queued) < LINES  # sent before the withdrawal: they name no job, and are dropped


def test_two_submits_of_one_file_under_one_name_at_once_make_two_batches_with_nothing_mixed(
    tmp_path, database_url, redis_url
):
    env = synth_env(SYNTH_DATA_DIR=str(tmp_path / "d"), SYNTH_REDIS_URL=redis_url, SYNTH_DATABASE_URL=database_url)
    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"Line {n}.\n" for n in range(500)))
    logs = [tmp_path / f"submit-{i}.log" for i in range(2)]
    processes = [start_synth("submit", str(corpus), "--name", "twice", "--no-wait", env=env, log=log) for log in logs]
    assert [p.wait(timeout=180) for p in processes] == [0, 0], [log.read_text() for log in logs]
    ids = [log.read_text().split()[-1] for log in logs]
    assert len(set(ids)) == 2
    engine = make_engine(database_url)
    with make_sessionmaker(engine)() as s:
        named = set(s.scalars(select(Batch.id).where(Batch.name == "twice")))
        per_batch = dict(s.execute(select(Job.batch_id, func.count()).group_by(Job.batch_id)).all())
        lines = {b: sorted(s.scalars(select(Job.line_no).where(Job.batch_id == b))) for b in ids}
    engine.dispose()
    assert named == set(ids) and per_batch == {ids[0]: 500, ids[1]: 500}
    assert lines[ids[0]] == lines[ids[1]] == list(range(1, 501))
    queued = queued_job_ids(redis_url)
    assert len(queued) == 1000 and set(queued) == set().union(*jobs_in_database(database_url).values())
