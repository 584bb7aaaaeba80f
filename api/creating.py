"""Create a batch, honour Idempotency-Key, commit, enqueue: the path every creating route shares."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from datetime import timedelta

from kombu.exceptions import OperationalError as KombuOperationalError

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from api.state import ApiState
from api.idempotency import Claim, remember, replay
from pipeline.db.jobs import PlannedBatch, insert_batches
from pipeline.db.models import Batch, utcnow
from pipeline.db.models_api import ApiKey
from pipeline import usage
from pipeline.errors import ServiceUnavailableError
from pipeline.routing import REALTIME_QUEUE
from pipeline.submit import BatchOptions, Item, create_item_batch
from pipeline.webhooks.ssrf import validate_webhook_url
from worker.enqueue import mark_queued, send_messages

log = logging.getLogger(__name__)


def owner_columns(
    state: ApiState,
    key: ApiKey,
    *,
    kind: str,
    webhook_url: str | None = None,
    webhook_events: Sequence[str] | None = None,
) -> dict:
    """The batch columns the API sets: owner, kind, webhook and expiry. A webhook URL that
    resolves to an internal address is refused here (400) unless the operator allow-listed it."""
    if webhook_url is not None:
        validate_webhook_url(webhook_url, state.settings.webhook_allow_hosts)
    return dict(
        owner_key_id=key.id,
        kind=kind,
        webhook_url=webhook_url,
        webhook_events=webhook_events,
        expires_at=utcnow() + timedelta(days=state.settings.result_ttl_days),
    )


def create(
    state: ApiState,
    session: Session,
    claim: Claim | None,
    resource_type: str,
    build: Callable[[Session], Batch],
    *,
    key: ApiKey,
    chars: int,
) -> tuple[str, bool]:
    """(resource id, created). ``build`` inserts the batch (it may raise InputError); the resource
    is the batch, or its only job when ``resource_type`` is "job". ``chars``: the characters the
    request submits, checked against ``key``'s quotas before anything is written (429); a replay
    of a request already answered is not checked again."""
    existing = replay(session, claim, resource_type)
    if existing is not None:
        return existing, False
    usage.check_submission(session, key, chars)
    batch = build(session)
    by_queue = mark_queued(session, batch.id)  # one write transaction per request, not two
    resource_id = batch.id if resource_type == "batch" else _only_job(by_queue)
    remember(session, claim, resource_type, resource_id)
    try:
        session.commit()
    except IntegrityError:  # the same Idempotency-Key won a race a moment ago
        session.rollback()
        existing = replay(session, claim, resource_type)
        if existing is None:
            raise
        return existing, False
    try:
        send_messages(state.celery, by_queue, state.settings.jobs_per_task)
    except ServiceUnavailableError:
        _discard(state, batch.id)
        raise
    return resource_id, True


class SpeechCreator:
    """Creates speech requests' jobs on a thread of its own: those waiting together in one
    transaction, their messages sent after its commit.

    Created one request at a time on the request threads, every speech job took its turn at
    the database's writer lock (SQLite has one writer), with the threads fighting the event loop
    that serves the live streams for the GIL: at 256 streams arriving over 2 s a request waited
    about 0.4 s for a thread and as long again for the lock. Here the rows of every request
    waiting are made first, without the database, and written in two statements and a commit:
    the lock is held that long per group, not once per request.

    A create is a function that plans the batch (``plan_item_batch``: it validates, without the
    database, and its error, an InputError above all, fails that request alone); a database error
    fails the group's transaction, and every request in it gets that error, as each would have on
    its own."""

    MAX_GROUP = 64

    def __init__(self, state: ApiState) -> None:
        self._state = state
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="synth-speech-creator", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)

    async def create(self, plan: Callable[[], PlannedBatch]) -> str:
        """The new job's id, once its row is committed and its message sent."""
        done: Future = Future()
        self._queue.put((plan, done))
        return await asyncio.wrap_future(done)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            group = [item]
            while len(group) < self.MAX_GROUP:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # stop after this group
                    break
                group.append(item)
            try:
                self._create(group)
            except Exception as e:  # noqa: BLE001 - the group's requests get the error; the thread goes on
                for _, done in group:
                    if not done.done():
                        done.set_exception(e)

    def _create(self, group: list[tuple[Callable[[], PlannedBatch], Future]]) -> None:
        state, planned = self._state, []
        for plan, done in group:
            try:
                planned.append((done, plan()))
            except Exception as e:  # noqa: BLE001 - planning touches no shared state: this request's own error
                done.set_exception(e)
        if not planned:
            return
        with state.sessions() as session:
            insert_batches(session, [p for _, p in planned])
            session.commit()
        for done, p in planned:
            by_queue = p.job_ids_by_queue()
            try:
                send_messages(state.celery, by_queue, state.settings.jobs_per_task)
            except ServiceUnavailableError as e:
                _discard(state, p.id)
                done.set_exception(e)
                continue
            done.set_result(_only_job(by_queue))


def _only_job(by_queue: dict[str, list[str]]) -> str:
    (job_id,) = [job_id for ids in by_queue.values() for job_id in ids]
    return job_id


def _discard(state: ApiState, batch_id: str) -> None:
    """Nothing half-written: a batch whose messages could not be sent is removed (as the CLI does)."""
    with state.sessions() as session:
        batch = session.get(Batch, batch_id)
        if batch is not None:
            session.delete(batch)
            session.commit()


def warm(state: ApiState) -> None:
    """The create path's first-use costs, paid at start rather than by the first request (they
    would delay a speech request's first byte many times over): the broker's transport, producer
    pool and the realtime queue's declaration, and the SQL of a speech job built, enqueued in the database's
    eyes, then rolled back. Nothing is written and nothing is sent."""
    with state.sessions() as session:
        columns = dict(owner_key_id=None, kind="job", webhook_url=None, webhook_events=None, expires_at=utcnow())
        batch = create_item_batch(
            session,
            state.settings,
            [Item(text="Warm up.", client_id="speech")],
            BatchOptions(format="wav", priority="realtime"),
            source="api:speech",
            **columns,
        )
        mark_queued(session, batch.id)
        session.rollback()
    # send_task's lazy parts: the result backend (disabled) and the message sender, built once
    state.celery.backend  # noqa: B018 - the access builds it
    state.celery.amqp.send_task_message  # noqa: B018 - the access builds it
    try:
        with state.celery.producer_or_acquire() as producer:
            queue = state.celery.amqp.queues.get(REALTIME_QUEUE)
            if queue is not None:
                producer.maybe_declare(queue)
    except (KombuOperationalError, OSError) as e:  # Redis is away: the first request pays, or gets 503
        log.warning("broker not warmed at start: %s", e)
