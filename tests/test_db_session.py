"""The SQLite engine: in-memory URLs work, and a process's writers take turns: a second writer
waits for the first's commit, gets no "database is locked", and reads what the first wrote."""

from __future__ import annotations

import sqlite3
import threading
import time

from sqlalchemy import text

from pipeline.db.session import make_engine


def test_an_in_memory_database_opens():
    for url in ("sqlite://", "sqlite:///:memory:"):
        with make_engine(url).connect() as conn:
            assert conn.execute(text("SELECT 1")).scalar() == 1


def test_a_second_writer_starts_the_moment_the_first_commits(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER)"))
        conn.execute(text("INSERT INTO t VALUES (1, 0)"))
    first_in, second_done = threading.Event(), threading.Event()
    order: list[str] = []

    def second() -> None:
        first_in.wait(10)
        with engine.begin() as conn:
            conn.execute(text("UPDATE t SET n = n + 10"))
        order.append("second")
        second_done.set()

    thread = threading.Thread(target=second)
    thread.start()
    with engine.begin() as conn:
        conn.execute(text("UPDATE t SET n = n + 1"))
        first_in.set()
        assert not second_done.wait(0.5)  # the first writer's transaction is still open
        order.append("first")
    assert second_done.wait(10)
    thread.join(10)
    assert order == ["first", "second"]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT n FROM t")).scalar() == 11
    # a reader never waits for the lock
    with engine.begin() as writer:
        writer.execute(text("UPDATE t SET n = 0"))
        started = time.monotonic()
        with engine.connect() as reader:
            assert reader.execute(text("SELECT n FROM t")).scalar() == 11  # WAL: the last commit
        assert time.monotonic() - started < 5


def test_a_writer_waits_for_another_process_lock_and_then_writes(tmp_path):
    """Another process's connection (here a plain sqlite3 one, outside this process's turns) holds
    the write lock; a write waits for it, however long within the busy timeout, and does not fail
    with "database is locked"."""
    path = tmp_path / "db.sqlite"
    engine = make_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER)"))
        conn.execute(text("INSERT INTO t VALUES (1, 0)"))
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    other.execute("UPDATE t SET n = n + 1")
    commit = threading.Timer(0.3, lambda: other.execute("COMMIT"))
    commit.start()
    started = time.monotonic()
    with engine.begin() as conn:
        conn.execute(text("UPDATE t SET n = n + 10"))
    assert time.monotonic() - started >= 0.25  # it waited for the other's commit
    with engine.connect() as conn:
        assert conn.execute(text("SELECT n FROM t")).scalar() == 11
    # The lock is free once the COMMIT lands, but the timer's thread may still be inside that
    # execute(); closing the connection under it would free the statement it is finishing.
    commit.join(10)
    other.close()
