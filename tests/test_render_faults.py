"""Rendering under faults, against a real engine, database and store: a batch whose close failed
or whose closing worker died is closed by the next copy of any of its messages; a concurrent
duplicate of a message counts as skipped, not failed; a batch withdrawn while its jobs render
leaves no object behind; a realtime job that fails has its live stream ended once, with the reason;
a piece the model left silent is rendered again with another seed, within its budget."""

import threading
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pytest
import redis
from sqlalchemy import select

from pipeline.corpus import parse_corpus
from pipeline.db import jobs as db
from pipeline.db.models import Batch, Job, JobStatus
from pipeline.engines.base import AudioChunk, Engine, SynthesisRequest
from pipeline.errors import EngineError, SilentRenderError, StorageError
from pipeline.live import LiveAudio, redis_client_url, stream_key
from pipeline.render import render_jobs
from pipeline.renderer import Renderer
from pipeline.retake import SEED_STEP
from pipeline.storage import make_store
from pipeline.submit import BatchOptions, create_batch, withdraw_batch
from tests.waiting import eventually

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


class FallsOverAfterFirstAudio(Engine):
    """A real engine that fails every request after its first chunk of audio: a GPU lost mid-job."""

    def __init__(self, inner: Engine) -> None:
        self.inner, self.info = inner, inner.info

    def synthesize(self, requests: Sequence[SynthesisRequest]) -> Iterator[AudioChunk]:
        failed = set()
        for chunk in self.inner.synthesize(requests):
            if chunk.key in failed or not chunk.audio.size:
                continue
            failed.add(chunk.key)
            yield AudioChunk(chunk.key, chunk.audio, False)
            yield AudioChunk(chunk.key, np.zeros(0, np.float32), True, EngineError("the engine fell over"))


def make_batch(settings, sessions, lines: str, options: BatchOptions) -> tuple[str, list[str]]:
    with sessions() as s:
        made = create_batch(
            s, settings, parse_corpus(lines.encode(), source="c", max_line_chars=500), options, source="c"
        )
        s.commit()
        db.mark_batch_queued(s, made.id)
        s.commit()
        ids = [j for group in db.job_ids_by_queue(s, made.id).values() for j in group]
    return made.id, ids


@pytest.fixture
def batch(settings, sessions):
    return make_batch(settings, sessions, LINES, BatchOptions())


def renderer(settings, sessions, engine) -> Renderer:
    return Renderer(engine=engine, store=make_store(settings), sessions=sessions)


def test_a_batch_whose_manifest_write_failed_is_closed_by_the_retried_message(settings, sessions, batch, piper_engine):
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


def test_a_concurrent_duplicate_of_a_message_counts_its_jobs_as_skipped_not_failed(
    settings, sessions, batch, piper_engine
):
    batch_id, ids = batch
    first = renderer(settings, sessions, piper_engine)
    first_outcome = []
    # The copy redelivered while this one runs finishes the jobs first.
    duplicate = renderer(
        settings, sessions, BeforeAudio(piper_engine, lambda: first_outcome.append(render_jobs(first, ids)))
    )
    outcome = render_jobs(duplicate, ids)
    assert sorted(first_outcome[0].done) == sorted(ids)
    assert sorted(outcome.skipped) == sorted(ids) and not outcome.failed and not outcome.done
    with sessions() as s:
        jobs = s.scalars(select(Job).where(Job.batch_id == batch_id)).all()
    assert [j.status for j in jobs] == [JobStatus.DONE] * 2
    assert sorted(first.store.list(f"batches/{batch_id}/audio/")) == sorted(j.object_key for j in jobs)


def test_a_batch_withdrawn_while_its_jobs_render_leaves_no_object_and_no_manifest(
    settings, sessions, batch, piper_engine
):
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


def test_a_failed_realtime_jobs_live_stream_ends_once_with_the_reason_from_its_one_writer(
    settings, sessions, redis_url, piper_engine
):
    _, ids = make_batch(settings, sessions, "The engine fails this line.\n!!!\n", BatchOptions(priority="realtime"))
    client = redis.Redis.from_url(redis_client_url(redis_url))
    r = Renderer(
        engine=FallsOverAfterFirstAudio(piper_engine),
        store=make_store(settings),
        sessions=sessions,
        live=LiveAudio(client, ttl=60),
    )
    outcome = render_jobs(r, ids, realtime=True)
    assert sorted(outcome.failed) == sorted(ids)
    with sessions() as s:
        errors = {s.get(Job, job_id).text: s.get(Job, job_id).error for job_id in ids}

    def entries(job_id: str) -> list[tuple[bytes, str]]:
        return [(f[b"kind"], f.get(b"error", b"").decode()) for _, f in client.xrange(stream_key(job_id))]

    for job_id in ids:
        eventually(lambda: entries(job_id) and entries(job_id)[-1][0] == b"end", 10, "the stream's end")
    with sessions() as s:
        by_text = {s.get(Job, job_id).text: entries(job_id) for job_id in ids}
    # Failed by the engine: the audio it made, then one end with the engine's reason, from the writer.
    failed = by_text["The engine fails this line."]
    assert failed[0][0] == b"start" and failed[1][0] == b"pcm"
    assert failed[-1] == (b"end", errors["The engine fails this line."]) == (b"end", "the engine fell over")
    assert [k for k, _ in failed].count(b"end") == 1
    # Failed before it reached the engine: no stream was handed over, and the worker ends it.
    assert by_text["!!!"] == [(b"end", errors["!!!"])] and errors["!!!"]


class SilentUnder(Engine):
    """A real engine whose pieces of the second line come out silent under the seeds in ``seeds``
    (None: the job's own), as a sampled model that ends a piece before any audio; it records the
    seed of every such piece it is asked for."""

    def __init__(self, inner: Engine, seeds: set) -> None:
        self.inner, self.info, self.seeds = inner, inner.info, seeds
        self.asked: list[int | None] = []
        self.again: list[bool] = []  # whether each was asked as a piece asked again

    def synthesize(self, requests: Sequence[SynthesisRequest]) -> Iterator[AudioChunk]:
        silent = {req.key for req in requests if "second" in req.text}
        self.asked += [req.seed for req in requests if req.key in silent]
        self.again += [req.again for req in requests if req.key in silent]
        silent = {req.key for req in requests if req.key in silent and req.seed in self.seeds}
        for chunk in self.inner.synthesize([req for req in requests if req.key not in silent]):
            yield chunk
        for key in silent:
            yield AudioChunk(
                key, np.zeros(0, np.float32), True, SilentRenderError("the model produced no valid audio frame")
            )


def statuses(sessions, batch_id: str) -> list[tuple[str, str | None]]:
    with sessions() as s:
        jobs = s.scalars(select(Job).where(Job.batch_id == batch_id).order_by(Job.line_no)).all()
        return [(j.status, j.error) for j in jobs]


def test_a_piece_the_model_left_silent_is_rendered_again_with_another_seed(settings, sessions, batch, piper_engine):
    batch_id, ids = batch
    engine = SilentUnder(piper_engine, {None})
    r = Renderer(engine=engine, store=make_store(settings), sessions=sessions, silent_retries=1)
    outcome = render_jobs(r, ids)
    assert sorted(outcome.done) == sorted(ids) and not outcome.failed
    assert engine.asked == [None, SEED_STEP]  # once under the job's seed, once under the next
    assert engine.again == [False, True]  # the second time ahead of the batch work waiting
    with sessions() as s:
        second = s.scalars(select(Job).where(Job.batch_id == batch_id).order_by(Job.line_no)).all()[1]
        audio = r.store.get(second.object_key)
    assert len(audio) > 20_000  # a second or so of 16-bit speech, not an empty file
    assert [status for status, _ in statuses(sessions, batch_id)] == [JobStatus.DONE] * 2


class SilentFirst(Engine):
    """A real engine that answers the second line's piece first, silent, then renders the other
    pieces only once that piece has been asked for again (or 10 s have passed): as the H200's
    long pieces still render when a short one comes back silent."""

    def __init__(self, inner: Engine) -> None:
        self.inner, self.info = inner, inner.info
        self.asked_again = threading.Event()
        self.again_while_others_rendered: bool | None = None

    def synthesize(self, requests: Sequence[SynthesisRequest]) -> Iterator[AudioChunk]:
        if all(req.again for req in requests):
            self.asked_again.set()
            yield from self.inner.synthesize(requests)
            return
        silent = [req.key for req in requests if "second" in req.text]
        for key in silent:
            yield AudioChunk(
                key, np.zeros(0, np.float32), True, SilentRenderError("the model produced no valid audio frame")
            )
        self.again_while_others_rendered = self.asked_again.wait(10)
        yield from self.inner.synthesize([req for req in requests if req.key not in silent])


def test_a_silent_piece_is_asked_again_while_the_other_pieces_still_render(settings, sessions, batch, piper_engine):
    batch_id, ids = batch
    engine = SilentFirst(piper_engine)
    r = Renderer(engine=engine, store=make_store(settings), sessions=sessions, silent_retries=1)
    outcome = render_jobs(r, ids)
    assert engine.again_while_others_rendered is True  # not after the message's other pieces
    assert sorted(outcome.done) == sorted(ids) and not outcome.failed
    assert [status for status, _ in statuses(sessions, batch_id)] == [JobStatus.DONE] * 2


@pytest.mark.parametrize(("retries", "asked"), [(0, [None]), (2, [None, SEED_STEP, 2 * SEED_STEP])])
def test_a_piece_silent_under_every_seed_fails_its_job_alone_once_the_budget_is_spent(
    settings, sessions, batch, piper_engine, retries, asked
):
    batch_id, ids = batch
    engine = SilentUnder(piper_engine, {None, SEED_STEP, 2 * SEED_STEP})
    r = Renderer(engine=engine, store=make_store(settings), sessions=sessions, silent_retries=retries)
    outcome = render_jobs(r, ids)
    assert len(outcome.done) == 1 and len(outcome.failed) == 1
    assert engine.asked == asked
    assert statuses(sessions, batch_id) == [
        (JobStatus.DONE, None),
        (JobStatus.FAILED, "the model produced no valid audio frame"),
    ]
