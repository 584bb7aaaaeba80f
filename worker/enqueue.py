"""Producer side: put a batch's jobs on their queues, a few jobs per message, over one connection."""

from __future__ import annotations

from collections.abc import Callable

from celery import Celery
from kombu.exceptions import OperationalError as KombuOperationalError
from sqlalchemy.orm import Session, sessionmaker

from pipeline.db import jobs as db
from pipeline.errors import ServiceUnavailableError
from pipeline.routing import REALTIME_QUEUE
from worker.tasks import RENDER_TASK


def check_broker(app: Celery) -> None:
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=3)
    except (KombuOperationalError, OSError) as e:
        raise ServiceUnavailableError(f"Redis at {app.conf.broker_url} is unreachable: {e}") from e


def enqueue_batch(app: Celery, sessions: sessionmaker[Session], batch_id: str, jobs_per_task: int,
                  progress: Callable[[int], None] | None = None) -> int:
    """Send one message per group of ``jobs_per_task`` jobs of one queue (length bucket), then mark
    the jobs QUEUED. Returns the number of messages."""
    with sessions() as session:
        by_queue = db.job_ids_by_queue(session, batch_id)
    sent = 0
    try:
        with app.producer_or_acquire() as producer:
            for queue, ids in by_queue.items():
                size = 1 if queue == REALTIME_QUEUE else jobs_per_task  # realtime jobs never wait on others
                for start in range(0, len(ids), size):
                    group = ids[start:start + size]
                    app.send_task(RENDER_TASK, args=[group], queue=queue, routing_key=queue,
                                  producer=producer)
                    sent += 1
                    if progress:
                        progress(len(group))
    except (KombuOperationalError, OSError) as e:
        raise ServiceUnavailableError(f"Redis went away while enqueueing: {e}") from e
    with sessions() as session:
        db.mark_batch_queued(session, batch_id)
        session.commit()
    return sent
