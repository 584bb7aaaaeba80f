"""The Orpheus engine behind the spine: a real Celery worker renders a batch with the tiny checkpoint
that `synth models make-tiny` writes, and each job records the engine, quantization and device."""

import io
import wave

import pytest

from pipeline.constants import SNAC_SAMPLE_RATE
from pipeline.corpus import parse_corpus
from pipeline.db import jobs as db
from pipeline.engines.registry import load_engine
from pipeline.routing import all_queues
from pipeline.storage import make_store
from pipeline.submit import BatchOptions, create_batch
from tests.cli_helpers import synth, synth_env
from worker.app import make_app
from worker.boot import boot
from worker.enqueue import enqueue_batch
from tests.waiting import eventually
from tests.workers import thread_worker

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("orpheus-tiny")
    result = synth("models", "make-tiny", str(folder), env=synth_env(HF_HUB_OFFLINE="1"), timeout=300)
    assert result.returncode == 0, result.stderr.decode()
    return folder


@pytest.mark.slow
def test_orpheus_batch_through_a_real_worker(settings, sessions, redis_url, tiny_checkpoint, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    settings = settings.with_overrides(engine="orpheus", model=str(tiny_checkpoint), device="cpu")
    engine = load_engine(settings.engine_settings())
    app = make_app(settings, redis_url)
    boot(app, engine=engine)
    corpus = parse_corpus(b"Hello there.\nA second, slightly longer line of text.\n", source="c", max_line_chars=1000)
    with sessions() as s:
        batch = create_batch(s, settings, corpus, BatchOptions(voice="tara"), source="c")
        s.commit()

    def finished():
        with sessions() as s:
            return db.batch_finished(s, batch.id)

    with thread_worker(app, all_queues(settings.bucket_seconds), concurrency=1, shutdown_timeout=60):
        enqueue_batch(app, sessions, batch.id, settings.jobs_per_task)
        try:
            eventually(finished, 240, f"batch {batch.id} to finish", interval=0.2)
        except AssertionError as timed_out:
            with sessions() as s:
                jobs = [(j.status.value, j.error) for j, _ in db.jobs_with_metrics(s, batch.id)]
            raise AssertionError(f"{timed_out}; its jobs (status, error): {jobs}") from None
    engine.close()
    store = make_store(settings)
    with sessions() as s:
        rows = db.jobs_with_metrics(s, batch.id)
    assert [j.status.value for j, _ in rows] == ["done", "done"], [j.error for j, _ in rows]
    for job, m in rows:
        assert m.engine == "orpheus" and m.quantization == "none" and m.device_type
        assert m.audio_s > 0 and m.ttfb_s > 0
        # the continuous loop's counters reach job_metrics.extra, where the report reads them
        extra = m.extra
        assert extra["tokens"] > 0 and extra["max_batch"] >= 1
        # every token but a piece's first comes from a decode step, which spends >= 1 row on it
        assert 0 < extra["tokens"] - 1 <= extra["slot_steps"] <= extra["tokens"] * extra["max_batch"]
        assert 0 <= extra["idle_slot_steps"] < extra["slot_steps"]
        with wave.open(io.BytesIO(store.get(job.object_key))) as w:
            assert w.getframerate() == SNAC_SAMPLE_RATE
