"""A worker survives any message: what it cannot act on goes to the dead-letter list
(pipeline/deadletter.py) instead of killing it. Three layers, each where its failure happens:

- the transport: kombu's Redis channel decodes each item it pops (``loads`` in ``_brpop_read``) and
  builds a message from it, outside any handler, so bytes that are not JSON, JSON that is not an
  envelope or a body that is not valid base64 end the consumer ("Unrecoverable error"). ``Channel``
  checks the item first and dead-letters it before kombu sees it;
- Celery's consumer: a body that is not ``[args, kwargs, embed]`` fails in Celery's request
  parsing, outside its own error handling; an unknown task or an undecodable body is logged and
  dropped. ``Consumer`` checks the body and the arguments against the task's signature and
  dead-letters what fails, and what Celery itself refuses;
- the task: arguments of the right shape but meaningless (job ids that are not strings, ids that
  name no job) are the render task's to judge (worker/tasks.py, ``dead_letter_task``).

The realtime queue's own consumer (worker/realtime.py) reads through the same channel and makes
the same checks (``message_problem``, ``dead_letter_message``).

``install(app)`` puts the first two in place for a worker's app (make_app); producers keep
kombu's own classes.
"""

from __future__ import annotations

import json
import logging
from queue import Empty

import redis
from celery import Celery
from celery.app.amqp import AMQP
from celery.worker.consumer import Consumer as CeleryConsumer
from kombu import Connection as KombuConnection
from kombu.transport import redis as kombu_redis
from kombu.utils.encoding import bytes_to_str

from pipeline import deadletter
from pipeline.live import redis_client_url

log = logging.getLogger(__name__)


# The transport -----------------------------------------------------------------------------------


class Channel(kombu_redis.Channel):
    def dead_letter(self, raw: bytes | str, queue: str | None, reason: str) -> None:
        with self.conn_or_acquire() as client:
            deadletter.record(client, queue=queue, reason=reason, message=raw)

    def _brpop_read(self, **options):
        # kombu's own, but for the item's check before it is delivered (kombu 5.x).
        try:
            try:
                dest__item = self.client.parse_response(self.client.connection, "BRPOP", **options)
            except self.connection_errors:
                self.client.connection.disconnect()
                raise
            if not dest__item:
                raise Empty()
            dest, item = dest__item
            dest = bytes_to_str(dest).rsplit(self.sep, 1)[0]
            self._queue_cycle.rotate(dest)
            payload, problem = self._envelope(item)
            if problem is None:
                self.connection._deliver(payload, dest)
            else:
                self.dead_letter(item, dest, problem)
            return True
        finally:
            self._in_poll = None  # type: ignore[assignment]  # as kombu's own _brpop_read; its class attribute says bool
            flush = getattr(self, "_flush_brpop_reauth", None)
            if flush is not None:
                flush()

    def _envelope(self, item: bytes) -> tuple[dict | None, str | None]:
        """The item as kombu's payload, or why it is none: what kombu needs to build a message
        and, later, to put it back on its queue."""
        try:
            payload = json.loads(item.decode("utf-8"))
        except UnicodeDecodeError:
            return None, "not UTF-8 text, so not JSON"
        except ValueError as e:
            return None, f"not JSON ({e})"
        if not isinstance(payload, dict):
            return None, f"not a message envelope but a JSON {type(payload).__name__}"
        properties = payload.get("properties")
        if not isinstance(properties, dict) or not isinstance(properties.get("delivery_tag"), str):
            return None, "the envelope has no properties with a delivery_tag"
        info = properties.get("delivery_info")  # where the unacked hash files it, and restores it to
        if not (
            isinstance(info, dict)
            and isinstance(info.get("exchange"), str)
            and isinstance(info.get("routing_key"), str)
        ):
            return None, "the envelope's properties have no delivery_info with exchange and routing_key"
        if not isinstance(payload.get("headers") or {}, dict):
            return None, "the envelope's headers are not an object"
        body = payload.get("body")
        if body:
            try:
                self.decode_body(body, properties.get("body_encoding"))
            except Exception as e:  # noqa: BLE001 - any codec's error: binascii, an unknown encoding
                return None, f"the body is not valid {properties.get('body_encoding')} ({type(e).__name__}: {e})"
        return payload, None


class Transport(kombu_redis.Transport):
    Channel = Channel


class Connection(KombuConnection):
    """kombu's Connection, with ``Transport`` for Redis (``redis://``, ``rediss://``, ``redis+socket://``)."""

    def get_transport_cls(self):
        cls = super().get_transport_cls()
        return Transport if cls is kombu_redis.Transport else cls


class WorkerAMQP(AMQP):
    Connection = Connection


# Celery's consumer ---------------------------------------------------------------------------------


class Consumer(CeleryConsumer):
    """Celery's consumer, dead-lettering what it would die of or drop."""

    def create_task_handler(self, *args, **kwargs):
        handle = super().create_task_handler(*args, **kwargs)

        def on_task_received(message):
            try:
                problem = message_problem(self.app, message)
                if problem is None:
                    return handle(message)
            except self.connection_errors:
                raise
            except Exception as e:  # noqa: BLE001 - anything Celery did not catch would end the worker
                problem = f"could not be taken as a task: {type(e).__name__}: {e}"
            return self._dead_letter(message, problem)

        return on_task_received

    def _dead_letter(self, message, reason: str) -> None:
        dead_letter_message(message, reason)
        message.ack_log_error(log, self.connection_errors)

    # What Celery itself refuses: kept on the list rather than logged and dropped.
    def on_decode_error(self, message, exc):
        self._dead_letter(message, f"the body does not decode ({exc})")

    def on_unknown_message(self, body, message):
        self._dead_letter(message, "not a task message")

    def on_unknown_task(self, body, message, exc):
        self._dead_letter(message, f"unknown task ({exc})")

    def on_invalid_task(self, body, message, exc):
        self._dead_letter(message, f"invalid task message ({exc})")


def message_problem(app: Celery, message) -> str | None:
    """Why ``message`` (a kombu message) is no task of ``app``'s that could run; None when it is."""
    headers = message.headers
    name = headers.get("task") if isinstance(headers, dict) else None
    if not isinstance(name, str):
        return "not a task message (no task header)"
    task = app.tasks.get(name)
    if task is None:
        return f"unknown task {name!r}"
    if message.content_type != "application/json":  # never decoded: pickle would run its code
        return f"content type {message.content_type!r} is not accepted"
    try:
        body = message.decode()
    except Exception as e:  # noqa: BLE001 - JSON only (above): any error is a body that does not decode
        return f"the body does not decode ({type(e).__name__}: {e})"
    if not (
        isinstance(body, list | tuple)
        and len(body) == 3
        and isinstance(body[0], list | tuple)
        and isinstance(body[1], dict)
        and isinstance(body[2], dict | None)
    ):
        return "the body is not [args, kwargs, embed]"
    try:
        task.__header__(*body[0], **body[1])
    except TypeError as e:
        return f"arguments {name} cannot take: {e}"
    return None


def dead_letter_message(message, reason: str) -> None:
    """Put a kombu message on the dead-letter list (the caller acks it)."""
    raw = getattr(message, "_raw", None)  # the payload dict of kombu's virtual transports
    raw = json.dumps(raw, default=str) if raw is not None else bytes_to_str(message.body or b"")
    queue = (message.delivery_info or {}).get("routing_key")
    dead_letter = getattr(message.channel, "dead_letter", None)
    if dead_letter is None:  # not our transport: dropped as Celery would, having said why
        log.error("dropped a message from %s: %s", queue, reason)
    else:
        dead_letter(raw, queue, reason)


# The task ------------------------------------------------------------------------------------------


def dead_letter_task(app: Celery, task, reason: str) -> None:
    """The running task's message goes to the dead-letter list: its arguments are meaningless. The
    message is acked as the task returns; the entry keeps its task name, id and arguments."""
    request = task.request
    queue = (request.delivery_info or {}).get("routing_key")
    message = json.dumps(
        {"task": task.name, "id": request.id, "args": request.args, "kwargs": request.kwargs}, default=repr
    )
    client = redis.Redis.from_url(redis_client_url(app.conf.broker_url))
    try:
        deadletter.record(client, queue=queue, reason=reason, message=message)
    finally:
        client.close()


def install(app: Celery) -> None:
    """The worker's transport and consumer for ``app``; before the app makes its first connection."""
    if "amqp" in app.__dict__:
        raise RuntimeError("install the dead-letter transport before the app connects")
    app.amqp_cls = WorkerAMQP
    app.conf.worker_consumer = f"{__name__}:Consumer"
