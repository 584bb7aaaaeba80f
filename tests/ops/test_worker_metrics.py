"""Worker metrics and heartbeat through a real Celery worker (thread), real Redis and Piper; the
Grafana dashboard only queries metrics the worker's registry exports."""

from __future__ import annotations

import json
import re
import urllib.request
from datetime import timedelta

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update

from pipeline.corpus import parse_corpus
from pipeline.db import jobs as db
from pipeline.db.models import Job, utcnow
from pipeline.live import redis_client_url
from pipeline.reports import fleet
from pipeline.routing import all_queues
from pipeline.submit import BatchOptions, create_batch
from synth_testkit.ports import free_port
from tests.conftest import REPO
from tests.waiting import eventually
from worker.app import default_queues, make_app
from worker.boot import boot
from worker.enqueue import enqueue_batch
from worker.maintenance import RECONCILE_TASK
from worker.metrics import install
from tests.workers import thread_worker

GRAFANA = REPO / "ops" / "deploy" / "grafana" / "synth.json"
CORPUS = "The first line is short.\nA second line, also short.\nThird.\n!!!\n"


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name + json.dumps(s.labels, sort_keys=True)] = s.value
    return out


def value(samples, name, **labels):
    return samples[name + json.dumps(labels, sort_keys=True)]


@pytest.fixture
def app(settings, redis_url, piper_engine):
    settings = settings.with_overrides(worker_metrics_port=free_port(), worker_name="test-host/gpu7")
    app = make_app(settings, redis_url)
    boot(app, engine=piper_engine)
    installed = install(app, redis_url, interval=0.5)
    yield app, installed
    installed.uninstall()


def test_queue_depth_in_flight_histograms_and_heartbeat(app, settings, sessions, redis_url):
    app, installed = app
    port = app.synth_settings.worker_metrics_port
    with sessions() as s:
        batch = create_batch(
            s,
            settings,
            parse_corpus(CORPUS.encode(), source="c", max_line_chars=500),
            BatchOptions(format="wav"),
            source="c",
        )
        s.commit()
    messages = enqueue_batch(app, sessions, batch.id, jobs_per_task=2)
    before = scrape(port)
    assert sum(v for k, v in before.items() if k.startswith("synth_queue_depth")) == messages == 2
    client = redis.Redis.from_url(redis_client_url(redis_url))
    [beat] = fleet.workers(client)
    assert beat["name"] == "test-host/gpu7" and beat["engine"] == "piper" and beat["jobs_in_flight"] == "0"
    assert beat["device"] and beat["model"] == "en_US-joe-medium"

    with thread_worker(app, all_queues(settings.bucket_seconds), concurrency=1):
        eventually(lambda: _finished(sessions, batch.id), 120, "the batch to finish", interval=0.2)
        # task_postrun runs after the last job is recorded, and the heartbeat is written on its timer.
        eventually(
            lambda: fleet.workers(client)[0]["jobs_in_flight"] == "0", 10, "the heartbeat to show no job in flight"
        )
        ttl = client.ttl(fleet.WORKER_PREFIX + "test-host/gpu7")
        assert 0 < ttl <= fleet.HEARTBEAT_TTL
    after = scrape(port)
    assert value(after, "synth_worker_jobs_total", outcome="done") == 3
    assert value(after, "synth_worker_jobs_total", outcome="failed") == 1
    assert value(after, "synth_job_ttfb_seconds_count") == 3 and value(after, "synth_job_rtf_count") == 3
    assert value(after, "synth_job_ttfb_seconds_sum") > 0 and value(after, "synth_audio_seconds_total") > 1
    assert value(after, "synth_worker_jobs_in_flight") == 0
    assert all(v == 0 for k, v in after.items() if k.startswith("synth_queue_depth"))
    assert value(after, "synth_gpu_memory_allocated_bytes") == 0  # no CUDA here: reported as 0


def _finished(sessions, batch_id):
    with sessions() as s:
        return db.batch_finished(s, batch_id)


def test_grafana_queries_only_metrics_the_worker_exports(app):
    _, installed = app
    exported = set()
    for family in installed.metrics.registry.collect():
        exported |= {s.name for s in family.samples} | {family.name}
    exported |= {n + "_bucket" for n in list(exported)}  # histograms with no observations yet
    dashboard = json.loads(GRAFANA.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 8
    queried = {name for e in exprs for name in re.findall(r"\b(synth_[a-z_]+)\b", e)}
    assert queried - exported == set(), f"dashboard queries unknown metrics: {queried - exported}"
    assert {
        "synth_queue_depth",
        "synth_worker_jobs_in_flight",
        "synth_engine_tokens_per_second",
        "synth_job_ttfb_seconds_bucket",
        "synth_job_rtf_bucket",
        "synth_gpu_memory_allocated_bytes",
    } <= queried


def test_the_reconcilers_actions_are_counted(app, settings, sessions):
    app, _ = app
    with sessions() as s:
        batch = create_batch(
            s,
            settings,
            parse_corpus(CORPUS.encode(), source="c", max_line_chars=500),
            BatchOptions(format="wav"),
            source="c",
        )
        s.commit()
        db.mark_batch_queued(s, batch.id)  # queued long ago, and the messages were lost
        s.execute(update(Job).where(Job.batch_id == batch.id).values(updated_at=utcnow() - timedelta(hours=1)))
        s.commit()
    with thread_worker(app, default_queues(settings), concurrency=1):
        app.send_task(RECONCILE_TASK)
        eventually(lambda: _finished(sessions, batch.id), 120, "the batch to finish", interval=0.2)
    samples = scrape(app.synth_settings.worker_metrics_port)
    assert value(samples, "synth_reconciler_actions_total", action="requeued") == 4
    assert value(samples, "synth_reconciler_actions_total", action="closed") == 0
