"""Thin tasks: take ids, call the pipeline, turn errors into retry or fail."""

from __future__ import annotations

import logging
import random

from celery import Celery
from sqlalchemy.exc import OperationalError

from pipeline.db import jobs as db
from pipeline.errors import RetryableError
from pipeline.render import render_jobs
from worker.boot import runtime_for

log = logging.getLogger(__name__)

RENDER_TASK = "synth.render"


def backoff(retries: int, cap: int) -> float:
    """Exponential backoff with full jitter: 2, 4, 8 ... seconds, capped, times U(0.5, 1)."""
    return min(cap, 2 ** (retries + 1)) * random.uniform(0.5, 1.0)


def register(app: Celery) -> None:
    settings = app.synth_settings

    @app.task(name=RENDER_TASK, bind=True, max_retries=settings.max_retries, shared=False)
    def render(self, job_ids: list[str]) -> dict:
        runtime = runtime_for(app)
        try:
            outcome = render_jobs(runtime.renderer, job_ids)
        except (RetryableError, OperationalError) as e:
            # The whole message could not be worked (database or storage down): try it all again.
            raise _retry_or_fail(self, runtime, job_ids, e) from e
        except Exception as e:
            fail_all(runtime, job_ids, f"internal error: {type(e).__name__}: {e}")
            raise
        if outcome.retry:
            raise _retry_or_fail(self, runtime, outcome.retry, RetryableError("; ".join(outcome.retry)))
        return {"done": len(outcome.done), "failed": len(outcome.failed), "skipped": len(outcome.skipped)}

    from worker import maintenance  # noqa: PLC0415 — synth.expire (batch expiry) on the same app

    maintenance.register(app)


def _retry_or_fail(task, runtime, job_ids: list[str], error: Exception) -> Exception:
    """The exception the task raises: a Retry, or ``error`` once retries are used up (jobs failed)."""
    if task.request.retries >= task.max_retries:
        fail_all(runtime, job_ids, f"gave up after {task.request.retries} retries: {error}")
        return error
    return task.retry(args=[job_ids], exc=error,
                     countdown=backoff(task.request.retries, runtime.settings.retry_backoff_max), throw=False)


def fail_all(runtime, job_ids: list[str], reason: str) -> None:
    try:
        with runtime.renderer.sessions() as session:
            for job_id in job_ids:
                db.fail(session, job_id, reason)
            session.commit()
    except OperationalError:
        log.exception("could not record the failure of %d jobs; their message will be retried", len(job_ids))
