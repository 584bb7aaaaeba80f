"""A lexicon's change applied to a document of the API (pipeline/lexicon/rerender.py): the job it
touches goes back to the queue without its metrics or the render it offered for reuse, the
document's assembly is taken back, and the workers' next assembly writes the new chapter from the
new audio, the other chapters' files the same bytes, not written again. Refused while the document is being
assembled. Jobs are recorded done here as a worker records them (tests/test_documents_cache.py)."""

from __future__ import annotations

import hashlib

import pytest
from sqlalchemy import select

from pipeline import reuse
from pipeline.db.models import Batch, Job, JobMetrics, JobStatus, StoredRender
from pipeline.db.models_lexicons import LOCAL_OWNER
from pipeline.documents import read_document
from pipeline.documents.batch import create_document_batch, plan_outline
from pipeline.documents.plan import place_of
from pipeline.documents.rerender import DocumentBusyError
from pipeline.documents.stored import DOCUMENT_KIND, assemble_to_store, assembled, file_key, ready_to_assemble
from pipeline.lexicon import rerender
from pipeline.lexicon import store as lexicons
from pipeline.lexicon.entries import Entry
from pipeline.storage import make_store
from pipeline.submit import BatchOptions
from tests.documents import markdown_book
from tests.test_documents_cache import render

CHECK = lexicons.Checker("piper", lambda: None)


def files(store, batch_id: str) -> dict[str, str]:
    body = assembled(store, batch_id)
    assert body is not None
    return {name: hashlib.sha256(store.get(file_key(batch_id, name))).hexdigest() for name in body["files"]}


def test_a_change_applied_to_a_document_renders_its_chapter_again_and_assembles_it_again(settings, sessions):
    store = make_store(settings)
    doc = read_document(markdown_book().encode(), "markdown", source="voyage.md", max_bytes=10**6)
    outline = plan_outline(settings, doc, fmt="m4b", title=None, author=None, fallback_title="voyage")
    with sessions() as s:
        lexicons.create(s, CHECK, owner=LOCAL_OWNER, name="default", entries=[Entry("SQL", alias="sequel")])
        options = BatchOptions(lexicon=lexicons.pin(s, owner=LOCAL_OWNER, ref="default"))
        batch_id = create_document_batch(
            s, store, settings, doc, outline, options, source="voyage.md", kind=DOCUMENT_KIND
        ).id
        s.commit()
    render(sessions, store, batch_id, {1, 2, 3})
    with sessions() as s:
        for job in s.scalars(select(Job).where(Job.batch_id == batch_id)):
            reuse.remember(
                sessions, "", f"identity of {job.client_id}", job_id=job.id, object_key=job.object_key, metrics={}
            )
        lexicon = lexicons.find(s, owner=LOCAL_OWNER, ref="default")
        assert lexicons.change(s, CHECK, lexicon, added=[Entry("noon", alias="midday")])  # chapter 2's text
        s.commit()
        with pytest.raises(DocumentBusyError, match="being assembled"):  # its workers have it
            rerender.plan(s, store, lexicon, owner=LOCAL_OWNER, batch_id=batch_id)
        assemble_to_store(s, store, batch_id)
    before = files(store, batch_id)

    with sessions() as s:
        plan = rerender.plan(
            s, store, lexicons.find(s, owner=LOCAL_OWNER, ref="default"), owner=LOCAL_OWNER, batch_id=batch_id
        )
        s.commit()
    assert (plan.rerendered, plan.untouched) == (1, 6)
    with sessions() as s:
        touched = s.scalars(select(Job).where(Job.batch_id == batch_id, Job.lexicon_version == 2)).one()
        assert place_of(touched.client_id).chapter == 2 and touched.status == JobStatus.QUEUED
        assert s.get(JobMetrics, touched.id) is None
        remembered = set(s.scalars(select(StoredRender.job_id)))
        assert touched.id not in remembered and len(remembered) == 6
        assert s.get(Batch, batch_id).finished_at is None
    assert assembled(store, batch_id) is None  # not served while the chapter renders again

    # chapters.json is taken back at once; the files it listed stay until the next assembly.
    written = {n: store._path(file_key(batch_id, n)).stat().st_mtime_ns for n in before if n != "chapters.json"}
    render(sessions, store, batch_id, {2}, hz=330.0)
    with sessions() as s:
        assert ready_to_assemble(s, [batch_id]) == [batch_id]
        _, wrote = assemble_to_store(s, store, batch_id)
    assert wrote
    again = sorted(n for n in written if store._path(file_key(batch_id, n)).stat().st_mtime_ns != written[n])
    assert {"001-The_Harbour.m4a", "003-The_Island.m4a"} <= written.keys()
    assert {"001-The_Harbour.m4a", "003-The_Island.m4a"}.isdisjoint(again)  # unchanged: not written again
    assert {"002-The_Storm.m4a", "A_Short_Voyage.m4b"} <= set(again)
    after = files(store, batch_id)
    assert before.keys() == after.keys()
    changed = sorted(name for name in before if before[name] != after[name])
    assert changed == ["002-The_Storm.m4a", "A_Short_Voyage.m4b"]  # the new audio, the same length
