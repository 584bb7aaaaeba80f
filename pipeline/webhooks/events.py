"""Webhook events: their types, deterministic ids, who gets them, and their JSON bodies.

Event ids are derived from (type, resource id), so the same state change always has the same id:
the database stores it once (a unique constraint), and the receiver sees one webhook-id on every
retry of it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime

JOB_FINISHED = "job.finished"
JOB_FAILED = "job.failed"
BATCH_FINISHED = "batch.finished"
DOCUMENT_FINISHED = "document.finished"
EVENT_TYPES = (JOB_FINISHED, JOB_FAILED, BATCH_FINISHED, DOCUMENT_FINISHED)


def event_id(event_type: str, resource_id: str) -> str:
    """ "msg_" and 32 hex digits of sha256(type:resource): stable, unguessable enough, no '.'."""
    return "msg_" + hashlib.sha256(f"{event_type}:{resource_id}".encode()).hexdigest()[:32]


def check_events(events: Sequence[str] | None) -> list[str] | None:
    """Validate a client's event list (None means every event); raise ValueError naming the bad one."""
    if events is None:
        return None
    unknown = [e for e in events if e not in EVENT_TYPES]
    if unknown:
        raise ValueError(f"unknown webhook event {unknown[0]!r}; choose from {', '.join(EVENT_TYPES)}")
    return list(dict.fromkeys(events))


def wants(events: Sequence[str] | None, event_type: str) -> bool:
    """A subscription of None wants every event; a list wants the events it names."""
    return events is None or event_type in events


def job_target(
    job_url: str | None,
    job_events: Sequence[str] | None,
    batch_url: str | None,
    batch_events: Sequence[str] | None,
    event_type: str,
) -> str | None:
    """Where a job event goes: the job's own webhook if it has one, else its batch's; None: nowhere."""
    if job_url:
        return job_url if wants(job_events, event_type) else None
    if batch_url and wants(batch_events, event_type):
        return batch_url
    return None


def job_payload(
    *,
    event_type: str,
    at: datetime,
    batch_id: str,
    job_id: str,
    client_id: str,
    status: str,
    error: str | None,
    object_key: str | None,
    audio_url: str | None,
    audio_seconds: float | None,
    verdict: str | None = None,
) -> dict:
    return {
        "type": event_type,
        "timestamp": _iso(at),
        "data": {
            "batch_id": batch_id,
            "job_id": job_id,
            "client_id": client_id,
            "status": status,
            "error": error,
            "object_key": object_key,
            "audio_url": audio_url,
            "audio_seconds": None if audio_seconds is None else round(audio_seconds, 3),
            "verdict": verdict,
        },
    }


def batch_payload(
    *,
    at: datetime,
    batch_id: str,
    name: str | None,
    counts: dict[str, int],
    audio_seconds: float,
    manifest_key: str | None,
    cancelled: bool = False,
) -> dict:
    total = sum(counts.values())
    if cancelled:
        status = "cancelled"
    else:
        status = "finished" if counts.get("failed", 0) == 0 else "finished_with_failures"
    return {
        "type": BATCH_FINISHED,
        "timestamp": _iso(at),
        "data": {
            "batch_id": batch_id,
            "name": name,
            "status": status,
            "error": None,
            "counts": {"total": total, **counts},
            "audio_seconds": round(audio_seconds, 3),
            "manifest_key": manifest_key,
        },
    }


def document_payload(
    *, at: datetime, document_id: str, title: str, format: str, duration_s: float, files: list[str]
) -> dict:
    """A document assembled: its files are listed by name; GET /v1/documents/{id}/files/{name}
    serves each (their store keys are no business of the receiver's)."""
    return {
        "type": DOCUMENT_FINISHED,
        "timestamp": _iso(at),
        "data": {
            "document_id": document_id,
            "batch_id": document_id,
            "title": title,
            "format": format,
            "duration_s": round(duration_s, 3),
            "files": files,
            "files_url": f"/v1/documents/{document_id}",
        },
    }


def encode(payload: dict) -> str:
    """The body exactly as it is sent and signed: compact JSON, keys sorted."""
    return json.dumps(payload, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")
