"""A document's jobs go to one length bucket, in the book's order, so workers that drain the
longest bucket first still finish its chapters one after another (pipeline/documents/batch.py)."""

import pytest
from sqlalchemy import select

from pipeline.db import jobs as db
from pipeline.db.models import Job
from pipeline.documents import read_document
from pipeline.documents.batch import create_document_batch, plan_outline
from pipeline.documents.plan import place_of
from pipeline.routing import queue_for
from pipeline.storage import make_store
from pipeline.submit import BatchOptions, create_batch
from pipeline.corpus import parse_corpus
from tests.documents import markdown_book

LONG = (
    "The crossing took them three days and two nights, and on each of them the wind came round from "
    "the west, pushed the little boat off its course, and left the crew to row it back by hand."
)
CHAPTERS = [  # 8 long paragraphs; 3 short ones and 3 read headings
    ("The Harbour", ["They left at dawn.", LONG, LONG, LONG]),
    ("The Storm", [LONG, LONG, "Rain came down."]),
    ("The Island", ["At dusk they saw the island.", LONG, LONG, LONG]),
]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_documents_jobs_share_one_bucket_and_are_queued_in_the_books_order(settings, sessions):
    assert queue_for(LONG, "batch", settings.bucket_seconds) != queue_for(
        "Rain came down.", "batch", settings.bucket_seconds
    )
    doc = read_document(markdown_book(chapters=CHAPTERS).encode(), "markdown", source="voyage.md", max_bytes=10**6)
    outline = plan_outline(settings, doc, fmt="m4b", title=None, author=None, fallback_title="voyage")
    with sessions() as s:
        batch = create_document_batch(
            s, make_store(settings), settings, doc, outline, BatchOptions(), source="voyage.md"
        )
        s.commit()
        by_queue = db.job_ids_by_queue(s, batch.id)
        client_ids = dict(s.execute(select(Job.id, Job.client_id).where(Job.batch_id == batch.id)).all())
    # the bucket most of its pieces fall in: the long paragraphs'
    assert list(by_queue) == [queue_for(LONG, "batch", settings.bucket_seconds)]
    places = [place_of(client_ids[job_id]) for job_id in by_queue[list(by_queue)[0]]]
    assert [p.chapter for p in places] == sorted(p.chapter for p in places)  # chapter by chapter
    assert places == sorted(places, key=lambda p: (p.chapter, p.paragraph, p.part))


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_batch_of_lines_keeps_its_length_buckets(settings, sessions):
    with sessions() as s:
        batch = create_batch(
            s,
            settings,
            parse_corpus(f"Rain came down.\n{LONG}\n".encode(), source="c", max_line_chars=500),
            BatchOptions(),
            source="c",
        )
        s.commit()
        assert len(db.job_ids_by_queue(s, batch.id)) == 2
