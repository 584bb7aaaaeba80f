"""The webhook queues' own consumer: deliveries never take a render slot, and one dead receiver
never takes every delivery slot.

In a Celery worker's pool a delivery holds its slot for as long as its receiver makes it wait (up to
``webhook_timeout`` per attempt), so a receiver that accepts and never answers held the slots that
render jobs, and another tenant's job waited behind it. This consumer reads the webhook queues over
a connection of its own (as worker/realtime.py reads the realtime one: a message stays unacked
until its attempt is recorded, and one in hand when the worker dies is redelivered) and makes the
attempts on a pool of ``webhook_concurrency`` threads of its own.

A receiver (host and port of the URL) gets at most ``webhook_host_concurrency`` of those threads.
A delivery to a receiver at its limit waits in that receiver's line, unacked, holding no thread;
each attempt that ends hands its thread to the next in its receiver's line. So a dead receiver
slows its own deliveries only.

Retries wait out their countdown here too: a message whose ETA lies ahead is held (unacked, off
the prefetch count, as Celery holds it) and started when it is due. Any other task on these queues
(the sweep) runs as Celery would run it.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from celery import Celery
from kombu.common import QoS
from kombu.exceptions import OperationalError as KombuOperationalError
from sqlalchemy.exc import OperationalError

from pipeline.errors import RetryableError
from pipeline.routing import FORMER_WEBHOOK_QUEUE, WEBHOOK_QUEUE
from worker.realtime import RECONNECT_S
from worker.webhooks import DELIVER_TASK, HostGate, attempt, receiver_of

log = logging.getLogger(__name__)

WEBHOOK_QUEUES = (WEBHOOK_QUEUE, FORMER_WEBHOOK_QUEUE)
_POLL_S = 1.0  # how often the consumer thread looks at its stop flag and its timers


class DeliveryConsumer:
    """Consumes the webhook queues on a thread of its own; ``start()`` after the app is built."""

    def __init__(self, app: Celery, queues: tuple[str, ...] = WEBHOOK_QUEUES) -> None:
        settings = app.synth_settings
        self.app = app
        self.slots = settings.webhook_concurrency
        self.queues = [app.amqp.queues[name] for name in queues]
        self.gate: HostGate = app.synth_host_gate
        self.pool = ThreadPoolExecutor(max_workers=self.slots, thread_name_prefix="webhooks")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._in_flight = threading.Semaphore(self.slots)
        self._qos: QoS | None = None
        self._held: list = []  # (due, order, body, message): retries waiting out their ETA
        self._order = itertools.count()

    def start(self) -> DeliveryConsumer:
        self._thread = threading.Thread(target=self._run, name="synth-webhook-consumer", daemon=True)
        self._thread.start()
        log.info(
            "webhook consumer on %s: %d deliveries at once, %d per receiver",
            ", ".join(q.name for q in self.queues),
            self.slots,
            self.gate.limit,
        )
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop taking messages; wait up to ``timeout`` for the attempts in hand (the rest, and the
        messages held or waiting in a line, are redelivered)."""
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
                log.warning("webhook consumer lost the broker (%s); reconnecting", e)
                self._stop.wait(RECONNECT_S)
            except Exception:  # a bug here must not end deliveries silently: log and go on
                log.exception("webhook consumer failed; restarting it")
                self._stop.wait(RECONNECT_S)

    def _consume(self) -> None:
        with self.app.connection_for_read() as conn:
            consumer = conn.Consumer(
                self.queues, callbacks=[self._on_message], accept=["json"], prefetch_count=self.slots
            )
            # Messages held for their ETA, or waiting in a receiver's line, are unacked: each one
            # raises the prefetch count, so they never keep due messages from being fetched.
            self._qos = QoS(consumer.qos, self.slots)
            self._held.clear()  # a new connection: the broker redelivers what the old one held
            with consumer:
                while not self._stop.is_set():
                    self._qos.update()
                    try:
                        conn.drain_events(timeout=self._wait())
                    except socket.timeout:
                        pass
                    self._release_due()

    def _wait(self) -> float:
        if not self._held:
            return _POLL_S
        return min(_POLL_S, max(0.01, self._held[0][0] - time.time()))

    def _on_message(self, body, message) -> None:
        due = _eta(message)
        if due is not None and due > time.time():
            heapq.heappush(self._held, (due, next(self._order), body, message))
            assert self._qos is not None  # made before consuming starts (_consume)
            self._qos.increment_eventually()
            return
        self._dispatch(body, message)

    def _release_due(self) -> None:
        now = time.time()
        while self._held and self._held[0][0] <= now:
            _, _, body, message = heapq.heappop(self._held)
            assert self._qos is not None  # made before consuming starts (_consume)
            self._qos.decrement_eventually()
            self._dispatch(body, message)

    def _dispatch(self, body, message) -> None:
        # prefetch_count bounds the messages fetched; the semaphore bounds those on the pool
        self._in_flight.acquire()
        try:
            self.pool.submit(self._work, body, message)
        except RuntimeError:  # the pool is shut down: leave the message for redelivery
            self._in_flight.release()

    # A pool thread -------------------------------------------------------------------------------

    def _work(self, body, message) -> None:
        try:
            name, args, kwargs = _task_of(body, message)
            if name != DELIVER_TASK:
                self._run_task(name, args, kwargs, message)
                return
            try:
                receiver = receiver_of(self.app, args[0] if args else kwargs.get("delivery_id"))
            except OperationalError:
                log.exception("webhook message %s left for redelivery", _message_id(message))
                return
            assert self._qos is not None  # made before consuming starts (_consume)
            if not self.gate.enter(receiver, (args, kwargs, message)):
                self._qos.increment_eventually()  # in its receiver's line, off the prefetch count
                return
            next_up: tuple | None = (args, kwargs, message)
            while next_up is not None:  # this receiver's line, on this thread
                self._deliver(*next_up)
                # Stopping: what is still in line is redelivered, not worked through one timeout each.
                next_up = None if self._stop.is_set() else self.gate.leave(receiver)
                if next_up is not None:
                    self._qos.decrement_eventually()
        finally:
            self._in_flight.release()

    def _deliver(self, args, kwargs, message) -> None:
        try:
            attempt(self.app, self.app.synth_delivery_config, *args, **kwargs)
        except (RetryableError, OperationalError):
            # The attempt could not be claimed or recorded (the database is down): the message stays
            # unacked and is redelivered after the visibility timeout.
            log.exception("webhook message %s left for redelivery", _message_id(message))
            return
        except Exception:  # the attempt is recorded or was never claimed: nothing to redo
            log.exception("webhook message %s failed", _message_id(message))
        _ack(message)

    def _run_task(self, name: str | None, args, kwargs, message) -> None:
        task = self.app.tasks.get(name or "")
        if task is None:
            log.error("unknown task %r on the webhook queues: dropped", name)
        else:
            result = task.apply(args=args, kwargs=kwargs)
            if result.failed():
                log.error("task %s on the webhook queues failed: %s", name, result.result)
        _ack(message)


def _task_of(body, message) -> tuple[str | None, list, dict]:
    name = (message.headers or {}).get("task")
    args, kwargs = (body[0], body[1]) if isinstance(body, list | tuple) and len(body) >= 2 else ([], {})
    return name, list(args), dict(kwargs)


def _eta(message) -> float | None:
    """The message's ETA (Celery's countdown) as a Unix time; None: due now."""
    eta = (message.headers or {}).get("eta")
    if not eta:
        return None
    try:
        when = datetime.fromisoformat(eta)
    except (TypeError, ValueError):
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def _ack(message) -> None:
    """Ack; a message of a connection since lost is redelivered instead (its attempt is claimed
    once, so the redelivery sends nothing twice)."""
    try:
        message.ack()
    except Exception as e:  # noqa: BLE001 - the transport's own errors (Redis's are not OSErrors)
        log.warning("webhook message %s not acked (%s); it will be redelivered", _message_id(message), e)


def _message_id(message) -> str | None:
    return (message.headers or {}).get("id")
