"""Engine and session factories, and the schema check at start."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from pipeline.errors import ServiceUnavailableError


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10)


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    # WAL lets the CLI read progress while a worker writes; foreign keys make cascades real.
    # synchronous=NORMAL is WAL's own recommendation: a commit survives a crash of any process,
    # and only a power loss may undo the last ones; FULL would fsync every commit, and the API's
    # and workers' writes queue behind one another on the file's single write lock.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def check_reachable(engine: Engine) -> None:
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except OperationalError as e:
        raise ServiceUnavailableError(
            f"database {engine.url.render_as_string(hide_password=True)} is unreachable: "
            f"{str(e.orig).strip().splitlines()[0]}"
        ) from e
