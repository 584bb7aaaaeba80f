"""What every command builds from Settings: the database, the store, the broker (embedded or not)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from pipeline.db import migrate
from pipeline.db.session import check_reachable, make_engine, make_sessionmaker
from pipeline.errors import ServiceUnavailableError
from pipeline.settings import Settings
from pipeline.storage import ObjectStore, make_store
from worker.embedded import EmbeddedRedis


def open_database(settings: Settings, *, upgrade_embedded: bool = True) -> tuple[Engine, sessionmaker[Session]]:
    """Connect and check the schema. The embedded SQLite database is migrated on first use; an
    external one must be migrated by an operator (`synth db upgrade`)."""
    engine = make_engine(settings.sqlalchemy_url)
    check_reachable(engine)
    if not migrate.is_current(engine):
        if settings.database_url is None and upgrade_embedded:
            migrate.upgrade(engine)
        else:
            raise ServiceUnavailableError(
                f"database {engine.url.render_as_string(hide_password=True)} is not at the current "
                "schema: run `synth db upgrade`"
            )
    return engine, make_sessionmaker(engine)


def open_store(settings: Settings) -> ObjectStore:
    """The object store, checked as the database and Redis are: a batch whose audio could not be
    stored is refused before anything is written, not left queued behind a worker that cannot start."""
    store = make_store(settings)
    store.check()
    return store


@contextlib.contextmanager
def broker(settings: Settings) -> Iterator[str]:
    """The broker URL: SYNTH_REDIS_URL, or an embedded redis-server for the life of the block."""
    if settings.redis_url:
        yield settings.redis_url
        return
    with EmbeddedRedis(settings.data_dir) as embedded:
        yield embedded.url
