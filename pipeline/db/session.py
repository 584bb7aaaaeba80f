"""Engine and session factories, and the schema check at start."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, cast

from sqlalchemy import Engine, Result, create_engine, event, text
from sqlalchemy.engine import CursorResult
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from pipeline.errors import ServiceUnavailableError


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1] if "///" in url else ""
        in_memory = path in ("", ":memory:")
        if not in_memory:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        # A file's connections are cheap, and a worker has hundreds of threads claiming and
        # finishing jobs: room for them all to wait on the writer lock rather than for a connection.
        pool = {} if in_memory else {"pool_size": 16, "max_overflow": 48}
        engine = create_engine(url, connect_args={"timeout": _HANDLER_TIMEOUT_S, "factory": _GatedConnection}, **pool)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    # All 15 connections a process may hold stay pooled: a connection past the pool's size is
    # closed when it is handed back, and under a burst (an API process taking a hundred speech
    # requests a second on 40 threads) PostgreSQL then forks a new backend for most checkouts.
    return create_engine(url, pool_pre_ping=True, pool_size=PG_CONNECTIONS, max_overflow=0)


PG_CONNECTIONS = 15  # a process's connections to PostgreSQL (docs/operations.md)


def rows_matched(result: Result[Any]) -> int:
    """The rows an UPDATE or DELETE matched. Session.execute is typed as returning a plain Result
    for every statement; for these it returns a CursorResult, the kind that counts rows."""
    return cast(CursorResult[Any], result).rowcount


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    # WAL lets the CLI read progress while a worker writes; foreign keys make cascades real.
    # synchronous=NORMAL is WAL's own recommendation: a commit survives a crash of any process,
    # and only a power loss may undo the last ones; FULL would fsync every commit, and the API's
    # and workers' writes queue behind one another on the file's single write lock.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute(f"PRAGMA busy_timeout={round(_HANDLER_TIMEOUT_S * 1000)}")
    cur.close()


BUSY_TIMEOUT_S = 30  # longest wait for the file's write lock before "database is locked"
# SQLite's own busy handler sleeps 1, 2, 5, 10 ... 25, 50 and 100 ms between tries however soon
# the lock frees, and the thread sleeping there holds this process's gate: every writer of the
# process waited out the sleep of one that met another process's transaction, and at 256 live
# streams a realtime claim waited most of a second behind the API's inserts. The handler gets
# no time: the statement is tried again here every 0.1 to 2 ms.
_HANDLER_TIMEOUT_S = 0
_SQLITE_BUSY_SNAPSHOT = 517
_RETRY_FIRST_S, _RETRY_MAX_S = 0.0001, 0.002
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")
_gates: dict[str, threading.Lock] = {}
_gates_lock = threading.Lock()


class _GatedConnection(sqlite3.Connection):
    """An SQLite connection whose write transactions take turns in this process on a lock.

    SQLite has one writer at a time per file. A writer that finds the file locked sleeps in
    SQLite's busy handler, 1, 2, 5 ... then 50 and 100 ms a try, however soon the lock frees.
    A worker serving hundreds of streams has that many threads claiming and finishing jobs at
    once: they slept through one another's short transactions, and a realtime job's claim took
    up to seconds. Here they queue on a lock instead, and the next writer starts the moment the
    last one commits. Writers in other processes (the API) still meet in SQLite's handler."""

    def __init__(self, database, *args, **kwargs):
        super().__init__(database, *args, **kwargs)
        self._gate = _gate_for(str(database))
        self._writing = False

    def cursor(self, factory=None):
        return super().cursor(factory or _GatedCursor)

    def execute(self, sql, *args):
        return self.cursor().execute(sql, *args)

    def _begin_write(self, sql: str) -> None:
        if self._writing or not sql.lstrip()[:7].upper().startswith(_WRITES):
            return
        if not self._gate.acquire(timeout=BUSY_TIMEOUT_S):
            raise sqlite3.OperationalError("database is locked (another writer of this process held it)")
        self._writing = True

    def _end_write(self) -> None:
        if self._writing:
            self._writing = False
            self._gate.release()

    def commit(self):
        try:
            _busy_retry(super().commit)  # a commit outside WAL mode waits for readers to finish
        finally:
            self._end_write()

    def rollback(self):
        try:
            super().rollback()
        finally:
            self._end_write()

    def close(self):
        try:
            super().close()
        finally:
            self._end_write()


class _GatedCursor(sqlite3.Cursor):
    def execute(self, sql, *args):
        return self._busy_retry(super().execute, sql, args)

    def executemany(self, sql, *args):
        return self._busy_retry(super().executemany, sql, args)

    def _busy_retry(self, run, sql, args):
        # the engine's connect_args make every connection a _GatedConnection
        cast(_GatedConnection, self.connection)._begin_write(sql)
        return _busy_retry(run, sql, *args)


def _busy_retry(run, *args):
    """``run(*args)``, again while another connection holds the file's lock. A statement that met
    SQLITE_BUSY took nothing (SQLite gives up the snapshot it began), so running it again is safe,
    and so is a commit; a write whose transaction read an older snapshot (SQLITE_BUSY_SNAPSHOT)
    fails as before, since trying again cannot help it."""
    deadline, pause = None, _RETRY_FIRST_S
    while True:
        try:
            return run(*args)
        except sqlite3.OperationalError as e:
            code = getattr(e, "sqlite_errorcode", None) or 0
            if code & 0xFF != sqlite3.SQLITE_BUSY or code == _SQLITE_BUSY_SNAPSHOT:
                raise
            now = time.monotonic()
            deadline = deadline or now + BUSY_TIMEOUT_S
            if now >= deadline:
                raise
            time.sleep(pause)
            pause = min(_RETRY_MAX_S, pause * 2)


def _gate_for(database: str) -> threading.Lock:
    key = database if database.startswith(":") or database.startswith("file:") else str(Path(database).resolve())
    with _gates_lock:
        return _gates.setdefault(key, threading.Lock())


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
