"""A full object folder is an outage, on a real tiny filesystem (a 2 MiB tmpfs) with a real worker:
jobs wait without spending their retries, the worker's heartbeat and /readyz say "storage full",
and once space is freed every job ends done once and the batch closes at its last job."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from celery.signals import task_retry
from sqlalchemy import select

from pipeline.corpus import parse_corpus
from pipeline.db.models import Batch, Job, JobStatus
from pipeline.errors import StorageFullError
from pipeline.live import redis_client_url
from pipeline.reports import fleet
from pipeline.routing import all_queues
from pipeline.storage.local import LocalStore
from pipeline.submit import BatchOptions, create_batch
from tests.api.conftest import serve
from tests.conftest import IN_CI
from tests.waiting import eventually
from tests.workers import app_with_worker
from worker.enqueue import enqueue_batch
from worker.metrics import install

LINES = "".join(f"Line {n} waits for space on the disk.\n" for n in range(1, 9))


@pytest.fixture
def tiny_disk(tmp_path) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted for the test (root only: CI runs as root)."""
    where = tmp_path / "objects"
    where.mkdir()
    why = "mounting a tmpfs needs root" if os.geteuid() != 0 else None
    if why is None:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)], capture_output=True)
        why = f"mount -t tmpfs refused: {done.stderr.decode().strip()}" if done.returncode else None
    if why:
        if IN_CI:
            pytest.fail(why)
        pytest.skip(why)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    """Write a file until the disk has no space left; removing it frees the disk."""
    ballast = disk / "ballast"
    with open(ballast, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
    return ballast


class Retries:
    """The render task's retries as Celery signals them: (retries so far, reason)."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, str]] = []

    def __call__(self, sender=None, request=None, reason=None, **_) -> None:
        self.seen.append((request.retries, str(reason)))


def test_a_full_disk_is_checked_as_full_not_as_writable(tiny_disk):
    store = LocalStore(tiny_disk)
    store.check()
    ballast = fill(tiny_disk)
    with pytest.raises(StorageFullError, match="No space left on device") as caught:
        store.check()
    assert caught.value.state == "storage full"
    with pytest.raises(StorageFullError, match=f"cannot write {tiny_disk}/a/b.wav .*No space left"):
        store.put("a/b.wav", b"x" * 8192, "audio/wav")
    ballast.unlink()
    store.check()


def test_jobs_wait_while_the_object_folder_is_full_and_all_finish_once_space_is_freed(
    tiny_disk, settings, sessions, redis_url, piper_engine
):
    # One retry of budget, a second of backoff: a full disk outlasts the budget at once.
    settings = settings.with_overrides(
        storage_dir=tiny_disk, max_retries=1, retry_backoff_max=1, worker_name="full-disk-worker"
    )
    retries = Retries()
    task_retry.connect(retries, weak=False)
    client = redis.Redis.from_url(redis_client_url(redis_url), decode_responses=True)
    try:
        with app_with_worker(settings, redis_url, piper_engine, all_queues(settings.bucket_seconds)) as app:
            installed = install(app, redis_url, interval=0.2)
            ballast = fill(tiny_disk)
            with sessions() as s:
                batch = create_batch(
                    s,
                    settings,
                    parse_corpus(LINES.encode(), source="c", max_line_chars=500),
                    BatchOptions(),
                    source="c",
                )
                s.commit()
            enqueue_batch(app, sessions, batch.id, settings.jobs_per_task)

            eventually(
                lambda: any(
                    n > settings.max_retries and "No space left on device" in reason for n, reason in retries.seen
                ),
                60,
                "a message retried past its budget",
            )
            heartbeat = {w["name"]: w for w in fleet.workers(client)}["full-disk-worker"]
            assert heartbeat["storage"] == "storage full"
            with serve(settings, redis_url) as server:
                ready = httpx.get(f"{server.url}/readyz", timeout=30)
            assert ready.status_code == 503
            assert ready.json()["checks"]["storage"].startswith("storage full: ")
            with sessions() as s:
                jobs = s.scalars(select(Job).where(Job.batch_id == batch.id)).all()
            assert not [j for j in jobs if j.status == JobStatus.FAILED]
            assert any("No space left on device" in (j.error or "") for j in jobs)

            ballast.unlink()

            def closed():
                with sessions() as s:
                    return s.get(Batch, batch.id).finished_at is not None

            eventually(closed, 120, "the batch to close at its last job")
            eventually(
                lambda: {w["name"]: w for w in fleet.workers(client)}["full-disk-worker"]["storage"] == "ok",
                10,
                "the heartbeat to say the storage is fine again",
            )
            installed.uninstall()
    finally:
        task_retry.disconnect(retries)
    with sessions() as s:
        jobs = s.scalars(select(Job).where(Job.batch_id == batch.id)).all()
    assert {j.status for j in jobs} == {JobStatus.DONE}
    objects = LocalStore(tiny_disk).list(f"batches/{batch.id}/audio/")
    assert sorted(objects) == sorted(j.object_key for j in jobs) and len(objects) == len(jobs)
