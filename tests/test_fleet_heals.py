"""The fleet heals by itself: with no `synth beat`, Redis restarted empty mid-batch (no persistence),
the workers' own reconciler puts the lost messages back and every job ends done once."""

from __future__ import annotations

import pytest
import redis

from pipeline.db.models import JobStatus
from pipeline.live import redis_client_url
from pipeline.reconcile import STALE_AFTER
from tests.cli_helpers import start_synth, synth_env
from tests.test_worker_crash import assert_each_job_done_once, jobs, submit_eight_long_lines, wait_mid_batch
from tests.waiting import eventually

INTERVAL_S = 3


@pytest.mark.slow
def test_without_beat_a_batch_whose_messages_redis_lost_ends_done_once(tmp_path, redis_url, database_url, sessions):
    env = synth_env(
        SYNTH_DATA_DIR=str(tmp_path / "data"),
        SYNTH_REDIS_URL=redis_url,
        SYNTH_DATABASE_URL=database_url,
        SYNTH_RECONCILE_INTERVAL=str(INTERVAL_S),
        SYNTH_JOBS_PER_TASK="1",
        SYNTH_ENGINE_THREADS="1",
        SYNTH_WORKER_CONCURRENCY="1",
    )
    batch_id = submit_eight_long_lines(tmp_path, env)
    log = tmp_path / "worker.log"
    worker = start_synth("worker", env=env, log=log)  # and nothing else: no beat
    try:
        wait_mid_batch(sessions, batch_id)
        redis.Redis.from_url(redis_client_url(redis_url)).flushdb()  # restarted, empty
        left = [j for j in jobs(sessions, batch_id) if j.status == JobStatus.QUEUED]
        assert left, "the batch finished before Redis lost its messages"

        def finished() -> bool:
            assert worker.poll() is None, f"the worker exited:\n{log.read_text()}"
            return all(j.status.terminal for j in jobs(sessions, batch_id))

        # A job is judged stranded once untouched for STALE_AFTER; then the next pass re-enqueues it.
        eventually(
            finished,
            STALE_AFTER.total_seconds() + 20 * INTERVAL_S + 120,
            "the workers' reconciler to re-enqueue the lost jobs and the batch to finish",
            interval=0.5,
        )
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    assert_each_job_done_once(tmp_path, sessions, batch_id)
    assert "whose message was lost" in log.read_text()
