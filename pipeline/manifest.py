"""The per-batch manifest: one JSON line per job (client id, status, duration, object, error), and
the file names ``synth fetch`` gives the audio (one per job, however alike the client ids)."""

from __future__ import annotations

import json
from collections.abc import Iterable

from sqlalchemy.orm import Session

from pipeline.db import jobs as db
from pipeline.db.models import Batch
from pipeline.storage import ObjectStore
from pipeline.storage.base import manifest_key, safe_name


def job_audio_path(job_id: str) -> str:
    """The API's route for a job's audio: what API manifests and webhooks give out, never a
    location inside the store."""
    return f"/v1/jobs/{job_id}/audio"


def manifest_lines(session: Session, store: ObjectStore, batch_id: str) -> list[dict]:
    """``url``: the API route for an API batch, else the store's URL (S3), else None (a local folder)."""
    batch = session.get(Batch, batch_id)
    api = batch is not None and batch.owner_key_id is not None
    lines = []
    for job, metrics in db.jobs_with_metrics(session, batch_id):
        url = None
        if job.object_key:
            url = job_audio_path(job.id) if api else store.url(job.object_key)
        lines.append(
            {
                "client_id": job.client_id,
                "line": job.line_no,
                "status": job.status.value,
                "duration_s": round(metrics.audio_s, 3) if metrics and metrics.audio_s else None,
                "object_key": job.object_key,
                "url": url,
                "error": job.error if job.status.value == "failed" else None,
                "attempts": job.attempts,
                # Renders the audio took: more than one where a bad check had it rendered again.
                "renders": (metrics.renders or 1) if metrics and job.object_key else None,
                # The seed it was rendered with again (`synth rerender`); None: the engine's own.
                "seed": job.seed,
                "loudness_lufs": _rounded(metrics.loudness_lufs if metrics else None),
                "true_peak_dbtp": _rounded(metrics.true_peak_dbtp if metrics else None),
                **_lexicon(job),
                **_verdict(metrics),
            }
        )
    return lines


def _lexicon(job) -> dict:
    """The lexicon version the job rendered with, where it had one."""
    return {"lexicon_id": job.lexicon_id, "lexicon_version": job.lexicon_version} if job.lexicon_id else {}


def _verdict(metrics) -> dict:
    """The check of the job's audio against its text, where it was checked (pipeline/verify)."""
    if metrics is None or metrics.verdict is None:
        return {"verdict": None}
    found = (metrics.extra or {}).get("verify") or {}
    return {
        "verdict": metrics.verdict,
        "verdict_reasons": found.get("reasons") or [],
        "wer": (found.get("scores") or {}).get("wer"),
        "cer": (found.get("scores") or {}).get("cer"),
        "captions": found.get("captions", False),
    }


def _rounded(value: float | None) -> float | None:
    return round(value, 2) if value is not None else None


def write_manifest(session: Session, store: ObjectStore, batch_id: str) -> str:
    key = manifest_key(batch_id)
    body = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in manifest_lines(session, store, batch_id))
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


def file_names(client_ids: Iterable[str], extensions: Iterable[str]) -> list[str]:
    """A local file name per job, in the order given: the client id's safe name, and where that is
    taken already (``a/b`` and ``a_b``, or ``A`` and ``a`` on a case-insensitive disk) a ``-2``,
    ``-3`` ... suffix. The same manifest always gives the same names."""
    taken: set[str] = set()
    names = []
    for client_id, ext in zip(client_ids, extensions, strict=True):
        base = safe_name(client_id)
        name, n = f"{base}.{ext}", 1
        while name.casefold() in taken:
            n += 1
            name = f"{base}-{n}.{ext}"
        taken.add(name.casefold())
        names.append(name)
    return names
