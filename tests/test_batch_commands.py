"""`synth cancel`, `synth delete` and `synth retry` on batches made by `synth submit` (no owner), with
real Redis, databases and a real worker thread rendering with Piper."""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
from sqlalchemy import select

from pipeline.db.models import Batch, Job, JobStatus
from pipeline.routing import all_queues
from pipeline.storage import make_store
from tests.cli_helpers import synth, synth_env
from tests.waiting import eventually
from tests.workers import app_with_worker

LINES = b"The first line.\nThe second line.\nThe third line.\n"


@pytest.fixture
def env(settings, database_url, redis_url):
    return synth_env(SYNTH_DATA_DIR=str(settings.data_dir), SYNTH_REDIS_URL=redis_url, SYNTH_DATABASE_URL=database_url)


def submit(env, name: str, lines: bytes = LINES) -> str:
    result = synth("submit", "-", "--name", name, "--no-wait", env=env, input=lines, timeout=60)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode().strip()


def jobs_of(sessions, batch_id: str) -> list[Job]:
    with sessions() as s:
        return s.scalars(select(Job).where(Job.batch_id == batch_id).order_by(Job.line_no)).all()


def closed(sessions, batch_id: str) -> Batch | None:
    with sessions() as s:
        batch = s.get(Batch, batch_id)
        return batch if batch.finished_at is not None else None


@contextmanager
def worker(settings, redis_url, piper_engine):
    with app_with_worker(settings, redis_url, piper_engine, all_queues(settings.bucket_seconds)) as app:
        yield app


def test_cancel_and_delete_reach_a_submitted_batch_by_name_and_prefix(env, settings, sessions, redis_url, piper_engine):
    queued = submit(env, "to-cancel")
    cancelled = synth("cancel", "to-cancel", env=env, timeout=60)
    assert cancelled.returncode == 0, cancelled.stderr.decode()
    assert f"batch {queued}: 3 jobs cancelled" in cancelled.stderr.decode()
    assert {j.status for j in jobs_of(sessions, queued)} == {JobStatus.CANCELLED}
    assert closed(sessions, queued).cancelled_at is not None

    rendered = submit(env, "to-delete")
    with worker(settings, redis_url, piper_engine):
        eventually(lambda: closed(sessions, rendered), 120, "the batch to render")
    store = make_store(settings)
    assert len(store.list(f"batches/{rendered}/")) == 4  # three audio files and the manifest

    declined = synth("delete", rendered[:8], env=env, input=b"n\n", timeout=60)
    assert declined.returncode == 1 and "nothing deleted" in declined.stderr.decode()
    assert "Delete batch " in declined.stderr.decode() and "(to-delete): 3 jobs" in declined.stderr.decode()
    assert len(store.list(f"batches/{rendered}/")) == 4
    deleted = synth("delete", rendered[:8], env=env, input=b"y\n", timeout=60)
    assert deleted.returncode == 0, deleted.stderr.decode()
    assert "4 objects removed" in deleted.stderr.decode()
    assert store.list(f"batches/{rendered}/") == [] and jobs_of(sessions, rendered) == []
    gone = synth("status", rendered, env=env, timeout=60)
    assert gone.returncode == 2 and "no batch" in gone.stderr.decode()
    assert synth("delete", queued, "--yes", env=env, timeout=60).returncode == 0


def test_retry_runs_the_failed_jobs_again_as_the_same_jobs_and_closes_the_batch_anew(
    env, settings, sessions, redis_url, piper_engine
):
    settings = settings.with_overrides(max_retries=1, retry_backoff_max=1)
    batch_id = submit(env, "flaky")
    blocker = settings.object_dir / "batches" / batch_id / "audio"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("a file where the batch's audio folder goes: every audio write fails")
    with worker(settings, redis_url, piper_engine):
        first_close = eventually(lambda: closed(sessions, batch_id), 120, "the batch to fail").finished_at
        before = jobs_of(sessions, batch_id)
        assert {j.status for j in before} == {JobStatus.FAILED}
        for job in before:  # the reason says what failed, and where; not which other jobs failed too
            assert job.error.startswith("gave up after 1 retry: cannot write "), job.error
            assert "File exists" in job.error and str(blocker) in job.error
            assert not any(other.id in job.error for other in before if other is not job)

        nothing = synth("retry", "flaky", "--reason", "No space left", env=env, timeout=60)
        assert nothing.returncode == 1
        assert f"batch {batch_id} has no failed jobs whose reason contains 'No space left'" in nothing.stderr.decode()

        blocker.unlink()
        retried = synth("retry", "flaky", "--reason", "File exists", "--wait", env=env, timeout=180)
        assert retried.returncode == 0, retried.stderr.decode()
        assert f"batch {batch_id}: 3 failed jobs queued again" in retried.stderr.decode()

    after = jobs_of(sessions, batch_id)
    assert [(j.id, j.client_id) for j in after] == [(j.id, j.client_id) for j in before]
    assert {j.status for j in after} == {JobStatus.DONE}
    assert all(a.attempts > b.attempts for a, b in zip(after, before, strict=True))
    batch = closed(sessions, batch_id)
    assert batch is not None and batch.finished_at > first_close
    manifest = [json.loads(line) for line in make_store(settings).get(batch.manifest_key).decode().splitlines()]
    assert [m["status"] for m in manifest] == ["done"] * 3 and all(m["error"] is None for m in manifest)

    again = synth("retry", batch_id, env=env, timeout=60)
    assert again.returncode == 1 and f"batch {batch_id} has no failed jobs" in again.stderr.decode()
