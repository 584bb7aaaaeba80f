"""Engine and session factories, and the schema check at start."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
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
        engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S, "factory": _GatedConnection},
                               pool_size=16, max_overflow=48)
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
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
    cur.close()


BUSY_TIMEOUT_S = 30
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


class _WriterLock:
    """One writer at a time for an SQLite file, across threads and processes, handed over the
    moment it frees.

    SQLite has one writer at a time per file. A writer that finds the file locked sleeps in
    SQLite's busy handler, 1, 2, 5 ... then 50 and 100 ms a try, however soon the lock frees.
    A worker serving hundreds of streams has that many threads claiming and finishing jobs while
    the API creates jobs for new requests: they slept through one another's short transactions,
    and a realtime job's claim, or its creation, took up to seconds. Here a process's writers
    queue on a thread lock, and one of them at a time on an flock of a file beside the database,
    which a dying process releases with it."""

    def __init__(self, path: Path | None):
        self._threads = threading.Lock()
        self._path = path
        self._fd: int | None = None
        self._pid = 0

    def acquire(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        if not self._threads.acquire(timeout=timeout):
            return False
        if self._path is None:
            return True
        try:
            if self._pid != os.getpid():      # a forked child has its own open file
                self._fd, self._pid = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644), os.getpid()
            wait = 0.0002
            while True:
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return True
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(wait)
                    wait = min(0.002, wait * 2)
        except BaseException:
            self._threads.release()
            raise
        self._threads.release()
        return False

    def release(self) -> None:
        try:
            if self._path is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._threads.release()


_gates: dict[str, _WriterLock] = {}
_gates_lock = threading.Lock()


class _GatedConnection(sqlite3.Connection):
    """An SQLite connection whose write transactions take the file's ``_WriterLock`` first."""

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
            raise sqlite3.OperationalError("database is locked (another writer held it)")
        self._writing = True

    def _end_write(self) -> None:
        if self._writing:
            self._writing = False
            self._gate.release()

    def commit(self):
        try:
            super().commit()
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
        self.connection._begin_write(sql)
        return super().execute(sql, *args)

    def executemany(self, sql, *args):
        self.connection._begin_write(sql)
        return super().executemany(sql, *args)


def _gate_for(database: str) -> _WriterLock:
    in_memory = database == "" or database.startswith(":") or database.startswith("file:")
    key = database if in_memory else str(Path(database).resolve())
    with _gates_lock:
        gate = _gates.get(key)
        if gate is None:
            gate = _gates[key] = _WriterLock(None if in_memory else Path(key + "-writer"))
        return gate


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
