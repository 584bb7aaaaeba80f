"""The jobs that have a message in Redis, read as kombu's Redis transport keeps them: waiting in a
queue's list (one list per priority level), or delivered to a worker and not yet acked (the
``unacked`` hash, which also holds messages a worker keeps until their retry countdown ends).

The reconciler (pipeline/reconcile.py) re-enqueues only open jobs that no message names."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence

import redis

from pipeline.reports.fleet import PRIORITY_SUFFIXES

RENDER_TASK = "synth.render"  # the task worker/tasks.py registers
VERIFY_TASK = "synth.verify"  # worker/verify.py: check done jobs' audio against their text
RERENDER_TASK = "synth.rerender"  # worker/tasks.py: render a bad job again (pipeline/retake.py)
ASSEMBLE_TASK = "synth.assemble_document"  # worker/documents.py: a document API batch, once done
CHAPTER_TASK = "synth.encode_chapter"  # worker/documents.py: a chapter of one, once its jobs are done
UNACKED = "unacked"  # kombu's hash of delivered, unacked messages
_PAGE = 1000


def job_ids_in_messages(client: redis.Redis, queues: Sequence[str], task: str = RENDER_TASK) -> set[str]:
    """Every job id named by a ``task`` message (render, or verify) waiting in ``queues`` or held
    unacked by a worker. Lists first, then the hash: a message moves from a list to the hash, so it
    is seen in one."""
    ids: set[str] = set()
    for queue in queues:
        for suffix in PRIORITY_SUFFIXES:
            for raw in _list_items(client, queue + suffix):
                ids.update(_job_args(_loads(raw), task))
    for _tag, raw in client.hscan_iter(UNACKED, count=_PAGE):
        held = _loads(raw)
        if isinstance(held, list) and held:
            ids.update(_job_args(held[0], task))
    return ids


def _list_items(client: redis.Redis, key: str) -> Iterator[bytes | str]:
    start = 0
    while True:
        page = client.lrange(key, start, start + _PAGE - 1)
        yield from page
        if len(page) < _PAGE:
            return
        start += _PAGE


def _loads(raw: bytes | str):
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _job_args(message, task: str) -> list[str]:
    """The job ids of a ``task`` message, whose first argument is a list of job ids (protocol 2: a
    base64 JSON body [args, kwargs, embed])."""
    if not isinstance(message, dict) or message.get("headers", {}).get("task") != task:
        return []
    try:
        body = message["body"]
        if message.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args = json.loads(body)[0]
        return [str(job_id) for job_id in args[0]]
    except (KeyError, IndexError, TypeError, ValueError):
        return []
