"""Documents: upload a Markdown, plain-text or EPUB file; it is rendered as one batch and, once its
jobs are done, assembled on the workers (worker/documents.py) into one file with chapters, a file
per chapter and chapters.json. Get, cancel and delete as batches.

A document is its batch (kind "document") plus its outline in the store: the document's id is
the batch's, so /v1/batches/{id}, its items, retry and the batch webhooks serve it unchanged."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePath
from urllib.parse import quote
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, File, Form, HTTPException, UploadFile
from fastapi.responses import JSONResponse, RedirectResponse, Response
from pydantic import BeforeValidator

from api import creating, idempotency
from api.deps import CurrentKey, KeyFirstRoute, Responses, Session, State
from api.ids import could_exist
from api.routes.batches import IdempotencyKey, _digits, check_form, one_file
from api.schemas import (
    URL_PATTERN,
    CancelOut,
    ChapterOut,
    DeleteOut,
    DocumentOut,
    Priority,
    RerenderedChapter,
    RerenderIn,
    RerenderOut,
    WebhookEvent,
)
from api.views import batch_out
from pipeline import lifecycle, usage
from pipeline.db import owned
from pipeline.db.models import Batch
from pipeline.documents import DOCUMENT_KINDS, kind_for, read_document, rerender
from pipeline.documents.batch import create_document_batch, load_outline, plan_outline
from pipeline.documents.plan import document_jobs
from pipeline.documents.stored import (
    CHAPTERS_FILE,
    DOCUMENT_KIND,
    assembled,
    chapter_progress,
    content_type,
    failure,
    file_key,
    ready_to_assemble,
)
from pipeline.submit import BatchOptions
from worker.documents import send_assembly
from worker.enqueue import send_messages

router = APIRouter(prefix="/v1/documents", tags=["documents"], route_class=KeyFirstRoute)
NOT_FOUND: Responses = {404: {"description": "no such document for this key"}}
MAX_COVER_BYTES = 10 * 1024 * 1024


def _own(session, key, document_id: str) -> Batch:
    batch = owned.get_batch(session, owner=key.id, batch_id=document_id) if could_exist(document_id) else None
    if batch is None or batch.kind != DOCUMENT_KIND:
        raise HTTPException(404, detail=f"document {document_id} not found")
    return batch


def _kind(filename: str, kind: str | None) -> str:
    if kind is not None:
        return kind
    suffix = PurePath(filename).suffix.lower()
    found = kind_for(filename) or ("text" if suffix == ".txt" else None)
    if found is None:
        raise HTTPException(
            400, detail=f"{filename!r}: name a .md, .txt or .epub file, or say its kind ({', '.join(DOCUMENT_KINDS)})"
        )
    return found


@router.post(
    "",
    status_code=201,
    response_model=DocumentOut,
    dependencies=[Depends(one_file)],
    responses={409: {"description": "Idempotency-Key reused"}},
)
def create_document(
    key: CurrentKey,
    state: State,
    session: Session,
    file: Annotated[UploadFile, File(description="Markdown (.md), plain text (.txt) or EPUB")],
    kind: Annotated[
        Literal["markdown", "text", "epub"] | None, Form(description="Default: from the file's extension")
    ] = None,
    title: Annotated[str | None, Form(min_length=1, max_length=200)] = None,
    author: Annotated[str | None, Form(min_length=1, max_length=200)] = None,
    format: Annotated[Literal["m4b", "mp3", "wav", "flac"], Form()] = "m4b",
    cover: Annotated[UploadFile | None, File(description="A JPEG or PNG for m4b and mp3")] = None,
    voice: Annotated[str | None, Form(max_length=64)] = None,
    sample_rate: Annotated[int | None, Form(), BeforeValidator(_digits)] = None,
    priority: Annotated[Priority, Form()] = "batch",
    name: Annotated[str | None, Form(max_length=200)] = None,
    webhook_url: Annotated[str | None, Form(max_length=2000, pattern=URL_PATTERN)] = None,
    webhook_events: Annotated[list[WebhookEvent] | None, Form()] = None,
    idempotency_key: IdempotencyKey = None,
) -> JSONResponse:
    """A document as one batch of paragraphs, assembled as ``format`` once its jobs are done."""
    source = (file.filename or "upload")[:200]
    check_form(webhook_url, webhook_events, source, title, author, voice, name)
    doc_kind = _kind(source, kind)
    data, cover_data = file.file.read(), _cover(cover)
    settings = state.settings
    doc = read_document(data, doc_kind, source=source, max_bytes=settings.max_document_bytes)
    outline = plan_outline(
        settings, doc, fmt=format, title=title, author=author, fallback_title=PurePath(source).stem or "document"
    )
    jobs = document_jobs(doc, settings.max_line_chars)
    if len(jobs) > settings.api_max_batch_items:
        raise HTTPException(400, detail=f"{len(jobs):,} jobs; the limit per batch is {settings.api_max_batch_items:,}")
    book = dict(kind=doc_kind, title=title, author=author, format=format)
    form = idempotency.canonical(
        **book,
        voice=voice,
        sample_rate=sample_rate,
        priority=priority,
        name=name,
        webhook_url=webhook_url,
        webhook_events=webhook_events,
    )
    claim = idempotency.make_claim(key.id, idempotency_key, "POST /v1/documents", form, data, cover_data or b"")
    options = BatchOptions(voice=voice, sample_rate=sample_rate, priority=priority, name=name or outline.title)
    columns = creating.owner_columns(
        state, key, kind=DOCUMENT_KIND, webhook_url=webhook_url, webhook_events=webhook_events
    )
    batch_id, created = _create(
        state,
        session,
        claim,
        key,
        sum(len(text) for _, text in jobs),
        lambda s: create_document_batch(
            s, state.store, settings, doc, outline, options, source=source, cover=cover_data, **columns
        ),
    )
    body = _document(state, session, session.get_one(Batch, batch_id)).model_dump(mode="json")
    return JSONResponse(body, status_code=201, headers={"Idempotent-Replayed": "false" if created else "true"})


def _cover(cover: UploadFile | None) -> bytes | None:
    data = cover.file.read(MAX_COVER_BYTES + 1) if cover is not None else None
    if data is not None and len(data) > MAX_COVER_BYTES:
        raise HTTPException(400, detail=f"the cover is over {MAX_COVER_BYTES:,} bytes")
    return data


def _create(state, session, claim, key, chars: int, build: Callable[[Any], Batch]) -> tuple[str, bool]:
    """``creating.create`` for a document: the stored files of one whose rows did not commit (the
    request failed after ``build`` wrote them) are withdrawn."""
    made: list[str] = []

    def noted(s) -> Batch:
        batch = build(s)
        made.append(batch.id)
        return batch

    try:
        return creating.create(state, session, claim, "batch", noted, key=key, chars=chars)
    except BaseException:
        _withdraw(state, made)
        raise


@router.get("/{document_id}", response_model=DocumentOut, responses=NOT_FOUND)
def get_document(document_id: str, key: CurrentKey, session: Session, state: State) -> DocumentOut:
    """Progress by chapter; once assembled, the links to the whole file, each chapter and chapters.json."""
    return _document(state, session, _own(session, key, document_id))


@router.get("/{document_id}/files/{name}", responses={**NOT_FOUND, 307: {"description": "to a presigned URL"}})
def get_file(
    document_id: str, name: str, key: CurrentKey, session: Session, state: State, redirect: bool = True
) -> Response:
    """One file of the assembled document: a 307 to a short-lived presigned URL on S3, else (or
    with redirect=false) the bytes."""
    batch = _own(session, key, document_id)
    found = assembled(state.store, batch.id)
    if found is None or name not in found["files"]:
        raise HTTPException(
            404, detail=f"document {batch.id} has no file {name!r}" + ("" if found else " (it is not assembled yet)")
        )
    if redirect:
        url = state.store.presigned_url(file_key(batch.id, name), state.settings.presign_seconds)
        if url:
            return RedirectResponse(url, status_code=307)
    return Response(state.store.get(file_key(batch.id, name)), media_type=content_type(name))


@router.post(
    "/{document_id}/assemble",
    status_code=202,
    responses={**NOT_FOUND, 409: {"description": "jobs not all done, or already assembled"}},
)
def assemble_document(document_id: str, key: CurrentKey, session: Session, state: State) -> dict:
    """Send the document's assembly to the workers again: for one whose message was lost (the
    broker was away when its last job finished). Assembly is idempotent."""
    batch = _own(session, key, document_id)
    if assembled(state.store, batch.id) is not None:
        raise HTTPException(409, detail=f"document {batch.id} is assembled already")
    if not ready_to_assemble(session, [batch.id]):
        raise HTTPException(409, detail=f"document {batch.id} has jobs not done; it is assembled once they are")
    send_assembly(state.celery, [batch.id])
    return {"queued": True}


@router.post(
    "/{document_id}/rerender",
    status_code=202,
    response_model=RerenderOut,
    responses={
        **NOT_FOUND,
        400: {"description": "a chapter the document does not have"},
        409: {"description": "the document is still rendering or being assembled, or was cancelled"},
    },
)
def rerender_document(
    document_id: str, body: RerenderIn, key: CurrentKey, session: Session, state: State
) -> RerenderOut:
    """Render chapters again, each with a new seed, through the queue as any job; once they are
    done the document is assembled again (its other chapters' files the same bytes) and
    document.finished goes out again. The chapters' characters count against the key's quota."""
    batch = _own(session, key, document_id)
    try:
        planned = rerender.plan(session, state.store, batch.id, body.chapters)
        usage.check_submission(session, key, sum(planned.chars.values()))
        queued = rerender.queue(session, state.store, planned)
    except rerender.DocumentBusyError as e:
        raise HTTPException(409, detail=str(e)) from e
    session.commit()
    send_messages(state.celery, planned.by_queue(), state.settings.jobs_per_task)
    return RerenderOut(
        id=batch.id,
        queued=queued,
        chapters=[
            RerenderedChapter(number=n, title=planned.titles[n], jobs=len(ids), seed=planned.seeds[n])
            for n, ids in sorted(planned.jobs.items())
        ],
    )


@router.post("/{document_id}/cancel", response_model=CancelOut, responses=NOT_FOUND)
def cancel_document(document_id: str, key: CurrentKey, session: Session, state: State) -> CancelOut:
    """Queued jobs are cancelled, running ones finish; a cancelled document is never assembled."""
    batch = _own(session, key, document_id)
    cancelled = lifecycle.cancel(session, state.store, batch.id)
    session.commit()
    return CancelOut(cancelled=cancelled)


@router.delete(
    "/{document_id}", response_model=DeleteOut, responses={**NOT_FOUND, 409: {"description": "jobs still running"}}
)
def delete_document(document_id: str, key: CurrentKey, session: Session, state: State) -> DeleteOut:
    """Remove the document's audio, assembled files, outline and rows. Refused (409) while a job runs."""
    batch = _own(session, key, document_id)
    try:
        removed = lifecycle.delete(session, state.store, batch.id, live=state.redis)
    except lifecycle.BatchBusyError as e:
        session.commit()
        raise HTTPException(409, detail=str(e)) from e
    session.commit()
    return DeleteOut(deleted=True, objects_removed=removed)


def _withdraw(state, batch_ids: list[str]) -> None:
    """The outline and cover of a batch that was never committed (or was discarded when its
    messages could not be sent): nothing half-written is left in the store."""
    with state.sessions() as session:
        gone = [batch_id for batch_id in batch_ids if session.get(Batch, batch_id) is None]
    for batch_id in gone:
        for key in state.store.list(f"batches/{batch_id}/"):
            state.store.delete(key)


def _document(state, session, batch: Batch) -> DocumentOut:
    outline = load_outline(state.store, batch.id)
    out = batch_out(session, batch)
    found = assembled(state.store, batch.id)
    error = None if found else failure(state.store, batch.id)
    base = f"/v1/documents/{batch.id}/files/"
    status: Literal["queued", "running", "assembling", "finished", "failed", "cancelled"]
    if out.status != "finished":
        status = out.status
    elif out.counts.get("failed") or out.counts.get("cancelled"):
        status = "failed"
    else:
        status = "finished" if found else "failed" if error else "assembling"
    marks = {m["title"] + str(i): m for i, m in enumerate((found or {}).get("chapters", []), start=1)}
    chapters = []
    for c in chapter_progress(session, batch.id, outline.chapters):
        mark = marks.get(c["title"] + str(c["number"]))
        chapters.append(
            ChapterOut(
                **c,
                file_url=base + quote(mark["file"]) if mark else None,
                start_s=round(mark["start"], 3) if mark else None,
            )
        )
    return DocumentOut(
        id=batch.id,
        status=status,
        title=outline.title,
        author=outline.author,
        format=outline.format,
        progress=out.progress,
        chapters=chapters,
        skipped_chapters=outline.skipped,
        duration_s=round(found["duration_s"], 3) if found else None,
        file_url=base + quote(found["file"]) if found else None,
        chapters_url=base + CHAPTERS_FILE if found else None,
        files=found["files"] if found else [],
        error=error,
        batch=out,
    )
