"""Housekeeping. synth.expire deletes API batches past their results TTL (worker/beat.py schedules
it at Settings.expire_cron). The reconciler (pipeline/reconcile.py) puts back or closes what the
queue lost: every `synth worker` runs a ``ReconcileTimer``, a thread that tries for a pass as it
starts and then every Settings.reconcile_interval seconds, so the fleet heals with no `synth beat`
and the pass never waits behind the batch work it repairs, as a message on a batch queue would.
Across the fleet one pass per interval runs: the worker that takes the turn key (a Redis key that
expires after the interval) runs it, under a lock so that passes never overlap. The synth.reconcile
task runs a pass at once, whoever's turn it is (an operator's, or a beat of an earlier release)."""

from __future__ import annotations

import contextlib
import logging
import threading
from datetime import datetime

import redis
from celery import Celery
from celery.utils.dispatch import Signal

from pipeline.hostinfo import hostname
from pipeline.lifecycle import expire_batches
from pipeline.live import redis_client_url
from pipeline.messages import RENDER_TASK
from pipeline.reconcile import Reconciled, reconcile
from pipeline.routing import all_queues
from worker.boot import runtime_for
from worker.verify import check_later

log = logging.getLogger(__name__)

EXPIRE_TASK = "synth.expire"
RECONCILE_TASK = "synth.reconcile"
RECONCILE_LOCK = "synth:reconcile"  # one pass at a time across the fleet
RECONCILE_TURN = "synth:reconcile:turn"  # who ran the interval's pass; expires with the interval
MIN_LOCK_S = 60  # a pass outliving its lock could overlap the next one

# Sent after each pass with its Reconciled (worker/metrics.py counts the actions).
reconciled = Signal(name="synth.reconciled", providing_args={"result"})


def register(app: Celery) -> None:
    @app.task(name=EXPIRE_TASK, shared=False)
    def expire(now: str | None = None) -> dict:
        renderer = runtime_for(app).renderer
        deleted = expire_batches(renderer.sessions, renderer.store, datetime.fromisoformat(now) if now else None)
        log.info("expired %d batches", deleted)
        return {"deleted": deleted}

    @app.task(name=RECONCILE_TASK, shared=False)
    def reconcile_task() -> dict:
        done = reconcile_pass(app, take_turn=False)
        return done.as_dict() if done is not None else {}


def reconcile_pass(app: Celery, *, take_turn: bool) -> Reconciled | None:
    """One pass of the reconciler, or None when it is not this worker's to run: another pass is
    running, or (``take_turn``) another worker ran this interval's."""
    settings, renderer = app.synth_settings, runtime_for(app).renderer
    client = redis.Redis.from_url(redis_client_url(app.conf.broker_url))
    try:
        lock = client.lock(RECONCILE_LOCK, timeout=max(MIN_LOCK_S, settings.reconcile_interval))
        if not lock.acquire(blocking=False):
            log.info("reconcile skipped: another pass is running")
            return None

        def send(queue: str, job_ids: list[str]) -> None:
            app.send_task(RENDER_TASK, args=[job_ids], queue=queue, routing_key=queue)

        try:
            if take_turn and not client.set(
                RECONCILE_TURN, settings.worker_name or hostname(), nx=True, ex=settings.reconcile_interval
            ):
                return None
            done = reconcile(
                renderer.sessions,
                renderer.store,
                client,
                queues=all_queues(settings.bucket_seconds),
                send=send,
                send_check=check_later(app),
                jobs_per_task=settings.jobs_per_task,
            )
        finally:
            with contextlib.suppress(redis.exceptions.LockError):  # outlived its timeout: nothing to free
                lock.release()
    finally:
        client.close()
    reconciled.send(sender=app, result=done)
    return done


class ReconcileTimer:
    """A worker's thread that tries for a reconcile pass as it starts and every interval after."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self.interval = app.synth_settings.reconcile_interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="synth-reconciler", daemon=True)

    def start(self) -> ReconcileTimer:
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                reconcile_pass(self.app, take_turn=True)
            except Exception:  # Redis, the database or the store down, or a bug: the next interval tries again
                log.exception("reconcile pass failed; the next one is in %d s", self.interval)
            self._stop.wait(self.interval)
