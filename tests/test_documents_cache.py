"""Encoded chapters kept in the store: a chapter is encoded once, found by every later assembly
in its format (another format assembled meanwhile takes none away), and a chapter whose audio
changed is encoded again alone, the others' files the same bytes. A document's jobs are recorded
done here as a worker records them, with tones for their audio."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from pipeline.audio import encode
from pipeline.db import jobs as db
from pipeline.db.models import Batch, Job, JobMetrics, JobStatus, utcnow
from pipeline.documents import read_document
from pipeline.documents.batch import assemble_batch, create_document_batch, plan_outline, prepare_chapter
from pipeline.documents.cache import chapters_prefix
from pipeline.documents.plan import place_of
from pipeline.documents.stored import DOCUMENT_KIND, chapters_done
from pipeline.loudness import true_peak
from pipeline.storage import make_store
from pipeline.storage.base import audio_key
from pipeline.submit import BatchOptions
from tests.documents import markdown_book

RATE = 22050
pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def tone(seconds: float, hz: float, gain: float = 0.2) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (gain * np.sin(2 * np.pi * hz * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 2 * t))).astype(np.float32)


def document(settings, sessions, store, **columns) -> str:
    doc = read_document(markdown_book().encode(), "markdown", source="voyage.md", max_bytes=10**6)
    outline = plan_outline(settings, doc, fmt="m4b", title=None, author="Ann Writer", fallback_title="voyage")
    with sessions() as session:
        batch = create_document_batch(
            session, store, settings, doc, outline, BatchOptions(), source="voyage.md", **columns
        )
        session.commit()
        return batch.id


def render(sessions, store, batch_id: str, chapters: set[int], *, hz: float = 220.0, renders: int = 1) -> None:
    """The jobs of ``chapters`` done, as a worker finishes them: audio stored, metrics recorded."""
    with sessions() as session:
        jobs = [j for j in session.query(Job).filter_by(batch_id=batch_id) if place_of(j.client_id).chapter in chapters]
        for job in db.claim(session, [j.id for j in jobs if j.status != JobStatus.DONE]):
            audio = tone(1.0 + 0.1 * place_of(job.client_id).paragraph, hz)
            key = audio_key(batch_id, job.id, job.client_id, "flac")
            store.put(key, encode(audio, RATE, "flac"), "audio/flac")
            db.finish(
                session,
                job,
                object_key=key,
                metrics={"audio_s": audio.size / RATE, "renders": renders, "true_peak_dbtp": true_peak(audio)},
            )
        session.commit()


def digests(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_chapter_is_encoded_once_and_one_rendered_again_alone(settings, sessions, tmp_path, where, request):
    if where == "s3":  # chapters' files streamed to S3 over HTTP and back
        s3 = {
            "s3_bucket": request.getfixturevalue("s3_bucket"),
            "s3_endpoint_url": request.getfixturevalue("s3_endpoint"),
        }
        settings = settings.with_overrides(**s3)
    store = make_store(settings)
    batch_id = document(settings, sessions, store)
    render(sessions, store, batch_id, {1, 2, 3})
    with sessions() as session:
        assert prepare_chapter(session, store, batch_id, 2)  # ahead of the assembly
        first = assemble_batch(session, store, batch_id, tmp_path / "first")
        assert [prepare_chapter(session, store, batch_id, n) for n in (1, 2, 3)] == [False] * 3
    cached = sorted(store.list(chapters_prefix(batch_id)))
    assert len([k for k in cached if k.endswith(".json")]) == 3

    # Chapter 2's audio replaced, as a kept retake or a rerender replaces it: its digest changes.
    with sessions() as session:
        job = next(j for j in session.query(Job).filter_by(batch_id=batch_id) if place_of(j.client_id).chapter == 2)
        audio = tone(1.3, 330.0, gain=0.1)
        store.put(job.object_key, encode(audio, RATE, "flac"), "audio/flac")
        session.query(JobMetrics).filter_by(job_id=job.id).update(
            {"renders": 2, "audio_s": audio.size / RATE, "true_peak_dbtp": true_peak(audio)}
        )
        session.commit()
        assert [prepare_chapter(session, store, batch_id, n) for n in (1, 2, 3)] == [False, True, False]
        again = assemble_batch(session, store, batch_id, tmp_path / "again")
    before, after = digests(tmp_path / "first"), digests(tmp_path / "again")
    changed = sorted(name for name in before if before[name] != after[name])
    assert changed == ["002-The_Storm.m4a", "A_Short_Voyage.m4b", "chapters.json"]
    assert again.chapters[2]["start"] != first.chapters[2]["start"]  # chapter 2's length changed
    now = set(store.list(chapters_prefix(batch_id)))
    old_two = {k for k in cached if "/0002-" in k}
    assert set(cached) - old_two <= now  # chapters 1 and 3 kept as they were
    assert len(now) == len(cached) and not old_two & now  # chapter 2's old objects gone, its new ones there


def test_the_workers_encode_a_chapter_of_an_api_document_once_its_jobs_are_done(settings, sessions):
    store = make_store(settings)
    api_doc = document(settings, sessions, store, kind=DOCUMENT_KIND)
    cli_doc = document(settings, sessions, store)
    render(sessions, store, api_doc, {1, 3})
    render(sessions, store, cli_doc, {1})
    with sessions() as session:
        jobs = [(j.batch_id, j.client_id) for j in session.query(Job)]
        assert chapters_done(session, jobs) == [(api_doc, 1), (api_doc, 3)]
        session.query(Batch).filter_by(id=api_doc).update({"cancelled_at": utcnow()})
        assert chapters_done(session, jobs) == []


def test_an_assembly_in_another_format_keeps_the_chapters_of_the_first(settings, sessions, tmp_path):
    store = make_store(settings)
    batch_id = document(settings, sessions, store)
    render(sessions, store, batch_id, {1, 2, 3})
    with sessions() as session:
        first = assemble_batch(session, store, batch_id, tmp_path / "m4b")
        m4b = set(store.list(chapters_prefix(batch_id)))
        assemble_batch(session, store, batch_id, tmp_path / "mp3", fmt="mp3")
        both = set(store.list(chapters_prefix(batch_id)))
        assert m4b < both and len([k for k in both if k.endswith(".json")]) == 6
        # The document's own format (m4b) is cached still: nothing to encode ahead, nor to assemble.
        assert [prepare_chapter(session, store, batch_id, n) for n in (1, 2, 3)] == [False] * 3
        again = assemble_batch(session, store, batch_id, tmp_path / "m4b-again")
    assert set(store.list(chapters_prefix(batch_id))) == both
    assert digests(tmp_path / "m4b") == digests(tmp_path / "m4b-again") and again.chapters == first.chapters
