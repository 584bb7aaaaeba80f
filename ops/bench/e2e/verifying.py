"""Checks beside the batch workload (``--verify-workers N``): one `synth worker --verify -c N` on
the CPU beside the render workers, every batch job checked (SYNTH_VERIFY=all) and none rendered
again (SYNTH_RERENDER_BUDGET=0: a retake would be batch work the run without checks does not do,
and with random weights every render is noise, judged bad). After the batch: its verdicts, how many
were in when `synth submit --wait` returned, how long after that the last one came in, and what
the checks cost: seconds of audio checked per CPU second of the verify worker and its pool."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import func, select

from ops.bench import REPO
from pipeline.db.models import Batch, Job, JobMetrics
from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.errors import InputError
from pipeline.settings import Settings
from pipeline.verify.recognizer import load_recognizer
from pipeline.verify.verdict import PENDING

# What the synth processes run with: every job checked, none rendered again.
CHECKED_ENV = {"SYNTH_VERIFY": "all", "SYNTH_RERENDER_BUDGET": "0"}
BOOT_TIMEOUT_S = 120
POLL_S = 0.25


def require_recognizer(spec: str | None) -> None:
    """Exit with the reason where the checks could not run (the recognizer not installed: the verify
    workers run this Python), rather than have every job end not_checked."""
    try:
        load_recognizer(spec or Settings.model_fields["verify_recognizer"].default)
    except InputError as e:
        raise SystemExit(f"--verify-workers: {e}; the verify workers cannot check without it") from e


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and every process under it, living or reaped."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            children = [
                int(c) for task in Path(f"/proc/{p}/task").iterdir() for c in (task / "children").read_text().split()
            ]
        except (OSError, ValueError):
            continue
        total += sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime
        todo += children
    return total


@contextmanager
def verify_worker(processes: int, env: dict, workdir: Path, command: list[str]) -> Iterator[subprocess.Popen]:
    """`synth worker --verify -c processes`, once Celery says it is ready; stopped on the way out."""
    log = workdir / "verify-worker.log"
    with open(log, "ab") as f:
        proc = subprocess.Popen(
            [*command, "worker", "--verify", "-c", str(processes), "--loglevel", "INFO"],
            cwd=REPO,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while " ready." not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the verify worker did not start:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(POLL_S)
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


def verdict_counts(db_url: str, batch: str) -> tuple[dict[str, int], float]:
    """The batch's jobs by verdict (``pending``: its check not in yet; ``none``: not checked by
    SYNTH_VERIFY), and the audio seconds of the jobs checked."""
    with make_sessionmaker(make_engine(db_url))() as s:
        rows = s.execute(
            select(JobMetrics.verdict, func.count(), func.sum(JobMetrics.audio_s))
            .join(Job, Job.id == JobMetrics.job_id)
            .join(Batch, Batch.id == Job.batch_id)
            .where(Batch.name == batch)
            .group_by(JobMetrics.verdict)
        ).all()
    counts = {verdict or "none": n for verdict, n, _ in rows}
    checked_audio = sum(float(a or 0) for verdict, _, a in rows if verdict not in (None, PENDING))
    return counts, checked_audio


class CheckMeter:
    """The verify worker's CPU from the batch's start to its last check."""

    def __init__(self, proc: subprocess.Popen, processes: int, cpu_render_workers: bool, wait_s: float = 1800) -> None:
        """``wait_s``: how long to wait after the batch for its last check (the queue drains at the
        pool's pace; random weights' noise takes the recognizer longer than speech)."""
        self.proc, self.processes, self.cpu_render_workers = proc, processes, cpu_render_workers
        self.wait_s = wait_s
        self.cpu0 = 0.0

    def start(self) -> None:
        self.cpu0 = tree_cpu_seconds(self.proc.pid)

    def after_batch(self, db_url: str, batch: str) -> dict:
        """Called when `synth submit --wait` returns: wait for the batch's last check, and its figures."""
        at_end, _ = verdict_counts(db_url, batch)
        ended = time.monotonic()
        counts, audio = at_end, 0.0
        while time.monotonic() - ended < self.wait_s:
            counts, audio = verdict_counts(db_url, batch)
            if not counts.get(PENDING):
                break
            time.sleep(POLL_S)
        after = time.monotonic() - ended
        cpu = tree_cpu_seconds(self.proc.pid) - self.cpu0
        jobs = sum(at_end.values())
        return {
            "verify_processes": self.processes,
            "rerender_budget": 0,
            "verdicts": {k: counts.get(k, 0) for k in ("clean", "suspect", "bad", "not_checked")},
            "still_pending": counts.get(PENDING, 0),
            "checked_at_batch_end": jobs - at_end.get(PENDING, 0) - at_end.get("none", 0),
            "jobs": jobs,
            "checks_done_after_batch_s": round(after, 2) if not counts.get(PENDING) else None,
            "checked_audio_s": round(audio, 1),
            "verify_cpu_s": round(cpu, 1),
            "audio_s_per_verify_cpu_s": round(audio / cpu, 2) if cpu > 0 else None,
            # a render worker whose engine runs on the CPU takes checks too: the figure overstates
            "render_workers_check_too": self.cpu_render_workers,
        }


def summary(v: dict) -> str:
    """One line for the console."""
    rate = v["audio_s_per_verify_cpu_s"]
    done = v["checks_done_after_batch_s"]
    return (
        f"checks ({v['verify_processes']} CPU processes, SYNTH_VERIFY=all, SYNTH_RERENDER_BUDGET=0: no job "
        f"rendered again): {v['verdicts']}, {v['checked_at_batch_end']} of {v['jobs']} checked when the "
        f"batch ended, the last {'still pending' if done is None else f'{done} s after it'}; "
        f"{rate} s of audio per verify CPU second"
    )
