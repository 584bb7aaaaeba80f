"""A worker killed mid-job (kill -9) loses nothing: after a new worker starts, every job of the batch
ends done exactly once, with one object each."""

import os
import signal

import pytest
import redis
from sqlalchemy import select

from pipeline.db.models import Job, JobStatus
from pipeline.live import redis_client_url
from pipeline.settings import Settings
from pipeline.storage import make_store
from tests.cli_helpers import REPO, start_synth, synth, synth_env
from tests.waiting import eventually
from worker.app import make_app

SENTENCE = "The committee reviewed every proposal carefully before the final vote was taken. "


def jobs(sessions, batch_id):
    with sessions() as s:
        return s.scalars(select(Job).where(Job.batch_id == batch_id).order_by(Job.line_no)).all()


def submit_eight_long_lines(tmp_path, env) -> str:
    corpus = tmp_path / "corpus.txt"
    # Each line its own text: a line rendered before is copied, not rendered (pipeline/reuse.py),
    # and these tests need every job to take its time on the engine.
    corpus.write_text("\n".join(f"Part {n}. " + SENTENCE * 6 for n in range(8)) + "\n")
    submitted = synth("submit", str(corpus), "--no-wait", env=env, timeout=60)
    assert submitted.returncode == 0, submitted.stderr.decode()
    return submitted.stdout.decode().strip()


def wait_mid_batch(sessions, batch_id) -> None:
    def mid_job():
        states = [j.status for j in jobs(sessions, batch_id)]
        return JobStatus.DONE in states and JobStatus.RUNNING in states

    eventually(mid_job, 120, "the first worker to be mid-batch", interval=0.1)


def finish_with_a_second_worker(tmp_path, env, sessions, batch_id) -> None:
    second = start_synth("worker", env=env, log=tmp_path / "worker2.log")
    try:
        eventually(
            lambda: all(j.status.terminal for j in jobs(sessions, batch_id)), 180, "the batch to finish", interval=0.1
        )
    finally:
        second.terminate()
        second.wait(timeout=30)


def assert_each_job_done_once(tmp_path, sessions, batch_id) -> list[Job]:
    final = jobs(sessions, batch_id)
    assert [j.status for j in final] == [JobStatus.DONE] * 8
    store = make_store(Settings(data_dir=tmp_path / "data"))
    objects = store.list(f"batches/{batch_id}/audio/")
    assert sorted(objects) == sorted(j.object_key for j in final) and len(set(objects)) == 8
    return final


@pytest.mark.slow
def test_kill_9_mid_job_then_a_new_worker_finishes_each_job_once(tmp_path, redis_url, database_url, sessions):
    env = synth_env(
        SYNTH_DATA_DIR=str(tmp_path / "data"),
        SYNTH_REDIS_URL=redis_url,
        SYNTH_DATABASE_URL=database_url,
        SYNTH_VISIBILITY_TIMEOUT="4",
        SYNTH_JOBS_PER_TASK="2",
        SYNTH_ENGINE_THREADS="1",
        SYNTH_WORKER_CONCURRENCY="1",
    )
    batch_id = submit_eight_long_lines(tmp_path, env)

    first = start_synth("worker", env=env, log=tmp_path / "worker1.log")
    try:
        wait_mid_batch(sessions, batch_id)
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    before = {j.id: j.status for j in jobs(sessions, batch_id)}
    assert JobStatus.RUNNING in before.values()
    # The worst case of a kill: the worker died inside its sweep for expired messages, holding the
    # sweep's Redis lock (kombu's ``unacked_mutex``) for as long as the app lets it live.
    expire = make_app(Settings(visibility_timeout=4), redis_url).conf.broker_transport_options["unacked_mutex_expire"]
    redis.Redis.from_url(redis_client_url(redis_url)).lock("unacked_mutex", timeout=expire).acquire(blocking=False)

    finish_with_a_second_worker(tmp_path, env, sessions, batch_id)

    final = assert_each_job_done_once(tmp_path, sessions, batch_id)
    redone = [j for j in final if before[j.id] == JobStatus.RUNNING]
    assert redone and all(j.attempts == 2 for j in redone)  # the interrupted ones ran again
    assert all(j.attempts == 1 for j in final if before[j.id] == JobStatus.DONE)  # the finished ones did not


def engine_process(worker_pid: int) -> int | None:
    """The worker's engine process: its child whose command line is multiprocessing's spawn."""
    for task in os.listdir(f"/proc/{worker_pid}/task"):
        for pid in open(f"/proc/{worker_pid}/task/{task}/children").read().split():
            if b"spawn_main" in open(f"/proc/{pid}/cmdline", "rb").read():
                return int(pid)
    return None


@pytest.mark.slow
def test_an_engine_process_killed_mid_job_stops_its_worker_and_every_job_ends_done_once(
    tmp_path, redis_url, database_url, sessions
):
    env = synth_env(
        SYNTH_DATA_DIR=str(tmp_path / "data"),
        SYNTH_REDIS_URL=redis_url,
        SYNTH_DATABASE_URL=database_url,
        SYNTH_ENGINE_PROCESS="separate",
        SYNTH_JOBS_PER_TASK="2",
        SYNTH_ENGINE_THREADS="1",
        SYNTH_WORKER_CONCURRENCY="1",
    )
    batch_id = submit_eight_long_lines(tmp_path, env)

    first = start_synth("worker", env=env, log=tmp_path / "worker1.log")
    try:
        wait_mid_batch(sessions, batch_id)
        engine_pid = engine_process(first.pid)
        assert engine_pid is not None, "the worker runs its engine in a process of its own"
        os.kill(engine_pid, signal.SIGKILL)
        # The worker notices, shuts down and says so with its exit code; no job is left running.
        assert first.wait(timeout=60) != 0
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    log = (tmp_path / "worker1.log").read_text()
    assert "the engine process exited" in log

    finish_with_a_second_worker(tmp_path, env, sessions, batch_id)

    assert_each_job_done_once(tmp_path, sessions, batch_id)


# Celery's command line imports click_didyoumean; a stand-in of that name (first on the path) makes
# the worker's start fail the way a broken install or Celery's own start-up error would.
BROKEN_INSTALL = 'raise ImportError("planted: click_didyoumean is missing")\n'
START_FAILS = (
    "import click\n\n\nclass DYMGroup(click.Group):\n"
    "    def main(self, *args, **kwargs):\n"
    '        raise RuntimeError("planted: Celery failed to start")\n'
)


@pytest.mark.parametrize(
    "plant, said", [(BROKEN_INSTALL, "click_didyoumean is missing"), (START_FAILS, "failed to start")]
)
def test_a_worker_whose_celery_cannot_start_exits_with_its_engine_process(tmp_path, redis_url, plant, said):
    """Its engine process ignores SIGTERM (the worker decides when it stops): a worker that did not
    close it waited at exit forever, its heartbeat saying it was alive."""
    plants = tmp_path / "plants" / "click_didyoumean"
    plants.mkdir(parents=True)
    (plants / "__init__.py").write_text(plant)
    env = synth_env(
        SYNTH_DATA_DIR=str(tmp_path / "data"),
        SYNTH_REDIS_URL=redis_url,
        SYNTH_ENGINE_PROCESS="separate",
        PYTHONPATH=os.pathsep.join([str(tmp_path / "plants"), str(REPO)]),
    )
    worker = start_synth("worker", env=env, log=tmp_path / "worker.log")
    try:
        assert worker.wait(timeout=120) != 0
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    assert said in (tmp_path / "worker.log").read_text()
    eventually(lambda: not group_alive(worker.pid), 30, "the engine process to go with its worker")


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
