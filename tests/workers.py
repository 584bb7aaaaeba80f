"""A real Celery worker in a thread of the test process, as the tests start it."""

from __future__ import annotations

import contextlib

from celery.contrib.testing.worker import start_worker


def thread_worker(app, queues: list[str], concurrency: int = 2, shutdown_timeout: float = 30):
    """``start_worker`` with the thread pool, consuming ``queues`` in that order; use with ``with``."""
    return start_worker(
        app,
        pool="threads",
        concurrency=concurrency,
        perform_ping_check=False,
        queues=queues,
        shutdown_timeout=shutdown_timeout,
    )


@contextlib.contextmanager
def app_with_worker(settings, redis_url: str, engine, queues=None, concurrency: int = 2):
    """A Celery app booted with ``engine`` and a thread worker on ``queues`` (default: the
    worker's own polling order); yields the app."""
    from worker.app import default_queues, make_app
    from worker.boot import boot

    app = make_app(settings, redis_url)
    boot(app, engine=engine)
    with thread_worker(app, queues or default_queues(settings), concurrency=concurrency):
        yield app
