"""Housekeeping tasks. synth.expire deletes API batches past their results TTL; synth.reconcile puts
back or closes what the queue lost (pipeline/reconcile.py). worker/beat.py schedules both
(Settings.expire_cron, Settings.reconcile_interval); a worker sends one reconcile at start."""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime

import redis
from celery import Celery
from kombu.exceptions import OperationalError as KombuOperationalError

from pipeline.lifecycle import expire_batches
from pipeline.live import redis_client_url
from pipeline.messages import RENDER_TASK
from pipeline.reconcile import reconcile
from pipeline.routing import all_queues
from worker.boot import runtime_for

log = logging.getLogger(__name__)

EXPIRE_TASK = "synth.expire"
RECONCILE_TASK = "synth.reconcile"
RECONCILE_LOCK = "synth:reconcile"   # one pass at a time across the fleet


def register(app: Celery) -> None:
    @app.task(name=EXPIRE_TASK, shared=False)
    def expire(now: str | None = None) -> dict:
        renderer = runtime_for(app).renderer
        deleted = expire_batches(renderer.sessions, renderer.store,
                                 datetime.fromisoformat(now) if now else None)
        log.info("expired %d batches", deleted)
        return {"deleted": deleted}

    @app.task(name=RECONCILE_TASK, shared=False)
    def reconcile_task() -> dict:
        settings, renderer = app.synth_settings, runtime_for(app).renderer
        client = redis.Redis.from_url(redis_client_url(app.conf.broker_url))
        lock = client.lock(RECONCILE_LOCK, timeout=max(60, settings.reconcile_interval))
        if not lock.acquire(blocking=False):
            log.info("reconcile skipped: another pass is running")
            return {}

        def send(queue: str, job_ids: list[str]) -> None:
            app.send_task(RENDER_TASK, args=[job_ids], queue=queue, routing_key=queue)

        try:
            return reconcile(renderer.sessions, renderer.store, client,
                             queues=all_queues(settings.bucket_seconds), send=send,
                             jobs_per_task=settings.jobs_per_task).as_dict()
        finally:
            with contextlib.suppress(redis.exceptions.LockError):  # outlived its timeout: nothing to free
                lock.release()


def reconcile_at_start(app: Celery) -> None:
    """A worker starting after a crash or an outage asks for one pass (any worker runs it)."""
    try:
        app.send_task(RECONCILE_TASK)
    except (KombuOperationalError, OSError) as e:  # the broker is down: beat's next pass covers it
        log.warning("no reconcile pass at start: %s", e)
