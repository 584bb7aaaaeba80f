"""Batches: create (JSON items or an uploaded corpus), get, list, list items, cancel, retry, delete."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Depends, File, Form, Header, HTTPException, Query, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BeforeValidator

from api import creating, idempotency, pagination
from api.deps import CurrentKey, KeyFirstRoute, Responses, Session, State
from api.ids import could_exist
from api.schemas import (
    EVENTS_WITHOUT_URL,
    URL_PATTERN,
    BatchCreate,
    BatchOut,
    BatchPage,
    CancelOut,
    DeleteOut,
    JobPage,
    Priority,
    RetryOut,
    WebhookEvent,
)
from api.views import batch_out, job_out
from pipeline import lifecycle
from pipeline.corpus import parse_corpus
from pipeline.db import owned
from pipeline.db.models import Batch, Job, JobStatus
from pipeline.lexicon import store as lexicons
from pipeline.loudness import CEILING_RANGE, LOUDNESS_RANGE
from pipeline.submit import BatchOptions, Item, create_batch, create_item_batch
from worker.enqueue import send_messages

router = APIRouter(prefix="/v1/batches", tags=["batches"], route_class=KeyFirstRoute)
IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", description="Retry-safe creation")]
NOT_FOUND: Responses = {404: {"description": "no such batch for this key"}}
NO_LEXICON: Responses = {404: {"description": "no such lexicon for this key"}}


def _own(session, key, batch_id: str) -> Batch:
    batch = owned.get_batch(session, owner=key.id, batch_id=batch_id) if could_exist(batch_id) else None
    if batch is None:
        raise HTTPException(404, detail=f"batch {batch_id} not found")
    return batch


def _created(session, batch_id: str, created: bool) -> JSONResponse:
    body = batch_out(session, session.get(Batch, batch_id)).model_dump(mode="json")
    return JSONResponse(body, status_code=201, headers={"Idempotent-Replayed": "false" if created else "true"})


@router.post(
    "",
    status_code=201,
    response_model=BatchOut,
    responses={409: {"description": "Idempotency-Key reused"}, **NO_LEXICON},
)
def create_json_batch(
    body: BatchCreate, key: CurrentKey, state: State, session: Session, idempotency_key: IdempotencyKey = None
) -> JSONResponse:
    """A batch from JSON items; per-item voice, format and sample rate override the batch's."""
    limit = state.settings.api_max_batch_items
    if len(body.items) > limit:
        raise HTTPException(400, detail=f"{len(body.items):,} items; the limit per batch is {limit:,}")
    claim = idempotency.make_claim(key.id, idempotency_key, "POST /v1/batches", body.fingerprinted())
    items = [
        Item(text=i.text, client_id=i.client_id, voice=i.voice, format=i.format, sample_rate=i.sample_rate)
        for i in body.items
    ]
    options = BatchOptions(
        voice=body.voice,
        format=body.format,
        sample_rate=body.sample_rate,
        priority=body.priority,
        name=body.name,
        loudness=body.loudness_target,
        true_peak=body.true_peak_max,
        lexicon=lexicons.pin(session, owner=key.id, ref=body.lexicon, version=body.lexicon_version),
    )
    columns = creating.owner_columns(
        state, key, kind="batch", webhook_url=body.webhook_url, webhook_events=body.webhook_events
    )
    batch_id, created = creating.create(
        state,
        session,
        claim,
        "batch",
        lambda s: create_item_batch(s, state.settings, items, options, source="api", **columns),
        key=key,
        chars=sum(len(i.text) for i in items),
    )
    return _created(session, batch_id, created)


async def one_file(request: Request) -> None:
    """A second ``file`` part would be dropped without a word (the last one wins): refuse it."""
    form = await request.form()
    if len(form.getlist("file")) > 1:
        raise HTTPException(400, detail="send one file part: a batch is made from one file")


def check_form(webhook_url: str | None, webhook_events: list | None, *texts: str | None) -> None:
    """What a form's fields cannot check alone: webhook events need an address, and no field
    (``webhook_url`` or ``texts``: the others and the file's name) may hold a NUL character."""
    if webhook_events is not None and webhook_url is None:
        raise RequestValidationError(
            [
                {
                    "type": "value_error",
                    "loc": ("body", "webhook_events"),
                    "msg": EVENTS_WITHOUT_URL,
                    "input": webhook_events,
                }
            ]
        )
    if any("\x00" in v for v in (webhook_url, *texts) if v):
        raise HTTPException(400, detail="form fields and the file name must not contain NUL characters")


def _digits(value):
    """A form field is text, and an integer field's text is digits: "8000.0" or " 8000" is refused
    as a JSON body's 8000.5 or "8000" would be, not read as 8000."""
    if isinstance(value, str) and not re.fullmatch(r"[0-9]{1,9}", value):
        raise ValueError("must be a whole number, digits only")
    return value


@router.post(
    "/upload",
    status_code=201,
    response_model=BatchOut,
    dependencies=[Depends(one_file)],
    responses={409: {"description": "Idempotency-Key reused"}, **NO_LEXICON},
)
def upload_batch(
    key: CurrentKey,
    state: State,
    session: Session,
    file: Annotated[UploadFile, File(description="UTF-8 text, one item per non-empty line")],
    voice: Annotated[str | None, Form(max_length=64)] = None,
    format: Annotated[str | None, Form(max_length=8)] = None,
    sample_rate: Annotated[int | None, Form(), BeforeValidator(_digits)] = None,
    priority: Annotated[Priority, Form()] = "batch",
    name: Annotated[str | None, Form(max_length=200)] = None,
    loudness_target: Annotated[float | None, Form(ge=LOUDNESS_RANGE[0], le=LOUDNESS_RANGE[1])] = None,
    true_peak_max: Annotated[float | None, Form(ge=CEILING_RANGE[0], le=CEILING_RANGE[1])] = None,
    lexicon: Annotated[str | None, Form(min_length=1, max_length=100)] = None,
    lexicon_version: Annotated[int | None, Form(ge=1, le=999_999_999), BeforeValidator(_digits)] = None,
    webhook_url: Annotated[str | None, Form(max_length=2000, pattern=URL_PATTERN)] = None,
    webhook_events: Annotated[list[WebhookEvent] | None, Form()] = None,
    idempotency_key: IdempotencyKey = None,
) -> JSONResponse:
    """A batch from a corpus file: one job per non-empty line, client ids line-NNNNNN."""
    source = (file.filename or "upload")[:200]
    check_form(webhook_url, webhook_events, source, voice, format, name, lexicon)
    data = file.file.read()
    corpus = parse_corpus(data, source=source, max_line_chars=state.settings.max_line_chars)
    limit = state.settings.api_max_batch_items
    if len(corpus.lines) > limit:
        raise HTTPException(400, detail=f"{len(corpus.lines):,} lines; the limit per batch is {limit:,}")
    form = idempotency.canonical(
        voice=voice,
        format=format,
        sample_rate=sample_rate,
        priority=priority,
        name=name,
        webhook_url=webhook_url,
        webhook_events=webhook_events,
        loudness_target=loudness_target,
        true_peak_max=true_peak_max,
        **({"lexicon": lexicon, "lexicon_version": lexicon_version} if lexicon else {}),
    )
    claim = idempotency.make_claim(key.id, idempotency_key, "POST /v1/batches/upload", form, data)
    options = BatchOptions(
        voice=voice,
        format=format,
        sample_rate=sample_rate,
        priority=priority,
        name=name,
        loudness=loudness_target,
        true_peak=true_peak_max,
        lexicon=lexicons.pin(session, owner=key.id, ref=lexicon, version=lexicon_version),
    )
    columns = creating.owner_columns(state, key, kind="batch", webhook_url=webhook_url, webhook_events=webhook_events)
    batch_id, created = creating.create(
        state,
        session,
        claim,
        "batch",
        lambda s: create_batch(s, state.settings, corpus, options, source=source, **columns),
        key=key,
        chars=sum(len(text) for _, text in corpus.lines),
    )
    return _created(session, batch_id, created)


@router.get("", response_model=BatchPage)
def list_batches(
    key: CurrentKey, session: Session, cursor: str | None = None, limit: Annotated[int, Query(ge=1, le=200)] = 50
) -> BatchPage:
    """Your batches, newest first."""
    rows = owned.list_batches(session, owner=key.id, limit=limit + 1, after=pagination.decode_batch_cursor(cursor))
    page = rows[:limit]
    nxt = pagination.encode(page[-1].created_at, page[-1].id) if len(rows) > limit else None
    return BatchPage(data=[batch_out(session, b) for b in page], next_cursor=nxt)


@router.get("/{batch_id}", response_model=BatchOut, responses=NOT_FOUND)
def get_batch(batch_id: str, key: CurrentKey, session: Session) -> BatchOut:
    return batch_out(session, _own(session, key, batch_id))


@router.get("/{batch_id}/items", response_model=JobPage, responses=NOT_FOUND)
def list_items(
    batch_id: str,
    key: CurrentKey,
    session: Session,
    state: JobStatus | None = None,
    cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> JobPage:
    """The batch's jobs in item order, optionally one state only."""
    batch = _own(session, key, batch_id)
    after = pagination.decode_item_cursor(cursor)
    if after is not None and getattr(session.get(Job, after[1]), "batch_id", None) != batch.id:
        # Another batch's cursor would silently skip this batch's first lines.
        raise HTTPException(
            400, detail=f"this cursor belongs to another listing; pass a next_cursor of /v1/batches/{batch.id}/items"
        )
    rows = owned.list_items(session, batch_id=batch.id, limit=limit + 1, state=state, after=after)
    page = rows[:limit]
    nxt = pagination.encode(page[-1][0].line_no, page[-1][0].id) if len(rows) > limit else None
    return JobPage(data=[job_out(j, m) for j, m in page], next_cursor=nxt)


@router.post("/{batch_id}/cancel", response_model=CancelOut, responses=NOT_FOUND)
def cancel_batch(batch_id: str, key: CurrentKey, session: Session, state: State) -> CancelOut:
    """Queued jobs are cancelled; running ones finish; finished results are kept."""
    batch = _own(session, key, batch_id)
    cancelled = lifecycle.cancel(session, state.store, batch.id)
    session.commit()
    return CancelOut(cancelled=cancelled)


@router.post(
    "/{batch_id}/retry",
    response_model=RetryOut,
    responses={
        **NOT_FOUND,
        409: {"description": "no failed job to retry (matching reason), or the batch was cancelled"},
    },
)
def retry_batch(
    batch_id: str,
    key: CurrentKey,
    session: Session,
    state: State,
    reason: Annotated[
        str | None,
        Query(
            max_length=2000,
            pattern="^[^\x00]*$",
            description=("Retry only the failed jobs whose error contains this text"),
        ),
    ] = None,
) -> RetryOut:
    """Queue the batch's failed jobs again: same job ids and client ids, attempts counted on. The
    batch reopens and closes again, with a fresh manifest, at its last job."""
    batch = _own(session, key, batch_id)
    try:
        by_queue = lifecycle.retry(session, batch.id, reason=reason)
    except lifecycle.NothingToRetryError as e:
        raise HTTPException(409, detail=str(e)) from e
    session.commit()
    send_messages(state.celery, by_queue, state.settings.jobs_per_task)
    return RetryOut(retried=sum(len(ids) for ids in by_queue.values()))


@router.delete(
    "/{batch_id}", response_model=DeleteOut, responses={**NOT_FOUND, 409: {"description": "jobs still running"}}
)
def delete_batch(batch_id: str, key: CurrentKey, session: Session, state: State) -> DeleteOut:
    """Remove the batch's audio (stored files and live copies), manifest and rows. Refused (409) while
    a job is running. Its Idempotency-Keys answer 410 from then on."""
    batch = _own(session, key, batch_id)
    try:
        removed = lifecycle.delete(session, state.store, batch.id, live=state.redis)
    except lifecycle.BatchBusyError as e:
        session.commit()  # the queued jobs stay cancelled
        raise HTTPException(409, detail=str(e)) from e
    session.commit()
    return DeleteOut(deleted=True, objects_removed=removed)
