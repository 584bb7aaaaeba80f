"""Writing a batch, enqueuing it and waiting for it: what `synth submit` does for a corpus and a
document alike."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import click
from sqlalchemy.orm import Session
from tqdm import tqdm

from cli.context import broker, open_database, open_store
from cli.interrupts import WithdrawRequested, counted_interrupts
from cli.wait import embedded_worker, print_summary, wait_for_batch
from pipeline.errors import EngineUnavailableError, ServiceUnavailableError
from pipeline.lexicon import store as lexicons
from pipeline.plural import counted
from pipeline.settings import Settings
from pipeline.submit import withdraw_batch
from worker.app import make_producer
from worker.enqueue import check_broker, enqueue_batch

PROGRESS_FROM = 5000  # lines: a corpus this long shows its enqueue's progress


def run_batch(
    settings: Settings,
    create: Callable[[Session], str],
    *,
    total: int,
    name: str | None,
    note: str,
    wait: bool | None,
    output: Path | None,
    on_poll: Callable[[Session, str], None] | None = None,
):
    """Write a batch (``create`` returns its id), enqueue it and, where asked or embedded, wait for
    it. Returns (its summary, the session maker), or None where it was only enqueued."""
    _, sessions = open_database(settings)
    store = open_store(settings)
    embedded = settings.redis_url is None
    with broker(settings) as broker_url:
        app = make_producer(settings, broker_url)
        check_broker(app)
        batch_id, interrupted = _write_and_enqueue(settings, sessions, store, app, create, total)
        click.echo(
            f"batch {batch_id}{f' ({name})' if name else ''}: " + counted(total, "job queued", "jobs queued") + note,
            err=True,
        )
        if interrupted:
            who = "`synth worker` (same SYNTH_DATA_DIR) renders them" if embedded else "the workers render them"
            click.echo(
                f"interrupted: batch {batch_id} is queued whole; {who}; `synth cancel {batch_id}` stops it, "
                f"`synth status {batch_id}` shows progress",
                err=True,
            )
            sys.exit(130)
        if not (embedded or wait or output):
            click.echo(batch_id)
            return None
        if embedded:  # the message comes before the worker's warm shutdown, which may take a while
            try:  # the outer one: a Ctrl-C while the worker still boots
                with (
                    _told_when_interrupted(batch_id, embedded),
                    embedded_worker(settings, broker_url) as child,
                    _told_when_interrupted(batch_id, embedded),
                ):
                    summary = wait_for_batch(
                        sessions, batch_id, alive=child.alive, on_poll=on_poll, retakes=settings.rerender_budget
                    )
            except EngineUnavailableError as e:
                # Nothing ran; kept, the batch would render on whichever worker starts next, beside
                # the one submitted again once the setting is fixed.
                withdraw_batch(sessions, store, batch_id)
                raise EngineUnavailableError(
                    f"{e}; batch {batch_id} was withdrawn, nothing was rendered: fix the setting and submit again"
                ) from e
        else:
            with _told_when_interrupted(batch_id, embedded):
                summary = wait_for_batch(sessions, batch_id, on_poll=on_poll)
    print_summary(summary)
    return summary, sessions


def _write_and_enqueue(settings, sessions, store, app, create, total: int) -> tuple[str, bool]:
    """Write the batch and send its messages, Ctrl-C counted meanwhile (cli/interrupts.py). Returns
    the batch id and whether Ctrl-C was pressed; exits 130 once the batch is withdrawn on a second."""
    with counted_interrupts() as interrupts:
        with sessions() as session:
            try:
                batch_id = create(session)
                session.commit()
            except BaseException:  # a document's outline may be in the store: nothing half-written
                session.rollback()
                raise
        if total >= PROGRESS_FROM:  # the id, before a long enqueue
            click.echo(f"batch {batch_id}: enqueuing {counted(total, 'job')}", err=True)

        def progress(n: int) -> None:
            bar.update(n)
            interrupts.check(batch_id)

        try:
            with tqdm(total=total, desc="enqueue", unit="job", disable=total < PROGRESS_FROM, file=sys.stderr) as bar:
                interrupts.check(batch_id)
                enqueue_batch(app, sessions, batch_id, settings.jobs_per_task, progress=progress)
        except ServiceUnavailableError:  # nothing half-written: the batch is withdrawn everywhere
            withdraw_batch(sessions, store, batch_id)
            raise
        except WithdrawRequested:
            withdraw_batch(sessions, store, batch_id)
            click.echo(
                f"interrupted: batch {batch_id} withdrawn; the messages already sent find no job "
                "and are dropped; nothing of it renders",
                err=True,
            )
            sys.exit(130)
        return batch_id, interrupts.count > 0


@contextlib.contextmanager
def _told_when_interrupted(batch_id: str, embedded: bool) -> Iterator[None]:
    """Ctrl-C stops the wait, not the batch: its jobs stay queued. Say so, and how to finish them."""
    try:
        yield
    except KeyboardInterrupt as e:
        if getattr(e, "synth_told", False):  # said once, by the innermost
            raise
        setattr(e, "synth_told", True)  # read by the outer handlers, above
        who = "`synth worker` (same SYNTH_DATA_DIR) finishes them" if embedded else "the workers finish them"
        click.echo(
            f"\ninterrupted: batch {batch_id}'s unfinished jobs stay queued; {who}; "
            f"`synth status {batch_id}` shows progress, `synth fetch {batch_id}` gets the audio",
            err=True,
        )
        raise


def pin_lexicon(settings: Settings, lexicon: str | None, version: int | None):
    """The lexicon version a batch renders with, taken now: later changes do not reach it."""
    _, sessions = open_database(settings)
    with sessions() as session:
        return lexicons.pin(session, owner=lexicons.LOCAL_OWNER, ref=lexicon, version=version)
