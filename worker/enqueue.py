"""Producer side: mark a batch's jobs QUEUED, then put them on their queues, a few jobs per message."""

from __future__ import annotations

from collections.abc import Callable

from celery import Celery
from kombu.exceptions import OperationalError as KombuOperationalError
from sqlalchemy.orm import Session, sessionmaker

from pipeline.db import jobs as db
from pipeline.errors import ServiceUnavailableError
from pipeline.messages import RENDER_TASK
from pipeline.routing import REALTIME_QUEUE


def check_broker(app: Celery) -> None:
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=3)
    except (KombuOperationalError, OSError) as e:
        raise ServiceUnavailableError(f"Redis at {app.conf.broker_url} is unreachable: {e}") from e


def enqueue_batch(
    app: Celery,
    sessions: sessionmaker[Session],
    batch_id: str,
    jobs_per_task: int,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Mark a committed batch's jobs QUEUED and send their messages (``send_messages``). Returns
    the number of messages."""
    with sessions() as session:
        by_queue = mark_queued(session, batch_id)
        session.commit()
    return send_messages(app, by_queue, jobs_per_task, progress)


def mark_queued(session: Session, batch_id: str) -> dict[str, list[str]]:
    """Mark the batch's jobs QUEUED in the caller's transaction, before their messages go out, and
    return their ids by queue for ``send_messages``. Either order is safe: a worker claims a job
    whether it reads PENDING or QUEUED, and a job whose message never went out (the sender died
    between the commit and the send) is found open and unnamed by any message, and re-sent
    (pipeline/reconcile.py). Marking first saves the API's speech request a second write."""
    by_queue = db.job_ids_by_queue(session, batch_id)
    db.mark_batch_queued(session, batch_id)
    return by_queue


def send_messages(
    app: Celery, by_queue: dict[str, list[str]], jobs_per_task: int, progress: Callable[[int], None] | None = None
) -> int:
    """One message per group of ``jobs_per_task`` jobs of one queue (length bucket), over one
    connection; a realtime job gets a message of its own."""
    sent = 0
    try:
        with app.producer_or_acquire() as producer:
            for queue, ids in by_queue.items():
                size = 1 if queue == REALTIME_QUEUE else jobs_per_task  # realtime jobs never wait on others
                for start in range(0, len(ids), size):
                    group = ids[start : start + size]
                    app.send_task(RENDER_TASK, args=[group], queue=queue, routing_key=queue, producer=producer)
                    sent += 1
                    if progress:
                        progress(len(group))
    except (KombuOperationalError, OSError) as e:
        raise ServiceUnavailableError(f"Redis went away while enqueueing: {e}") from e
    return sent
