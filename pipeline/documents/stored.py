"""A document assembled into the store, as the workers do it for a document submitted through the
API: the same files `synth assemble` writes to a folder (pipeline/documents/assemble.py), under
the batch's prefix, so that deleting or expiring the batch removes them with its audio.

Each object is written whole (the store's put is atomic: a rename on disk, one PUT on S3), and
chapters.json, the list of the others, goes last: while it is absent the document reads as being
assembled, and a run killed before it is run again from the start, writing the same objects
(assembly is deterministic: ffmpeg is run with +bitexact). Once it is present, a second run
(a redelivered message) finds it and writes nothing. The assembly after a chapter is rendered
again writes only the files whose bytes changed (files.sha256.json beside them): that chapter's,
the whole file and the listings, not the chapters it left alone.
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
import tempfile
from collections import Counter
from datetime import datetime
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from pipeline.db.models import Batch, Job, JobStatus
from pipeline.documents.batch import assemble_batch
from pipeline.documents.plan import place_of
from pipeline.storage import ObjectStore

DOCUMENT_KIND = "document"  # Batch.kind of a document submitted through the API
CHAPTERS_FILE = "chapters.json"
_TYPES = {
    ".m4b": "audio/mp4",
    ".m4a": "audio/mp4",
    ".mp3": "audio/mpeg",
    ".wav": "audio/wav",
    ".flac": "audio/flac",
    ".json": "application/json",
    ".srt": "application/x-subrip",
    ".vtt": "text/vtt",
}


def files_prefix(batch_id: str) -> str:
    return f"batches/{batch_id}/document/files/"


def file_key(batch_id: str, name: str) -> str:
    return files_prefix(batch_id) + name


def content_type(name: str) -> str:
    suffix = Path(name).suffix.lower()
    return _TYPES.get(suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"


def digests_key(batch_id: str) -> str:
    """The sha256 of each file the last assembly stored: the next one (after a chapter is rendered
    again) writes only the files that changed."""
    return f"batches/{batch_id}/document/files.sha256.json"


def error_key(batch_id: str) -> str:
    return f"batches/{batch_id}/document/assembly-error.txt"


def record_failure(store: ObjectStore, batch_id: str, error: str) -> None:
    """Why the assembly could not be made (a chapter with no audio, ffmpeg refusing): shown by
    GET /v1/documents/{id} instead of an assembly that never ends; the next success removes it."""
    store.put(error_key(batch_id), error.encode(), "text/plain; charset=utf-8")


def failure(store: ObjectStore, batch_id: str) -> str | None:
    key = error_key(batch_id)
    return store.get(key).decode(errors="replace") if store.exists(key) else None


def assembled(store: ObjectStore, batch_id: str) -> dict | None:
    """The document's chapters.json (title, file, duration, chapters with their files) plus
    ``files``, every name stored; None until its assembly has finished."""
    key = file_key(batch_id, CHAPTERS_FILE)
    if not store.exists(key):
        return None
    return json.loads(store.get(key))


def assemble_to_store(session: Session, store: ObjectStore, batch_id: str) -> tuple[dict, bool]:
    """(chapters.json with ``files``, whether this call wrote it). Raises PermanentError while a
    job is not done (pipeline/documents/batch.py)."""
    found = assembled(store, batch_id)
    if found is not None:
        return found, False
    with tempfile.TemporaryDirectory(prefix="synth-document-") as tmp:
        output = Path(tmp)
        assemble_batch(session, store, batch_id, output)
        names = sorted(p.name for p in output.iterdir() if p.is_file() and p.name != CHAPTERS_FILE)
        before = _digests(store, batch_id)
        if before:  # a run killed while it writes leaves no digests: the next writes every file
            store.delete(digests_key(batch_id))
        digests = {name: _sha256(output / name) for name in names}
        for name in names:
            key = file_key(batch_id, name)
            if before.get(name) == digests[name] and store.exists(key):
                continue  # a chapter a rerender left alone: the same bytes, stored already
            store.put_file(key, output / name, content_type(name))
        store.put(digests_key(batch_id), json.dumps(digests, indent=1).encode(), "application/json")
        body = json.loads((output / CHAPTERS_FILE).read_text(encoding="utf-8"))
    body["files"] = [*names, CHAPTERS_FILE]
    store.put(
        file_key(batch_id, CHAPTERS_FILE), json.dumps(body, ensure_ascii=False, indent=1).encode(), "application/json"
    )
    if store.exists(error_key(batch_id)):
        store.delete(error_key(batch_id))
    return body, True


def _digests(store: ObjectStore, batch_id: str) -> dict[str, str]:
    key = digests_key(batch_id)
    if not store.exists(key):
        return {}
    try:
        found = json.loads(store.get(key))
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def ready_to_assemble(session: Session, batch_ids: list[str]) -> list[str]:
    """Of these batches, the API's documents whose jobs are all done (none failed, none cancelled,
    the batch not cancelled): those a worker assembles. A document with a failed job waits for
    its retry (POST /v1/batches/{id}/retry), which brings it back here once it is done."""
    if not batch_ids:
        return []
    documents = session.scalars(
        select(Batch.id).where(Batch.id.in_(batch_ids), Batch.kind == DOCUMENT_KIND, Batch.cancelled_at.is_(None))
    ).all()
    ready = []
    for batch_id in documents:
        not_done = session.scalar(select(Job.id).where(Job.batch_id == batch_id, Job.status != JobStatus.DONE).limit(1))
        if not_done is None:
            ready.append(batch_id)
    return ready


def chapters_done(session: Session, jobs: list[tuple[str, str]]) -> list[tuple[str, int]]:
    """Of the chapters these jobs (batch id, client id) are in, those of the API's documents (not
    cancelled) whose jobs are all done: each is encoded into the chapter cache while the rest of
    its document renders (pipeline/documents/cache.py)."""
    placed = {(batch_id, place.chapter) for batch_id, place in ((b, place_of(c)) for b, c in jobs) if place}
    if not placed:
        return []
    documents = set(
        session.scalars(
            select(Batch.id).where(
                Batch.id.in_({b for b, _ in placed}), Batch.kind == DOCUMENT_KIND, Batch.cancelled_at.is_(None)
            )
        )
    )
    done = []
    for batch_id, n in sorted(placed):
        if batch_id not in documents:
            continue
        open_job = session.scalar(
            select(Job.id)
            .where(Job.batch_id == batch_id, Job.client_id.like(f"c{n:04d}-%"), Job.status != JobStatus.DONE)
            .limit(1)
        )
        if open_job is None:
            done.append((batch_id, n))
    return done


def unassembled(session: Session, store: ObjectStore, *, since: datetime) -> list[str]:
    """Documents whose batch closed since ``since``, all done, yet neither assembled nor failed:
    their assembly's message was lost (the broker away when their last job finished)."""
    closed = session.scalars(
        select(Batch.id).where(Batch.kind == DOCUMENT_KIND, Batch.finished_at >= since, Batch.cancelled_at.is_(None))
    ).all()
    return [
        batch_id
        for batch_id in ready_to_assemble(session, list(closed))
        if assembled(store, batch_id) is None and failure(store, batch_id) is None
    ]


def chapter_progress(session: Session, batch_id: str, titles: list[str]) -> list[dict]:
    """Per chapter: its title, jobs, and how many are done and failed."""
    total: Counter[int] = Counter()
    done: Counter[int] = Counter()
    failed: Counter[int] = Counter()
    for client_id, status in session.execute(select(Job.client_id, Job.status).where(Job.batch_id == batch_id)):
        place = place_of(client_id)
        if place is None:
            continue
        total[place.chapter] += 1
        done[place.chapter] += status == JobStatus.DONE
        failed[place.chapter] += status == JobStatus.FAILED
    return [
        {"number": n, "title": title, "jobs": total[n], "done": done[n], "failed": failed[n]}
        for n, title in enumerate(titles, start=1)
    ]
