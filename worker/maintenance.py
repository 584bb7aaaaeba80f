"""Housekeeping tasks. synth.expire deletes API batches past their results TTL; worker/beat.py
schedules it (Settings.expire_cron)."""

from __future__ import annotations

import logging
from datetime import datetime

from celery import Celery

from pipeline.lifecycle import expire_batches
from worker.boot import runtime_for

log = logging.getLogger(__name__)

EXPIRE_TASK = "synth.expire"


def register(app: Celery) -> None:
    @app.task(name=EXPIRE_TASK, shared=False)
    def expire(now: str | None = None) -> dict:
        renderer = runtime_for(app).renderer
        deleted = expire_batches(renderer.sessions, renderer.store,
                                 datetime.fromisoformat(now) if now else None)
        log.info("expired %d batches", deleted)
        return {"deleted": deleted}
