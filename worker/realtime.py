"""The realtime queue's own consumer: realtime jobs never wait for a batch task's slot.

A Celery worker's pool is shared by every queue it consumes, and a batch task holds its slot until
its jobs are rendered, so with every slot busy a realtime message would wait behind batch work. The
engine schedules realtime work ahead of batch work by itself; what it needs is the request as soon
as the message arrives. This consumer reads the realtime queue over a connection of its own (the
same transport, so the same guarantees: the message stays unacked until its job is recorded, and a
worker that dies mid-job leaves it to be redelivered after the visibility timeout), and renders each
message on a thread of its own pool, whose size is the engine's realtime capacity.

A render task message is worked as the Celery task works it (``worker/tasks.py``): retryable errors
(the database or storage down) are retried here with the same backoff and given up on the same way,
but in place, since a realtime client is waiting for this worker, not for a requeue behind other
messages. Any other task sent to the realtime queue runs as Celery would run it. The task signals
fire as for a Celery task, so the worker's metrics and heartbeat count realtime jobs too.
docs/architecture.md (Queues) says where and why this differs from the task.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from celery import Celery
from celery.signals import task_postrun, task_prerun
from kombu.exceptions import OperationalError as KombuOperationalError
from sqlalchemy.exc import OperationalError

from pipeline.deadletter import bad_job_ids
from pipeline.errors import RetryableError
from pipeline.render import render_jobs, retry_error
from pipeline.routing import REALTIME_QUEUE
from worker.boot import runtime_for
from worker.deadletter import dead_letter_message, message_problem
from worker.backoff import backoff
from worker.tasks import RENDER_TASK, fail_all, give_up

log = logging.getLogger(__name__)

MIN_SLOTS = 8  # realtime messages rendered at once, at least
RECONNECT_S = 1.0  # wait before reconnecting to a broker that went away
_POLL_S = 1.0  # how often the consumer thread looks at its stop flag


def realtime_slots(engine_max_batch: int) -> int:
    """Realtime messages in flight: the engine's rows (it admits realtime work ahead of batch work
    and queues what does not fit), never fewer than MIN_SLOTS."""
    return max(MIN_SLOTS, engine_max_batch)


class RealtimeConsumer:
    """Consumes ``queue`` on a thread of its own; ``start()`` after the app's runtime is booted."""

    def __init__(self, app: Celery, slots: int, queue: str = REALTIME_QUEUE) -> None:
        self.app = app
        self.slots = slots
        self.queue = app.amqp.queues[queue]
        self.pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="realtime")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._in_flight = threading.Semaphore(slots)

    def start(self) -> RealtimeConsumer:
        self._thread = threading.Thread(target=self._run, name="synth-realtime-consumer", daemon=True)
        self._thread.start()
        log.info("realtime consumer on %r: %d jobs at once", self.queue.name, self.slots)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop taking messages; wait up to ``timeout`` for the jobs in hand (the rest are redelivered)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.pool.shutdown(wait=True, cancel_futures=True)

    # The consumer thread --------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._consume()
            except (KombuOperationalError, OSError, ConnectionError) as e:
                log.warning("realtime consumer lost the broker (%s); reconnecting", e)
                self._stop.wait(RECONNECT_S)
            except Exception:  # a bug here must not end realtime service silently: log and go on
                log.exception("realtime consumer failed; restarting it")
                self._stop.wait(RECONNECT_S)

    def _consume(self) -> None:
        with self.app.connection_for_read() as conn:
            consumer = conn.Consumer(
                [self.queue],
                callbacks=[self._on_message],
                accept=["json"],
                prefetch_count=self.slots,
                on_decode_error=self._undecodable,
            )
            with consumer:
                while not self._stop.is_set():
                    try:
                        conn.drain_events(timeout=_POLL_S)
                    except socket.timeout:
                        continue

    def _on_message(self, body, message) -> None:
        problem = message_problem(self.app, message)
        if problem is not None:
            return self._dead_letter(message, problem)
        # prefetch_count bounds the messages in hand; the semaphore makes it hold on every transport
        self._in_flight.acquire()
        try:
            self.pool.submit(self._work, body, message)
        except RuntimeError:  # the pool is shut down: leave the message for redelivery
            self._in_flight.release()

    def _dead_letter(self, message, reason: str) -> None:
        dead_letter_message(message, reason)
        message.ack()

    def _undecodable(self, message, exc) -> None:  # kombu's decoding failed: say why as the checks would
        self._dead_letter(message, message_problem(self.app, message) or f"the body does not decode ({exc})")

    # A pool thread -------------------------------------------------------------------------------

    def _work(self, body, message) -> None:
        try:
            self._dispatch(body, message)
        except (RetryableError, OperationalError):
            # The outcome could not be recorded (a service is down): the message stays unacked and
            # is redelivered after the visibility timeout.
            log.exception("realtime message %s left for redelivery", _message_id(message))
            return
        except Exception:  # its jobs were failed with the reason, as the Celery task does: ack
            log.exception("realtime message %s failed", _message_id(message))
        finally:
            self._in_flight.release()
        message.ack()

    def _dispatch(self, body, message) -> None:
        name = (message.headers or {}).get("task")
        args, kwargs = (body[0], body[1]) if isinstance(body, list | tuple) and len(body) >= 2 else ([], {})
        if name == RENDER_TASK:
            self._render(message, args[0])
        else:
            self._other(name, args, kwargs)

    def _render(self, message, job_ids: list[str]) -> None:
        problem = bad_job_ids(job_ids)
        if problem is not None:
            return dead_letter_message(message, problem)  # acked by _work
        task = self.app.tasks[RENDER_TASK]
        task_id = _message_id(message) or uuid.uuid4().hex
        task_prerun.send(sender=task, task_id=task_id, task=task, args=[job_ids], kwargs={})
        retval = None
        try:
            retval = self._render_with_retries(job_ids, task.max_retries or 0)
        except (RetryableError, OperationalError):
            raise  # nothing could be recorded: the message stays for redelivery
        except Exception as e:
            fail_all(runtime_for(self.app), job_ids, f"internal error: {type(e).__name__}: {e}")
            raise
        finally:
            task_postrun.send(
                sender=task,
                task_id=task_id,
                task=task,
                args=[job_ids],
                kwargs={},
                retval=retval,
                state="SUCCESS" if retval is not None else "FAILURE",
            )

    def _render_with_retries(self, job_ids: list[str], max_retries: int) -> dict:
        runtime = runtime_for(self.app)
        pending, retries = job_ids, 0
        totals = {"done": 0, "failed": 0, "skipped": 0}
        while True:
            errors = None
            try:
                outcome = render_jobs(runtime.renderer, pending, realtime=True)
            except (RetryableError, OperationalError) as e:
                error, again = e, pending
            else:
                for k in totals:
                    totals[k] += len(getattr(outcome, k))
                if not outcome.retry:
                    return totals
                error, again, errors = retry_error(outcome), outcome.retry, outcome.retry_errors
            if retries >= max_retries:
                give_up(runtime, again, retries, error, errors)
                totals["failed"] += len(again)
                return totals
            delay = backoff(retries, runtime.settings.retry_backoff_max)
            log.warning("realtime jobs %s retried in %.1f s: %s", again, delay, error)
            retries += 1
            pending = again
            if self._stop.wait(delay):
                raise RetryableError("worker stopping; the message is redelivered")

    def _other(self, name: str | None, args, kwargs) -> None:
        task = self.app.tasks.get(name or "")
        if task is None:
            raise LookupError(f"unknown task {name!r} on the realtime queue")
        started = time.monotonic()
        result = task.apply(args=args, kwargs=kwargs)
        if result.failed():
            log.error(
                "task %s on the realtime queue failed after %.1f s: %s", name, time.monotonic() - started, result.result
            )


def _message_id(message) -> str | None:
    return (message.headers or {}).get("id")
