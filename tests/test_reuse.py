"""Render reuse against a real engine, database and store: a job rendered before with the same
identity is copied, not rendered, within its API key's scope; another key renders it again unless
the operator shares the scope; a deleted batch's renders are never offered."""

from collections.abc import Iterator, Sequence
from datetime import timedelta

import pytest

from api.views import batch_out
from pipeline.api_keys import create_key
from pipeline.corpus import parse_corpus
from pipeline.db import jobs as db
from pipeline.db.models import Batch, utcnow
from pipeline.engines.base import AudioChunk, Engine, SynthesisRequest
from pipeline.render import render_jobs
from pipeline.renderer import Renderer
from pipeline.reports.compute import compute_report
from pipeline.reports.render_md import render_md
from pipeline.storage import make_store
from pipeline.submit import BatchOptions, create_batch
from pipeline.summary import summarize

LINES = b"The lighthouse keeper climbed the stairs.\nThe lamp was lit at dusk.\n"


class Counting(Engine):
    """A real engine that counts the texts it is asked to render."""

    def __init__(self, inner: Engine) -> None:
        self.inner, self.info, self.requests = inner, inner.info, 0

    def synthesize(self, requests: Sequence[SynthesisRequest]) -> Iterator[AudioChunk]:
        self.requests += len(requests)
        yield from self.inner.synthesize(requests)


@pytest.fixture
def engine(piper_engine):
    return Counting(piper_engine)


def submit_and_render(settings, sessions, r: Renderer, owner: str | None, lines: bytes = LINES) -> str:
    with sessions() as s:
        batch = create_batch(
            s,
            settings,
            parse_corpus(lines, source="c", max_line_chars=500),
            BatchOptions(),
            source="c",
            owner_key_id=owner,
        )
        s.commit()
        db.mark_batch_queued(s, batch.id)
        s.commit()
        ids = [j for group in db.job_ids_by_queue(s, batch.id).values() for j in group]
    outcome = render_jobs(r, ids)
    assert sorted(outcome.done) == sorted(ids)
    return batch.id


def keys(sessions, *names):
    with sessions() as s:
        made = [create_key(s, name=n).key.id for n in names]
        s.commit()
    return made


def test_a_job_rendered_before_by_the_same_key_is_copied_and_another_key_renders_it_again(settings, sessions, engine):
    alice, bob = keys(sessions, "alice", "bob")
    store = make_store(settings)
    r = Renderer(engine=engine, store=store, sessions=sessions, reuse="key")
    first = submit_and_render(settings, sessions, r, alice)
    assert engine.requests == 2
    again = submit_and_render(settings, sessions, r, alice, LINES + b"A new line at the end.\n")
    assert engine.requests == 3  # the new line alone
    with sessions() as s:
        summary = summarize(s, s.get(Batch, again))
        assert summary.reused == 2 and summary.reused_s > 0 and summary.counts["done"] == 3
        shown = batch_out(s, s.get(Batch, again))  # what GET /v1/batches/{id} answers
        assert shown.reused == 2 and shown.reused_seconds == pytest.approx(summary.reused_s, abs=1e-3)
        before = {m.client_id: store.get(m.object_key) for m in s.get(Batch, first).jobs}
        after = {m.client_id: store.get(m.object_key) for m in s.get(Batch, again).jobs}
    assert all(after[cid] == audio for cid, audio in before.items())

    submit_and_render(settings, sessions, r, bob)
    assert engine.requests == 5  # another key's jobs are its own

    with sessions() as s:  # the nightly report counts them too
        report = compute_report(s, utcnow() - timedelta(hours=1), utcnow() + timedelta(seconds=1), compare=False)
    assert report.reused == 2 and report.reused_s == pytest.approx(summary.reused_s, abs=1e-3)
    assert "Reused from earlier renders: 2 jobs" in render_md(report)

    shared = Renderer(engine=engine, store=store, sessions=sessions, reuse="shared")
    submit_and_render(settings, sessions, shared, bob)  # shared: the first to record each identity
    submit_and_render(settings, sessions, shared, alice)
    assert engine.requests == 7


def test_a_deleted_batchs_renders_are_not_offered(settings, sessions, engine):
    r = Renderer(engine=engine, store=make_store(settings), sessions=sessions, reuse="key")
    first = submit_and_render(settings, sessions, r, None)
    with sessions() as s:
        s.delete(s.get(Batch, first))
        s.commit()
    for key in r.store.list(f"batches/{first}/"):
        r.store.delete(key)
    submit_and_render(settings, sessions, r, None)
    assert engine.requests == 4


def test_reuse_off_renders_every_job(settings, sessions, engine):
    r = Renderer(engine=engine, store=make_store(settings), sessions=sessions, reuse="off")
    submit_and_render(settings, sessions, r, None)
    submit_and_render(settings, sessions, r, None)
    assert engine.requests == 4


def test_a_render_at_other_precisions_is_not_the_same_identity():
    """Orpheus names the precisions it runs at (the codec's "auto" resolves at load): a render in
    fp32 is not offered to a worker now running fp16, and an engine that names none keeps the
    identity it had."""
    from dataclasses import replace
    from types import SimpleNamespace

    from pipeline.engines.base import EngineInfo
    from pipeline.reuse import identity

    job = SimpleNamespace(voice="tara", format="wav", sample_rate=None, loudness_target=None, true_peak_max=None)
    chunks = [SimpleNamespace(text="The lamp was lit at dusk.", rate=1.0)]
    plain = EngineInfo("orpheus", "m", "none", "gpu", 24_000, ("tara",))
    fp32 = replace(plain, extra={"dtype": "bfloat16", "kv_dtype": "float8_e4m3fn", "codec_dtype": "float32"})
    fp16 = replace(plain, extra={**fp32.extra, "codec_dtype": "float16", "codec_fused_units": 12})

    def key(info):
        return identity(info, job, chunks, None, crossfade_ms=0)

    assert key(fp32) != key(fp16)
    assert key(fp16) == key(replace(fp16, extra={**fp16.extra, "codec_fused_units": 0}))  # not a precision
    assert fp16.precision == {"dtype": "bfloat16", "kv_dtype": "float8_e4m3fn", "codec_dtype": "float16"}
    assert plain.precision == {} and key(plain) == key(replace(plain, extra={"sample_note": 1}))
