"""Waiting for a batch: the embedded worker child, the progress bar, the closing summary."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import click
from sqlalchemy.orm import Session
from tqdm import tqdm

from pipeline.db import jobs as db
from pipeline.db.models import Batch, JobStatus
from pipeline.errors import EngineUnavailableError, ServiceUnavailableError
from pipeline.settings import Settings
from pipeline.summary import BatchSummary, describe_text_notes, summarize
from pipeline.plural import counted
from pipeline.verify.retakes import coming as retakes_coming
from worker.embedded import die_with_parent

# The wait polls the batch's counts: often enough that the command ends within a few tens of ms of
# its last job (a GPU renders a 500-line corpus in under 20 s), and never spending more than a
# twentieth of its time on the count, which grows with the batch.
POLL_MIN_S, POLL_MAX_S = 0.05, 0.5
# A retake settles in about one render of its job; one not settled after this long was lost (its
# message gone with a Redis restarted without its append-only file).
RETAKE_STALL_S = 300.0


@dataclass
class Child:
    process: subprocess.Popen
    log_path: str

    def alive(self) -> None:
        """Raise if the worker died: the batch would never finish. Exit code 2 is `synth worker`'s
        for an engine that cannot start with these settings (cli/main.py EXIT_CODES): no job ran."""
        code = self.process.poll()
        if code is None:
            return
        tail = _tail(self.log_path)
        if code == 2:
            raise EngineUnavailableError(
                f"the embedded worker cannot start its engine: "
                f"{tail.removeprefix('error: ')} (full log: {self.log_path})"
            )
        raise ServiceUnavailableError(
            f"the embedded worker exited with code {code}: {tail} (full log: {self.log_path})"
        )


@contextlib.contextmanager
def embedded_worker(settings: Settings, broker_url: str) -> Iterator[Child]:
    """Run `synth worker` as a child on the embedded broker for the life of the block."""
    log_path = settings.data_dir / "worker.log"
    env = {**os.environ, "SYNTH_REDIS_URL": broker_url, "SYNTH_DATA_DIR": str(settings.data_dir)}
    with open(log_path, "ab") as log:
        # It ends with this process however that ends (SIGTERM: a warm shutdown), as the embedded
        # Redis it works from does.
        process = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "-v", "worker"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
    try:
        yield Child(process, str(log_path))
    finally:
        if process.poll() is None:
            process.terminate()  # warm shutdown: Celery finishes the task in hand
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def wait_for_batch(
    sessions,
    batch_id: str,
    alive: Callable[[], None] | None = None,
    on_poll: Callable[[Session, str], None] | None = None,
    retakes: int = 0,
) -> BatchSummary:
    """``on_poll(session, batch_id)``: called on each poll, for progress of its own (a document's
    chapters). ``retakes``: the retake budget of the worker this command runs (embedded), whose
    retakes of bad jobs are waited for once every job is done, so the summary and the files
    fetched are the kept renders."""
    with sessions() as session:
        total = session.get(Batch, batch_id).total_jobs
    # Redrawn in place on a terminal; into a log file, a line every 10 s rather than ten a second.
    interval = 0.1 if sys.stderr.isatty() else 10
    with tqdm(
        total=total, desc="synthesize", unit="job", file=sys.stderr, dynamic_ncols=True, mininterval=interval
    ) as bar:
        while True:
            asked = time.monotonic()
            with sessions() as session:
                counts = db.status_counts(session, batch_id)
                if on_poll is not None:
                    on_poll(session, batch_id)
            pause = min(POLL_MAX_S, max(POLL_MIN_S, 20 * (time.monotonic() - asked)))
            finished = sum(n for s, n in counts.items() if s.terminal)
            bar.update(finished - bar.n)
            bar.set_postfix(failed=counts[JobStatus.FAILED], running=counts[JobStatus.RUNNING], refresh=False)
            if finished >= total:
                break
            if alive:
                alive()
            time.sleep(pause)
        if retakes:
            _wait_for_retakes(sessions, batch_id, retakes, bar, alive)
    with sessions() as session:
        return summarize(session, session.get(Batch, batch_id))


def _wait_for_retakes(sessions, batch_id: str, budget: int, bar: tqdm, alive: Callable[[], None] | None) -> None:
    """Until no bad job has a retake on its way; or, where none settled in RETAKE_STALL_S (its
    message lost), say so and stop waiting: the job keeps the render it has."""
    last, since = None, time.monotonic()
    while True:
        with sessions() as session:
            coming = retakes_coming(session, batch_id, budget)
        if not coming:
            return
        if coming != last:
            last, since = coming, time.monotonic()
            bar.set_postfix(retakes=coming)
        elif time.monotonic() - since > RETAKE_STALL_S:
            click.echo(
                f"{counted(coming, 'bad job')} not rendered again in {RETAKE_STALL_S:.0f} s; kept as rendered", err=True
            )
            return
        if alive:
            alive()
        time.sleep(POLL_MAX_S)


def wait_again(
    settings: Settings,
    broker_url: str,
    sessions,
    batch_id: str,
    *,
    wait: bool | None,
    on_poll: Callable[..., None] | None = None,
) -> BatchSummary | None:
    """A batch's jobs queued again (retry, a lexicon applied, a document's chapter rendered again):
    on the embedded broker a worker of its own renders them while this waits; elsewhere the fleet
    does, waited for if ``wait``. None: not waited for."""
    if settings.redis_url is None:
        with embedded_worker(settings, broker_url) as child:
            return wait_for_batch(
                sessions, batch_id, alive=child.alive, on_poll=on_poll, retakes=settings.rerender_budget
            )
    return wait_for_batch(sessions, batch_id, on_poll=on_poll) if wait else None


def print_summary(s: BatchSummary) -> None:
    echo = lambda line: click.echo(line, err=True)  # noqa: E731
    done, failed = s.counts.get("done", 0), s.counts.get("failed", 0)
    echo(
        f"batch {s.batch_id}{f' ({s.name})' if s.name else ''}: {counted(s.total, 'job')}, {done} done, "
        f"{failed} failed"
        + (f", {counted(s.skipped_lines, 'empty line skipped', 'empty lines skipped')}" if s.skipped_lines else "")
    )
    if s.wall_s:
        echo(f"audio {s.audio_s:,.1f} s in {s.wall_s:,.1f} s: {s.x_real_time:,.1f}x real time")
    if s.reused:
        echo(
            f"reused: {counted(s.reused, 'job')} copied from earlier renders of the same text and settings, "
            f"{s.reused_s:,.1f} s of engine time saved"
        )
    if s.ttfb_p50 is not None and s.ttfb_p95 is not None:  # the two are measured together
        echo(f"TTFB p50 {s.ttfb_p50 * 1000:,.0f} ms, p95 {s.ttfb_p95 * 1000:,.0f} ms")
    if s.text_notes:
        echo(describe_text_notes(s.text_notes))
    if s.verdicts:
        pending = s.verdicts.get("pending", 0)  # on the verify queue still
        checked = sum(s.verdicts.values()) - pending
        echo(
            f"checked against the text: {s.verdicts.get('clean', 0)} of {counted(checked, 'job')} clean"
            + "".join(f", {s.verdicts[v]} {v}" for v in ("suspect", "bad", "not_checked") if s.verdicts.get(v))
            + (f", {pending} waiting for their check" if pending else "")
        )
    for client_id, verdict, reasons in s.flagged[:10]:
        echo(f"  {verdict} {client_id}: {reasons}")
    if len(s.flagged) > 10:
        echo(f"  ... and {len(s.flagged) - 10} more in manifest.jsonl (verdict, verdict_reasons)")
    for client_id, reason in s.failures[:10]:
        echo(f"  failed {client_id}: {reason}")
    if len(s.failures) > 10:
        echo(f"  ... and {len(s.failures) - 10} more (see `synth status {s.batch_id}`)")


def _tail(path: str, lines: int = 1) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return " | ".join(line.strip() for line in f.readlines()[-lines:]) or "(empty log)"
    except OSError:
        return "(no log)"
