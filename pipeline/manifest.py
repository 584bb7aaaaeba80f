"""The per-batch manifest: one JSON line per job (client id, status, duration, object, error)."""

from __future__ import annotations

import json

from sqlalchemy.orm import Session

from pipeline.db import jobs as db
from pipeline.db.models import Batch
from pipeline.storage import ObjectStore
from pipeline.storage.base import manifest_key


def manifest_lines(session: Session, store: ObjectStore, batch_id: str) -> list[dict]:
    lines = []
    for job, metrics in db.jobs_with_metrics(session, batch_id):
        lines.append({
            "client_id": job.client_id,
            "line": job.line_no,
            "status": job.status.value,
            "duration_s": round(metrics.audio_s, 3) if metrics and metrics.audio_s else None,
            "object_key": job.object_key,
            "url": store.url(job.object_key) if job.object_key else None,
            "error": job.error if job.status.value == "failed" else None,
            "attempts": job.attempts,
        })
    return lines


def write_manifest(session: Session, store: ObjectStore, batch_id: str) -> str:
    key = manifest_key(batch_id)
    body = "".join(json.dumps(line, ensure_ascii=False) + "\n"
                   for line in manifest_lines(session, store, batch_id))
    store.put(key, body.encode("utf-8"), "application/x-ndjson")
    return key


def close_if_finished(session: Session, store: ObjectStore, batch_id: str, *, rewrite: bool = True) -> bool:
    """Write the manifest of a batch whose jobs are all finished and mark it closed; the caller
    commits. ``rewrite=False`` leaves a batch that is already closed alone. A batch that no longer
    exists (withdrawn, deleted) gets nothing. Returns whether it was closed now."""
    batch = session.get(Batch, batch_id)
    if batch is None or (batch.finished_at is not None and not rewrite):
        return False
    if not db.batch_finished(session, batch_id):
        return False
    db.close_batch(session, batch_id, write_manifest(session, store, batch_id))
    return True
