"""The text front end in a batch through the whole path (Redis, a real Celery worker with Piper,
SQL, storage): a break is silence of its length in the stored audio, what was dropped is in the
job's record and in `synth status`, and unspeakable or malformed lines fail with their reason."""

from __future__ import annotations

import io
import json
import wave

import numpy as np

from pipeline.corpus import parse_corpus
from pipeline.db import jobs as db
from pipeline.db.models import Batch, JobStatus
from pipeline.storage import make_store
from pipeline.submit import BatchOptions, create_batch
from pipeline.summary import describe_text_notes, summarize
from tests.cli_helpers import synth, synth_env
from tests.test_pipeline_e2e import wait_finished
from tests.workers import app_with_worker
from worker.enqueue import enqueue_batch

LINES = [
    '<speak>One, two. <break time="1500ms"/> Three, four.</speak>',
    "Emoji test 🙂🚆🎉 should not crash the synthesizer.",
    "日本語のテキストも含まれています。",
    "<speak>Broken <s>markup</speak>",
]


def longest_silence(wav: bytes) -> float:
    """Seconds of the longest run of exact zeros."""
    with wave.open(io.BytesIO(wav)) as w:
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16)
    edges = np.diff(np.concatenate([[0], (pcm == 0).astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return float((ends - starts).max()) / rate if starts.size else 0.0


def test_a_batch_honours_breaks_records_what_was_dropped_and_fails_unspeakable_lines(
    settings, sessions, redis_url, piper_engine, database_url
):
    corpus = parse_corpus("\n".join(LINES).encode(), source="c.txt", max_line_chars=5000)
    with sessions() as s:
        batch = create_batch(s, settings, corpus, BatchOptions(format="wav", name="front"), source="c.txt")
        s.commit()
    with app_with_worker(settings, redis_url, piper_engine) as app:
        enqueue_batch(app, sessions, batch.id, settings.jobs_per_task)
        wait_finished(sessions, batch.id)
    with sessions() as s:
        rows = {job.client_id: (job, m) for job, m in db.jobs_with_metrics(s, batch.id)}
        summary = summarize(s, s.get(Batch, batch.id))

    ssml, emoji, foreign, broken = (rows[f"line-00000{i}"] for i in range(1, 5))
    assert ssml[0].status == emoji[0].status == JobStatus.DONE
    wav = make_store(settings).get(ssml[0].object_key)
    assert 1.5 <= longest_silence(wav) < 1.6  # the break, not a crossfade over it
    assert ssml[1].extra["text"] == {"ssml_breaks": 1}
    assert emoji[1].extra["text"] == {"emoji_dropped": 3}

    assert foreign[0].status == JobStatus.FAILED
    assert "voice 'joe' speaks en_US, and 16 characters of other scripts were dropped" in foreign[0].error
    assert broken[0].status == JobStatus.FAILED
    assert broken[0].error.startswith("malformed SSML at line 1, column 25: mismatched tag; expected </s>")

    assert summary.text_notes == {"jobs": 2, "ssml_breaks": 1, "emoji_dropped": 3}
    line = "text: 3 emoji silent, 1 SSML break (in 2 jobs)"
    assert describe_text_notes(summary.text_notes) == line
    env = synth_env(SYNTH_DATABASE_URL=database_url, SYNTH_DATA_DIR=str(settings.data_dir), SYNTH_REDIS_URL=redis_url)
    shown = synth("status", batch.id, env=env)
    assert line in shown.stderr.decode()
    as_json = json.loads(synth("status", batch.id, "--json", env=env).stdout)
    assert as_json["text_notes"] == summary.text_notes


def test_a_batch_with_nothing_changed_shows_no_text_line(settings, sessions, redis_url, piper_engine):
    corpus = parse_corpus(b"Plain words, nothing to change.", source="c.txt", max_line_chars=500)
    with sessions() as s:
        batch = create_batch(s, settings, corpus, BatchOptions(format="wav"), source="c.txt")
        s.commit()
    with app_with_worker(settings, redis_url, piper_engine) as app:
        enqueue_batch(app, sessions, batch.id, settings.jobs_per_task)
        wait_finished(sessions, batch.id)
    with sessions() as s:
        ((job, m),) = db.jobs_with_metrics(s, batch.id)
        summary = summarize(s, s.get(Batch, batch.id))
    assert job.status == JobStatus.DONE and "text" not in (m.extra or {})
    assert summary.text_notes == {} and describe_text_notes(summary.text_notes) == ""


def test_a_worker_set_to_read_emoji_keeps_them(settings, sessions, redis_url, piper_engine):
    settings = settings.with_overrides(read_emoji=True)
    corpus = parse_corpus("Party 🎉 time.".encode(), source="c.txt", max_line_chars=500)
    with sessions() as s:
        batch = create_batch(s, settings, corpus, BatchOptions(format="wav"), source="c.txt")
        s.commit()
    with app_with_worker(settings, redis_url, piper_engine) as app:
        enqueue_batch(app, sessions, batch.id, settings.jobs_per_task)
        wait_finished(sessions, batch.id)
    with sessions() as s:
        ((job, m),) = db.jobs_with_metrics(s, batch.id)
    assert job.status == JobStatus.DONE and "text" not in (m.extra or {})
