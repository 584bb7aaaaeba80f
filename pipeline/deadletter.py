"""The dead-letter list: messages a worker took off a queue but could not act on.

A message that is not JSON, not a message envelope, names no task the worker knows, or carries
arguments the task cannot take (a render message whose job ids are not strings, or name no job)
would otherwise kill the worker that reads it, and every worker after it, since it stays first on
its queue. The worker moves it here instead, logs it once, and goes on (worker/deadletter.py).

``DEADLETTER`` is a Redis list of JSON entries, newest first: the queue, the reason, when, and the
message as it was read (``message``, text; ``message_b64`` where its bytes are not UTF-8). Nothing
reads it back automatically: an operator looks (``LRANGE synth.deadletter 0 9``), fixes the
producer, and deletes it (``DEL synth.deadletter``). `synth status` and the dashboard show its length.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Sequence

import redis
from sqlalchemy import select
from sqlalchemy.orm import Session

from pipeline.db.models import Job

log = logging.getLogger(__name__)

DEADLETTER = "synth.deadletter"
EXCERPT_CHARS = 200  # of a message, in the log line
MAX_JOB_IDS = 10_000  # a render message carries jobs_per_task ids; far more is not one of ours


def record(client: redis.Redis, *, queue: str | None, reason: str, message: bytes | str) -> None:
    """Put ``message`` on the dead-letter list and log it once, with its queue and an excerpt. A
    Redis error propagates: the caller then leaves the message where it was."""
    raw = message.encode() if isinstance(message, str) else bytes(message)
    entry: dict[str, object] = {"queue": queue, "reason": reason, "at": round(time.time(), 3)}
    try:
        entry["message"] = raw.decode("utf-8")
    except UnicodeDecodeError:
        entry["message_b64"] = base64.b64encode(raw).decode()
    client.lpush(DEADLETTER, json.dumps(entry))
    log.error("dead-lettered a message from %s to %s: %s; it began %s", queue or "?", DEADLETTER, reason, excerpt(raw))


def excerpt(raw: bytes) -> str:
    text = raw[:EXCERPT_CHARS].decode("utf-8", errors="backslashreplace")
    return repr(text) + (" ..." if len(raw) > EXCERPT_CHARS else "")


def count(client: redis.Redis) -> int:
    return int(client.llen(DEADLETTER))


def bad_job_ids(job_ids) -> str | None:
    """Why ``job_ids``, a render message's argument, is not a list of job ids; None when it is."""
    if not isinstance(job_ids, list) or not job_ids:
        return f"the job ids are not a non-empty list but {type(job_ids).__name__}"
    if len(job_ids) > MAX_JOB_IDS:
        return f"{len(job_ids)} job ids in one message"
    strange = [j for j in job_ids if not isinstance(j, str) or not j or len(j) > 64]
    if strange:
        return f"{len(strange)} job ids are not job ids, e.g. {strange[0]!r:.60}"
    return None


def names_no_job(session: Session, job_ids: Sequence[str]) -> bool:
    """True when not one of ``job_ids`` is a job in this database: the message came from another
    deployment's producer, or its batch was deleted while it waited."""
    return session.scalar(select(Job.id).where(Job.id.in_(list(job_ids))).limit(1)) is None
