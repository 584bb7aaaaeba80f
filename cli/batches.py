"""`synth cancel`, `synth retry` and `synth delete`: the API's batch routes (pipeline/lifecycle.py)
for any batch, `synth submit`'s included. BATCH is an id, id prefix or name, as for `synth status`."""

from __future__ import annotations

import sys

import click
import redis

from cli.context import broker, open_database, open_store
from cli.inspect import resolve_batch
from cli.wait import print_summary, wait_again
from pipeline import lifecycle
from pipeline.live import redis_client_url
from pipeline.plural import counted
from pipeline.settings import Settings
from worker.app import make_producer
from worker.enqueue import check_broker, send_messages


@click.command()
@click.argument("batch")
def cancel(batch: str) -> None:
    """Cancel a batch's queued jobs: running ones finish, finished results are kept. BATCH is an
    id, id prefix or name (the newest batch of that name)."""
    settings = Settings()
    _, sessions = open_database(settings)
    store = open_store(settings)
    with sessions() as session:
        batch_id = resolve_batch(session, batch, "cancelling").id
        cancelled = lifecycle.cancel(session, store, batch_id)
        session.commit()
    click.echo(
        f"batch {batch_id}: {counted(cancelled, 'job cancelled', 'jobs cancelled')}; running jobs "
        f"finish; `synth status {batch_id}` shows what is left",
        err=True,
    )


@click.command()
@click.argument("batch")
@click.option("-y", "--yes", is_flag=True, help="Delete without asking for confirmation.")
def delete(batch: str, yes: bool) -> None:
    """Delete a batch: its audio, manifest and rows. Queued jobs are cancelled first; refused while
    a job is running. BATCH is an id, id prefix or name."""
    settings = Settings()
    _, sessions = open_database(settings)
    store = open_store(settings)
    with sessions() as session:
        found = resolve_batch(session, batch, "deleting")
        batch_id, what = found.id, f"batch {found.id}{f' ({found.name})' if found.name else ''}"
        jobs = found.total_jobs
    if not yes and not click.confirm(f"Delete {what}: {counted(jobs, 'job')}, its audio and manifest?", err=True):
        click.echo("nothing deleted", err=True)
        sys.exit(1)
    # Live copies of realtime audio are in Redis; an embedded one is not running, and they expire.
    live = redis.Redis.from_url(redis_client_url(settings.redis_url)) if settings.redis_url else None
    with sessions() as session:
        try:
            removed = lifecycle.delete(session, store, batch_id, live=live)
        except lifecycle.BatchBusyError:
            session.commit()  # the queued jobs stay cancelled
            raise
        session.commit()
    click.echo(f"deleted {what}: {counted(removed, 'object')} removed", err=True)


@click.command()
@click.argument("batch")
@click.option(
    "--failed",
    is_flag=True,
    default=True,
    help="Retry the batch's failed jobs (the default; done and cancelled jobs never run again).",
)
@click.option("--reason", metavar="TEXT", help="Retry only the failed jobs whose error contains TEXT.")
@click.option(
    "--wait/--no-wait",
    default=None,
    help="Wait for the retried jobs to finish. Embedded mode always waits; with SYNTH_REDIS_URL "
    "the default is to enqueue and return.",
)
def retry(batch: str, failed: bool, reason: str | None, wait: bool | None) -> None:
    """Queue a batch's failed jobs again, keeping their ids and client ids; the batch reopens and
    closes again, with a fresh manifest, when they finish. BATCH is an id, id prefix or name."""
    settings = Settings()
    _, sessions = open_database(settings)
    open_store(settings)
    with broker(settings) as broker_url:
        app = make_producer(settings, broker_url)
        check_broker(app)
        with sessions() as session:
            batch_id = resolve_batch(session, batch, "retrying").id
            by_queue = lifecycle.retry(session, batch_id, reason=reason)
            session.commit()
        # Sent after the commit; a job whose message is lost here is re-sent by the reconciler.
        send_messages(app, by_queue, settings.jobs_per_task)
        retried = sum(len(ids) for ids in by_queue.values())
        click.echo(
            f"batch {batch_id}: {counted(retried, 'failed job queued again', 'failed jobs queued again')}; "
            f"`synth status {batch_id}` shows progress",
            err=True,
        )
        summary = wait_again(settings, broker_url, sessions, batch_id, wait=wait)
        if summary is None:
            return
    print_summary(summary)
    if summary.counts.get("failed"):
        sys.exit(1)
