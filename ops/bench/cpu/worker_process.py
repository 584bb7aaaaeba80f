"""A real `synth worker` as a child process, booted and warmed before the clock starts."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click

from ops.bench import REPO
from ops.bench.timing import stopwatch
from pipeline.settings import Settings

WORKER_BOOT_TIMEOUT_S = 120


@dataclass
class WorkerProcess:
    process: subprocess.Popen
    name: str
    log_path: Path
    boot_s: float = 0.0

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            tail = self.log_path.read_text(errors="replace").splitlines()[-5:]
            raise click.ClickException(f"the worker exited ({self.process.returncode}): {' | '.join(tail)}")


@contextlib.contextmanager
def running_worker(app, settings: Settings, workdir: Path) -> Iterator[WorkerProcess]:
    """`synth worker` as a child; returns once it answers a ping (engine loaded and warmed up)."""
    name = f"synth-bench-{os.getpid()}@%h"
    env = {
        **os.environ,
        "SYNTH_REDIS_URL": app.conf.broker_url,
        "SYNTH_DATABASE_URL": settings.database_url,
        "SYNTH_STORAGE_DIR": str(settings.object_dir),
        "SYNTH_DATA_DIR": str(settings.data_dir),
        "PYTHONPATH": str(REPO),
        "SYNTH_REUSE": "off",
    }  # every run renders: none copies the last
    log_path = workdir / "worker.log"
    with stopwatch() as boot, open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "worker", "--loglevel", "WARNING", "--hostname", name],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        worker = WorkerProcess(process, name.replace("%h", platform.node()), log_path)
        try:
            _wait_for_ping(app, worker)
        except BaseException:
            _stop(process)
            raise
    worker.boot_s = boot.s
    try:
        yield worker
    finally:
        _stop(process)


def _wait_for_ping(app, worker: WorkerProcess) -> None:
    deadline = time.monotonic() + WORKER_BOOT_TIMEOUT_S
    while time.monotonic() < deadline:
        worker.check_alive()
        replies = app.control.ping(timeout=0.5)
        names = {n for reply in replies for n in reply}
        if worker.name in names:
            others = names - {worker.name}
            if others:
                raise click.ClickException(
                    f"other workers serve this Redis db too ({sorted(others)}); use a Redis db of its own"
                )
            return
    raise click.ClickException(f"the worker did not answer within {WORKER_BOOT_TIMEOUT_S} s; see {worker.log_path}")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
