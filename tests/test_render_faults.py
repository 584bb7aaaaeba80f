"""Rendering under faults, against a real engine, database and store: a batch whose close failed
or whose closing worker died is closed by the next copy of any of its messages; a concurrent
duplicate of a message counts as skipped, not failed; a batch withdrawn while its jobs render
leaves no object behind."""

from collections.abc import Callable, Iterator, Sequence

import pytest
from sqlalchemy import select

from pipeline.corpus import parse_corpus
from pipeline.db import jobs as db
from pipeline.db.models import Batch, Job, JobStatus
from pipeline.engines.base import AudioChunk, Engine, SynthesisRequest
from pipeline.errors import StorageError
from pipeline.render import Renderer, render_jobs
from pipeline.storage import make_store
from pipeline.submit import BatchOptions, create_batch, withdraw_batch

LINES = "The first line is short.\nThe second line is short too.\n"


class BeforeAudio(Engine):
    """A real engine that runs ``meanwhile`` once, after rendering and before handing over the
    audio: what another process does while this worker renders."""

    def __init__(self, inner: Engine, meanwhile: Callable[[], None]) -> None:
        self.inner, self.info, self.meanwhile = inner, inner.info, meanwhile

    def synthesize(self, requests: Sequence[SynthesisRequest]) -> Iterator[AudioChunk]:
        chunks = list(self.inner.synthesize(requests))
        self.meanwhile()
        yield from chunks


@pytest.fixture
def batch(settings, sessions):
    with sessions() as s:
        made = create_batch(s, settings, parse_corpus(LINES.encode(), source="c", max_line_chars=500),
                            BatchOptions(), source="c")
        s.commit()
        db.mark_batch_queued(s, made.id)
        s.commit()
        ids = [j for group in db.job_ids_by_queue(s, made.id).values() for j in group]
    return made.id, ids


def renderer(settings, sessions, engine) -> Renderer:
    return Renderer(engine=engine, store=make_store(settings), sessions=sessions)


def test_a_batch_whose_manifest_write_failed_is_closed_by_the_retried_message(settings, sessions, batch,
                                                                               piper_engine):
    batch_id, ids = batch
    r = renderer(settings, sessions, piper_engine)
    blocked = settings.object_dir / f"batches/{batch_id}/manifest.jsonl"
    blocked.mkdir(parents=True)  # the manifest cannot be written over a folder
    with pytest.raises(StorageError):
        render_jobs(r, ids)
    blocked.rmdir()
    with sessions() as s:
        assert s.get(Batch, batch_id).finished_at is None
        assert all(j.status == JobStatus.DONE for j in s.scalars(select(Job).where(Job.batch_id == batch_id)))

    again = render_jobs(r, ids)  # the retry: every job is finished, so all are skipped
    assert again.skipped == ids and not again.done
    with sessions() as s:
        closed = s.get(Batch, batch_id)
    assert closed.finished_at is not None and closed.manifest_key
    assert len(r.store.get(closed.manifest_key).decode().splitlines()) == 2


def test_a_concurrent_duplicate_of_a_message_counts_its_jobs_as_skipped_not_failed(settings, sessions, batch,
                                                                                    piper_engine):
    batch_id, ids = batch
    first = renderer(settings, sessions, piper_engine)
    first_outcome = []
    # The copy redelivered while this one runs finishes the jobs first.
    duplicate = renderer(settings, sessions, BeforeAudio(piper_engine,
                                                         lambda: first_outcome.append(render_jobs(first, ids))))
    outcome = render_jobs(duplicate, ids)
    assert sorted(first_outcome[0].done) == sorted(ids)
    assert sorted(outcome.skipped) == sorted(ids) and not outcome.failed and not outcome.done
    with sessions() as s:
        jobs = s.scalars(select(Job).where(Job.batch_id == batch_id)).all()
    assert [j.status for j in jobs] == [JobStatus.DONE] * 2
    assert sorted(first.store.list(f"batches/{batch_id}/audio/")) == sorted(j.object_key for j in jobs)


def test_a_batch_withdrawn_while_its_jobs_render_leaves_no_object_and_no_manifest(settings, sessions, batch,
                                                                                   piper_engine):
    batch_id, ids = batch
    store = make_store(settings)
    # The submitter lost Redis and withdraws the batch while a worker renders two of its jobs.
    r = renderer(settings, sessions, BeforeAudio(piper_engine, lambda: withdraw_batch(sessions, store, batch_id)))
    outcome = render_jobs(r, ids)
    assert sorted(outcome.skipped) == sorted(ids) and not outcome.failed
    assert store.list(f"batches/{batch_id}/") == []
    with sessions() as s:
        assert s.get(Batch, batch_id) is None
    # A message of the withdrawn batch consumed later (Redis kept it) writes nothing either.
    assert render_jobs(renderer(settings, sessions, piper_engine), ids).skipped == ids
    assert store.list(f"batches/{batch_id}/") == []
