"""Pronunciation lexicons: create, list, show, change entries (each change a new version), import
and export (PLS or the ``word = says`` text form), delete, and re-render a batch's jobs that a
change touches. Every route is scoped to the caller's key: another key's lexicon is a 404."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from api.deps import CurrentKey, KeyFirstRoute, Responses, Session, State
from api.schemas import MAX_VERSION
from pipeline.db.models import as_utc
from pipeline.db.models_lexicons import Lexicon
from pipeline.errors import InputError
from pipeline.lexicon import formats, rerender
from pipeline.lexicon import store as lexicons
from pipeline.lexicon.entries import MAX_SAYS_CHARS, MAX_WRITTEN_CHARS, Entry
from worker.enqueue import send_messages

router = APIRouter(prefix="/v1/lexicons", tags=["lexicons"], route_class=KeyFirstRoute)
NOT_FOUND: Responses = {404: {"description": "no such lexicon (or batch) for this key"}}
REFUSED: Responses = {
    **NOT_FOUND,
    400: {"description": "an entry, file, name or version that is refused, with the reason"},
}
# Checked by the entry rules (pipeline/lexicon/entries.py) with a clear 400; these bounds only keep
# a request from carrying megabytes into them.
_WRITTEN = Field(max_length=MAX_WRITTEN_CHARS * 50)
_SAYS = Field(None, max_length=MAX_SAYS_CHARS * 20)


class StrictIn(BaseModel):
    """Read strictly, as every JSON body is (api/schemas.py): "case_sensitive": "yes" is a 422, not
    a guess, and a misspelt field ("says") is named rather than dropped. A NUL or another control
    character is left to the entry and name rules, which answer 400 with the reason."""

    model_config = ConfigDict(strict=True, extra="forbid")


class EntryIn(StrictIn):
    written: str = _WRITTEN
    alias: str | None = _SAYS
    phoneme: str | None = Field(
        None,
        max_length=MAX_SAYS_CHARS * 20,
        description="IPA; for engines that take phonemes (Piper), refused on others",
    )
    case_sensitive: bool = False
    pattern: bool = Field(False, description="`written` is a pattern: * any letters, ? one letter")

    def entry(self) -> Entry:
        return Entry(self.written, self.alias, self.phoneme, self.case_sensitive, self.pattern)


class LexiconCreate(StrictIn):
    name: str = Field(min_length=1, max_length=100, description="`default` is used by every new job of yours")
    entries: list[EntryIn] = Field(default_factory=list)


class EntriesChange(StrictIn):
    add: list[EntryIn] = Field(default_factory=list)
    remove: list[str] = Field(default_factory=list, description="written forms to remove (any case)")


class LexiconOut(BaseModel):
    id: str
    name: str
    version: int = Field(description="The latest version; every change makes a new one")
    entry_count: int
    created_at: datetime
    updated_at: datetime


class LexiconDetail(LexiconOut):
    shown_version: int
    entries: list[EntryIn]


class LexiconList(BaseModel):
    data: list[LexiconOut]


class ApplyIn(StrictIn):
    batch_id: str = Field(min_length=1, max_length=64)


class ApplyOut(BaseModel):
    lexicon_version: int
    rerendered: int = Field(
        description="jobs queued again: those whose text an entry changed since their version touches"
    )
    untouched: int


def _out(lexicon: Lexicon) -> LexiconOut:
    return LexiconOut(
        id=lexicon.id,
        name=lexicon.name,
        version=lexicon.version,
        entry_count=lexicon.entry_count,
        created_at=as_utc(lexicon.created_at),
        updated_at=as_utc(lexicon.updated_at),
    )


def _entries_in(entries: list[Entry]) -> list[EntryIn]:
    return [EntryIn(**e.to_dict()) for e in entries]


@router.post("", status_code=201, response_model=LexiconOut, responses=REFUSED)
def create_lexicon(body: LexiconCreate, key: CurrentKey, state: State, session: Session) -> LexiconOut:
    """A new lexicon at version 1 (400 for a name in use, or any bad entry: nothing is written)."""
    lexicon = lexicons.create(
        session,
        lexicons.checker_for(state.settings.engine_settings()),
        owner=key.id,
        name=body.name,
        entries=[e.entry() for e in body.entries],
    )
    session.commit()
    return _out(lexicon)


@router.get("", response_model=LexiconList)
def list_lexicons(key: CurrentKey, session: Session) -> LexiconList:
    return LexiconList(data=[_out(x) for x in lexicons.list_for(session, owner=key.id)])


@router.get("/{ref}", response_model=LexiconDetail, responses=REFUSED)
def get_lexicon(
    ref: str, key: CurrentKey, session: Session, version: Annotated[int | None, Query(ge=1, le=MAX_VERSION)] = None
) -> LexiconDetail:
    """The lexicon (by id or name) with its entries at ``version`` (default: the latest)."""
    lexicon = lexicons.find(session, owner=key.id, ref=ref)
    pin = lexicons.pin(session, owner=key.id, ref=lexicon.id, version=version)
    entries = lexicons.entries_at(session, lexicon.id, pin.version)
    return LexiconDetail(**_out(lexicon).model_dump(), shown_version=pin.version, entries=_entries_in(entries))


@router.post("/{ref}/entries", response_model=LexiconOut, responses=REFUSED)
def change_entries(ref: str, body: EntriesChange, key: CurrentKey, state: State, session: Session) -> LexiconOut:
    """Add entries (an entry with the same written form and case rule is replaced) and remove
    others, as one new version; all checked first, nothing half-applied. No change, no version."""
    lexicon = lexicons.find(session, owner=key.id, ref=ref)
    lexicons.change(
        session,
        lexicons.checker_for(state.settings.engine_settings()),
        lexicon,
        added=[e.entry() for e in body.add],
        removed=body.remove,
    )
    session.commit()
    return _out(lexicon)


@router.post(
    "/{ref}/import",
    response_model=LexiconOut,
    responses=REFUSED,
    openapi_extra={
        "requestBody": {
            "content": {
                "application/pls+xml": {"schema": {"type": "string"}},
                "text/plain": {"schema": {"type": "string"}},
            }
        }
    },
)
async def import_entries(
    ref: str, request: Request, key: CurrentKey, state: State, session: Session, replace: bool = False
) -> LexiconOut:
    """A PLS document or ``word = says`` lines as the body: its entries are added (``replace``:
    they become the whole lexicon) as one new version. The lexicon is created if it does not exist."""
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        # a form upload would be read as text and fail on its boundary line, naming no cause
        raise InputError(
            "send the lexicon file as the request body (curl --data-binary @names.pls), not as a multipart form"
        )
    data = await request.body()
    # parsing a file and writing a version is blocking work: off the event loop
    return await run_in_threadpool(_import, data, ref, key.id, state, session, replace)


def _import(data: bytes, ref: str, owner: str, state, session, replace: bool) -> LexiconOut:
    lexicon = lexicons.find_or_new(session, owner=owner, ref=ref)  # another key's id: 404 before the body
    entries = formats.parse(data)
    checker = lexicons.checker_for(state.settings.engine_settings())
    if lexicon is None:
        lexicon = lexicons.create(session, checker, owner=owner, name=ref, entries=entries)
    else:
        lexicons.change(session, checker, lexicon, added=entries, replace=replace)
    session.commit()
    return _out(lexicon)


@router.get("/{ref}/export", responses={**REFUSED, 200: {"content": {"application/pls+xml": {}, "text/plain": {}}}})
def export_entries(
    ref: str,
    key: CurrentKey,
    session: Session,
    format: Literal["pls", "text"] = "pls",
    version: Annotated[int | None, Query(ge=1, le=MAX_VERSION)] = None,
) -> Response:
    lexicon = lexicons.find(session, owner=key.id, ref=ref)
    pin = lexicons.pin(session, owner=key.id, ref=lexicon.id, version=version)
    entries = lexicons.entries_at(session, lexicon.id, pin.version)
    if format == "pls":
        return Response(formats.to_pls(entries), media_type="application/pls+xml")
    return Response(formats.to_text(entries), media_type="text/plain; charset=utf-8")


@router.delete("/{ref}", status_code=204, responses=NOT_FOUND)
def delete_lexicon(ref: str, key: CurrentKey, session: Session) -> Response:
    """Remove the lexicon and all its versions. Jobs still to render with it fail with that reason."""
    lexicons.delete(session, lexicons.find(session, owner=key.id, ref=ref))
    session.commit()
    return Response(status_code=204)


@router.post("/{ref}/apply", response_model=ApplyOut, responses=REFUSED)
def apply_lexicon(ref: str, body: ApplyIn, key: CurrentKey, state: State, session: Session) -> ApplyOut:
    """Re-render, with the lexicon's latest version, the finished jobs of one of your batches whose
    text an entry changed since their version touches; the others and their audio stay as they are."""
    lexicon = lexicons.find(session, owner=key.id, ref=ref)
    plan = rerender.plan(session, state.store, lexicon, owner=key.id, batch_id=body.batch_id)
    session.commit()
    send_messages(state.celery, plan.by_queue, state.settings.jobs_per_task)
    return ApplyOut(lexicon_version=lexicon.version, rerendered=plan.rerendered, untouched=plan.untouched)
