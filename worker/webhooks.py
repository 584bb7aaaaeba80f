"""Webhooks, attached to the worker as a hook (one file, like a dramatiq middleware):

- after every run of the render task (Celery's task_postrun signal, also after a retry or a
  failure), the events of its jobs and batches go into the outbox (pipeline/webhooks/outbox.py,
  deduplicated by event id) and each new delivery is enqueued;
- "synth.deliver_webhook" on its own queue "webhooks" makes one attempt and, if it failed,
  enqueues the next one with a countdown from the retry schedule (full jitter). `synth worker`
  consumes that queue on a pool of its own (worker/deliveries.py), never in the render slots;
  a receiver gets at most ``webhook_host_concurrency`` attempts at once per worker (``HostGate``);
- "synth.sweep_webhooks", on the beat schedule, re-enqueues deliveries whose next attempt is long
  overdue (their message was lost with a worker) and emits batch.finished for finished batches that
  have none (closed by cancelling their last jobs, which runs no render task).

Long countdowns and Redis: a message whose ETA lies beyond the visibility timeout is handed to a
second worker when the timeout runs out. Both then hold it; the attempt is claimed with a
conditional UPDATE (deliveries.claim), so only one of them sends it.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import deque
from datetime import timedelta

from celery import Celery
from celery.signals import task_postrun
from sqlalchemy.orm import Session, sessionmaker

from pipeline.db.models import utcnow
from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.routing import WEBHOOK_QUEUE
from pipeline.webhooks import deliveries, outbox, ssrf
from pipeline.webhooks.delivery import DeliveryConfig, deliver
from worker.tasks import RENDER_TASK

log = logging.getLogger(__name__)

DELIVER_TASK = "synth.deliver_webhook"
SWEEP_TASK = "synth.sweep_webhooks"
DEFER_S = (1.0, 3.0)  # a delivery whose receiver is at its limit tries again after this (uniform)
_lock = threading.Lock()

Receiver = tuple[str, int]  # a URL's host and port


class HostGate:
    """At most ``limit`` attempts at once per receiver in this process. One that finds its
    receiver at the limit waits in the receiver's line (``enter`` with an item), or is told no
    (without one); ``leave`` hands the slot to the next in line, if any."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._busy: dict[Receiver, int] = {}
        self._lines: dict[Receiver, deque] = {}
        self._lock = threading.Lock()

    def enter(self, receiver: Receiver | None, item=None) -> bool:
        if receiver is None:  # the delivery is gone: its attempt only closes it
            return True
        with self._lock:
            busy = self._busy.get(receiver, 0)
            if busy < self.limit:
                self._busy[receiver] = busy + 1
                return True
            if item is not None:
                self._lines.setdefault(receiver, deque()).append(item)
            return False

    def leave(self, receiver: Receiver | None):
        """The next item in the receiver's line, which now holds the slot; None: the slot is free."""
        if receiver is None:
            return None
        with self._lock:
            line = self._lines.get(receiver)
            if line:
                item = line.popleft()
                if not line:
                    del self._lines[receiver]
                return item
            busy = self._busy.pop(receiver) - 1
            if busy:
                self._busy[receiver] = busy
            return None


def register(app: Celery) -> None:
    settings = app.synth_settings
    config = app.synth_delivery_config = DeliveryConfig.from_settings(settings)
    app.synth_host_gate = HostGate(settings.webhook_host_concurrency)

    @app.task(name=DELIVER_TASK, shared=False, ignore_result=True)  # sent to WEBHOOK_QUEUE by enqueue()
    def deliver_webhook(delivery_id: str, attempt_no: int = 1) -> dict:
        # Run by Celery's pool (a worker started with -Q webhooks alone): a receiver at its limit
        # is tried again shortly rather than holding a slot (worker/deliveries.py lines it up).
        receiver = receiver_of(app, delivery_id)
        if not app.synth_host_gate.enter(receiver):
            enqueue(app, [delivery_id], attempt_no=attempt_no, countdown=random.uniform(*DEFER_S))
            return {"claimed": False, "deferred": True}
        try:
            return attempt(app, config, delivery_id, attempt_no)
        finally:
            app.synth_host_gate.leave(receiver)

    @app.task(name=SWEEP_TASK, shared=False, ignore_result=True)
    def sweep_webhooks() -> int:
        # Overdue by more than a request timeout and a minute: no live message can still hold it.
        cutoff = utcnow() - timedelta(seconds=config.timeout + 60)
        with _sessions(app)() as session:
            due = deliveries.overdue(session, older_than=cutoff)
            missed = outbox.emit_missed_batch_events(session)
            session.commit()
        for delivery_id, attempt_no in due:
            enqueue(app, [delivery_id], attempt_no=attempt_no)
        enqueue(app, missed)
        return len(due) + len(missed)

    schedule = dict(app.conf.beat_schedule or {})
    schedule["sweep-webhooks"] = {"task": SWEEP_TASK, "schedule": 600.0, "options": {"queue": WEBHOOK_QUEUE}}
    app.conf.beat_schedule = schedule
    task_postrun.connect(_after_render, weak=False, dispatch_uid="synth.webhooks.after_render")


def attempt(app: Celery, config: DeliveryConfig, delivery_id: str, attempt_no: int = 1) -> dict:
    """One attempt; a failed one enqueues the next with its countdown."""
    result = deliver(_sessions(app), config, delivery_id, attempt_no)
    if result.retry_in is not None:
        enqueue(app, [delivery_id], attempt_no=attempt_no + 1, countdown=result.retry_in)
    return {"claimed": result.claimed, "succeeded": result.succeeded, "retry_in": result.retry_in}


def receiver_of(app: Celery, delivery_id: str | None) -> Receiver | None:
    """The receiver (host, port) a delivery goes to; None when it is gone or its URL is malformed
    (its attempt then closes it)."""
    if not delivery_id:
        return None
    with _sessions(app)() as session:
        url = deliveries.url_of(session, delivery_id)
    if not url:
        return None
    try:
        _, host, port = ssrf.parse_url(url)
    except ssrf.WebhookURLError:
        return None
    return (host, port) if host else None


def enqueue(app: Celery, delivery_ids: list[str], *, attempt_no: int = 1, countdown: float | None = None) -> None:
    for delivery_id in delivery_ids:
        app.send_task(DELIVER_TASK, args=[delivery_id, attempt_no], queue=WEBHOOK_QUEUE, countdown=countdown)


def emit(app: Celery, sessions: sessionmaker[Session], job_ids: list[str]) -> list[str]:
    """Record the events of these jobs (and their finished batches) and enqueue new deliveries."""
    with sessions() as session:
        ids = outbox.emit_for_jobs(session, job_ids)
        session.commit()
    enqueue(app, ids)
    return ids


def _after_render(sender=None, args=None, kwargs=None, **_) -> None:
    """task_postrun of any task; acts on synth.render only. Runs in the worker thread that ran it."""
    if getattr(sender, "name", None) != RENDER_TASK:
        return
    app = sender.app
    runtime = getattr(app, "synth_runtime", None)
    job_ids = (args or [None])[0] or (kwargs or {}).get("job_ids") or []
    if runtime is None or DELIVER_TASK not in app.tasks or not job_ids:
        return
    try:
        emit(app, runtime.renderer.sessions, list(job_ids))
    except Exception:  # the task's own outcome stands; a redelivery or retry of it emits again
        log.exception("could not emit webhook events for %d jobs", len(job_ids))


def _sessions(app: Celery) -> sessionmaker[Session]:
    """A session factory of its own, so a webhooks-only worker never loads an engine."""
    with _lock:
        sessions = getattr(app, "synth_webhook_sessions", None)
        if sessions is None:
            sessions = app.synth_webhook_sessions = make_sessionmaker(make_engine(app.synth_settings.sqlalchemy_url))
        return sessions
