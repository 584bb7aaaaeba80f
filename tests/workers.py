"""A real Celery worker in a thread of the test process, as the tests start it."""

from __future__ import annotations

from celery.contrib.testing.worker import start_worker


def thread_worker(app, queues: list[str], concurrency: int = 2, shutdown_timeout: float = 30):
    """``start_worker`` with the thread pool, consuming ``queues`` in that order; use with ``with``."""
    return start_worker(app, pool="threads", concurrency=concurrency, perform_ping_check=False,
                        queues=queues, shutdown_timeout=shutdown_timeout)
