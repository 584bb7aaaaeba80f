"""Thin tasks: take ids, call the pipeline, turn errors into retry or fail."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from celery import Celery
from sqlalchemy.exc import OperationalError

from pipeline import deadletter
from pipeline.errors import OutageError, PermanentError, RetryableError
from pipeline.messages import RENDER_TASK, RERENDER_TASK
from pipeline.plural import counted
from pipeline.render import fail_jobs, render_jobs, retry_error
from pipeline.retake import render_again
from worker import maintenance
from worker.backoff import backoff
from worker.boot import runtime_for
from worker.deadletter import dead_letter_task

log = logging.getLogger(__name__)


def register(app: Celery) -> None:
    settings = app.synth_settings

    @app.task(name=RENDER_TASK, bind=True, max_retries=settings.max_retries, shared=False)
    def render(self, job_ids: list[str]) -> dict:
        problem = deadletter.bad_job_ids(job_ids)
        if problem is not None:
            dead_letter_task(app, self, problem)
            return {"dead_lettered": 1}
        runtime = runtime_for(app)
        try:
            outcome = render_jobs(runtime.renderer, job_ids)
        except (RetryableError, OperationalError) as e:
            # The whole message could not be worked (database or storage down): try it all again.
            raise _retry_or_fail(self, runtime, job_ids, e) from e
        except Exception as e:
            try:
                fail_all(runtime, job_ids, f"internal error: {type(e).__name__}: {e}")
            except OperationalError as db_error:
                raise _retry(self, runtime, job_ids, db_error) from e
            raise
        if outcome.retry:
            raise _retry_or_fail(self, runtime, outcome.retry, retry_error(outcome), outcome.retry_errors)
        if len(outcome.skipped) == len(job_ids) and _names_no_job(runtime, job_ids):
            dead_letter_task(app, self, "names no job: another deployment's message, or its batch was deleted")
            return {"dead_lettered": 1}
        return {"done": len(outcome.done), "failed": len(outcome.failed), "skipped": len(outcome.skipped)}

    @app.task(name=RERENDER_TASK, bind=True, max_retries=settings.max_retries, shared=False)
    def rerender(self, job_id: str, render: int) -> dict:
        """Render number ``render`` of a done job whose check said bad (pipeline/retake.py)."""
        runtime = runtime_for(app)
        try:
            again = render_again(runtime.renderer, str(job_id), int(render))
        except (RetryableError, OperationalError) as e:
            raise self.retry(exc=e, countdown=backoff(self.request.retries, settings.retry_backoff_max)) from e
        except PermanentError as e:  # the job keeps the render it has
            log.warning("job %s was not rendered again: %s", job_id, e)
            return {"rendered": 0}
        return {"rendered": int(again)}

    maintenance.register(app)  # synth.expire (batch expiry) on the same app


def _names_no_job(runtime, job_ids: list[str]) -> bool:
    """Asked only when every job was skipped (finished, cancelled, or not there), which is rare."""
    with runtime.renderer.sessions() as session:
        return deadletter.names_no_job(session, job_ids)


def _retry_or_fail(
    task, runtime, job_ids: list[str], error: Exception, errors: Mapping[str, Exception] | None = None
) -> Exception:
    """The exception the task raises: a Retry, or ``error`` once retries are used up (jobs failed,
    each with its own reason from ``errors`` where given).

    An outage (the database down, the object store full) spends no retries: no job could succeed
    meanwhile, so the message is retried (capped backoff) for as long as it lasts. Acking it would
    lose its jobs for good."""
    if isinstance(error, (OutageError, OperationalError)) or task.request.retries < task.max_retries:
        return _retry(task, runtime, job_ids, error)
    try:
        give_up(runtime, job_ids, task.request.retries, error, errors)
    except OperationalError as e:
        return _retry(task, runtime, job_ids, e)
    return error


def _retry(task, runtime, job_ids: list[str], error: Exception) -> Exception:
    """A Retry of the same jobs; the new message is sent before this one is acked."""
    retries = task.request.retries
    if retries >= task.max_retries:
        log.warning("outage (%s): the %d jobs of this message stay open; retrying it", error, len(job_ids))
    return task.retry(
        args=[job_ids],
        exc=error,
        countdown=backoff(retries, runtime.settings.retry_backoff_max),
        max_retries=max(task.max_retries, retries + 1),
        throw=False,
    )


def give_up(
    runtime, job_ids: list[str], retries: int, error: Exception, errors: Mapping[str, Exception] | None = None
) -> None:
    """Record the jobs failed once their retries are spent, each with its own reason from ``errors``
    where given (the render task's and the realtime consumer's). A database error propagates."""
    gave_up = f"gave up after {counted(retries, 'retry', 'retries')}: "
    fail_jobs(runtime.renderer, {job_id: gave_up + str((errors or {}).get(job_id, error)) for job_id in job_ids})


def fail_all(runtime, job_ids: list[str], reason: str) -> None:
    """Record every job as failed, and close their finished batches. A database error propagates:
    the caller keeps the message."""
    fail_jobs(runtime.renderer, dict.fromkeys(job_ids, reason))
