"""Redis and the database for a run: embedded or given, settings over them, and cleanup of what a
run wrote (queues, batches)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import click
from sqlalchemy import delete

from pipeline.db import migrate
from pipeline.db.models import Batch
from pipeline.db.session import make_engine
from pipeline.routing import all_queues
from pipeline.settings import Settings
from worker.embedded import EmbeddedRedis


@contextlib.contextmanager
def services(redis_url: str | None, database_url: str | None, workdir: Path) -> Iterator[tuple[str, str]]:
    """(broker url, database url): the given ones, or an embedded redis / a SQLite file in workdir.
    The database is migrated to the current schema."""
    if database_url in (None, "sqlite"):
        database_url = f"sqlite:///{workdir / 'bench.db'}"
    engine = make_engine(database_url)
    if not migrate.is_current(engine):
        migrate.upgrade(engine)
    engine.dispose()
    if redis_url:
        yield redis_url, database_url
        return
    with EmbeddedRedis(workdir / "redis") as embedded:
        yield embedded.url, database_url


def bench_settings(broker_url: str, database_url: str, workdir: Path, fmt: str = "wav") -> Settings:
    return Settings(
        redis_url=broker_url,
        database_url=database_url,
        storage_dir=workdir / "objects",
        data_dir=workdir / "data",
        default_format=fmt,
    )


def queue_lengths(app) -> dict[str, int]:
    """Messages waiting in each of the app's queues (kombu keeps a queue as a Redis list, with
    priority sub-lists named queue + '\\x06\\x16' + priority)."""
    with app.connection_for_write() as conn:
        client = conn.default_channel.client
        out = {}
        for queue in all_queues(app.synth_settings.bucket_seconds):
            keys = [queue, *client.scan_iter(match=f"{queue}\x06\x16*")]
            out[queue] = sum(client.llen(k) for k in keys)
        return out


def drop_queues(app) -> None:
    with app.connection_for_write() as conn:
        client = conn.default_channel.client
        for queue in all_queues(app.synth_settings.bucket_seconds):
            client.delete(queue, *client.scan_iter(match=f"{queue}\x06\x16*"))


def refuse_busy_queues(app) -> None:
    waiting = {q: n for q, n in queue_lengths(app).items() if n}
    if waiting:
        raise click.ClickException(
            f"the benchmark's queues already hold messages ({waiting}); point --redis-url at a Redis db of its own"
        )


def drop_batch(sessions, batch_id: str) -> None:
    with sessions() as session:
        session.execute(delete(Batch).where(Batch.id == batch_id))  # jobs and metrics cascade
        session.commit()
