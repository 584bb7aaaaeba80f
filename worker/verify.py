"""The verify task: check done jobs' audio against their text (pipeline/verify/queued.py) on the
verify queue, which CPU workers serve (`synth worker --verify`, and CPU render workers after their
own queues). A verify worker loads no engine: its checker (database, store, recognizer) is built
on its first message, in the process that runs it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from celery import Celery
from kombu.exceptions import OperationalError as KombuOperationalError
from sqlalchemy.exc import OperationalError

from pipeline import deadletter
from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.errors import InputError, RetryableError
from pipeline.messages import RERENDER_TASK, VERIFY_TASK
from pipeline.routing import VERIFY_QUEUE
from pipeline.storage import make_store
from pipeline.verify.queued import Checker, verify_jobs
from pipeline.verify.recognizer import load_recognizer
from pipeline.verify.retakes import Retakes
from worker.backoff import backoff
from worker.deadletter import dead_letter_task

log = logging.getLogger(__name__)
_lock = threading.Lock()


def register(app: Celery) -> None:
    settings = app.synth_settings

    @app.task(name=VERIFY_TASK, bind=True, max_retries=settings.max_retries, shared=False)
    def verify(self, job_ids: list[str]) -> dict:
        problem = deadletter.bad_job_ids(job_ids)
        if problem is not None:
            dead_letter_task(app, self, problem)
            return {"dead_lettered": 1}
        try:
            done = verify_jobs(checker_for(app), job_ids)
        except (RetryableError, OperationalError) as e:
            # The store or the database is away: the jobs stay pending. Once retries run out the
            # reconciler sends their checks again (pipeline/verify/queued.py stranded).

            raise self.retry(exc=e, countdown=backoff(self.request.retries, settings.retry_backoff_max)) from e
        return {"checked": len(done.checked), "skipped": len(done.skipped)}


def checker_for(app: Celery) -> Checker:
    with _lock:
        checker = getattr(app, "synth_checker", None)
        if checker is None:
            settings = app.synth_settings
            try:
                recognizer = load_recognizer(settings.verify_recognizer)
            except InputError as e:
                log.warning("jobs checked here end not_checked: %s", e)
                recognizer = None
            checker = app.synth_checker = Checker(
                make_sessionmaker(make_engine(settings.sqlalchemy_url)),
                make_store(settings),
                recognizer,
                retakes_for(app),
            )
        return checker


def retakes_for(app: Celery) -> Retakes | None:
    """How a bad job is sent to be rendered again, on its own queue; None under a budget of 0."""
    budget = app.synth_settings.rerender_budget
    if not budget:
        return None

    def send(job_id: str, queue: str | None, render: int) -> None:
        queue = queue or app.conf.task_default_queue
        try:
            app.send_task(RERENDER_TASK, args=[job_id, render], queue=queue, routing_key=queue)
        except (KombuOperationalError, OSError) as e:
            log.warning("job %s keeps its bad render: its retake was not queued (%s)", job_id, e)

    return Retakes(budget, send)


def check_later(app: Celery) -> Callable[[str], None]:
    """How a render worker sends a finished job's check. A send that fails (Redis away) is logged,
    not raised: the job is recorded, and the reconciler sends its check once Redis is back."""

    def send(job_id: str) -> None:
        try:
            app.send_task(VERIFY_TASK, args=[[job_id]], queue=VERIFY_QUEUE, routing_key=VERIFY_QUEUE)
        except (KombuOperationalError, OSError) as e:
            log.warning("the check of job %s was not queued (%s); the reconciler queues it", job_id, e)

    return send
