"""A real API server (uvicorn on a loopback port, in a thread) over the real services of
tests/conftest.py, keys made through pipeline.api_keys, and a real Celery worker thread with Piper."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest

from api.app import create_app
from api.server import server
from pipeline import api_keys
from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.routing import VERIFY_QUEUE, all_queues
from synth_testkit.ports import free_port
from tests.waiting import eventually
from tests.workers import app_with_worker


class Server:
    """The API as `synth api` serves it (api/server.py), in a thread."""

    def __init__(self, app, settings) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = server(app, settings, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()

        def started() -> bool:
            assert self.thread.is_alive(), "uvicorn's thread ended before it started"
            return self.server.started

        eventually(started, 30, "uvicorn to start", interval=0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def serve(settings, redis_url: str):
    return Server(create_app(settings, broker_url=redis_url), settings)


@pytest.fixture
def api_settings(settings):
    """Tests that need a different setting override this fixture. No rate limit: tests poll."""
    return settings.with_overrides(api_rate_limit=0)


@pytest.fixture
def api_server(api_settings, redis_url) -> Iterator[Server]:
    with serve(api_settings, redis_url) as server:
        yield server


@pytest.fixture
def new_key(database_url):
    """new_key(name) -> a plaintext key, created in the test database."""
    engine = make_engine(database_url)
    sessions = make_sessionmaker(engine)

    def make(name: str = "tenant") -> str:
        with sessions() as session:
            created = api_keys.create_key(session, name=name)
            session.commit()
        return created.plaintext

    yield make
    engine.dispose()


def client_for(server: Server, key: str | None, **kw) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=server.url, headers=headers, timeout=120, **kw)


@pytest.fixture
def client(api_server, new_key) -> Iterator[httpx.Client]:
    with client_for(api_server, new_key("a")) as c:
        yield c


@pytest.fixture
def running_worker(api_settings, redis_url, piper_engine):
    queues = [*all_queues(api_settings.bucket_seconds), VERIFY_QUEUE]  # a CPU worker's, checks last
    with app_with_worker(api_settings, redis_url, piper_engine, queues) as app:
        yield app


def _wait_status(client: httpx.Client, path: str, ends: tuple[str, ...], timeout: float, interval: float) -> dict:
    """The resource at ``path`` once its status is one of ``ends``; on a timeout, the message shows it."""

    def ended():
        body = client.get(path).json()
        return body if body["status"] in ends else None

    try:
        return eventually(ended, timeout, f"{path} to finish", interval=interval)
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out}: {client.get(path).json()}") from None


def wait_job(client: httpx.Client, job_id: str, timeout: float = 120) -> dict:
    return _wait_status(client, f"/v1/jobs/{job_id}", ("done", "failed", "cancelled"), timeout, 0.1)


def wait_batch(client: httpx.Client, batch_id: str, timeout: float = 180) -> dict:
    return _wait_status(client, f"/v1/batches/{batch_id}", ("finished", "cancelled"), timeout, 0.2)
