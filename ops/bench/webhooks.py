"""Webhook delivery delay: from the event being emitted (its row in webhook_deliveries, written by
the render hook) to the receiver having the request (its own clock; same machine, same clock).

    python -m ops.bench.webhooks --events 20 --markdown .bench/webhooks.md

A real Celery worker (threads, in this process, Piper on the CPU) consumes realtime, webhooks and
the length buckets like `synth worker`; the receiver (ops/bench/webhook_receiver.py) verifies every
signature and answers 200 at once. Two scenarios:

- idle: one single-job batch at a time, the next submitted after the previous webhook arrived,
  so a worker slot is free when the delivery message comes;
- busy: one batch of N jobs (jobs_per_task per message) on a worker with 2 slots, so delivery
  messages queue behind render tasks that are already running.

Services: --redis-url (default SYNTH_REDIS_URL, else an embedded redis-server) and --database-url
(default SYNTH_DATABASE_URL, else a temporary SQLite file). Use a Redis db of its own.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path


import click
from celery.contrib.testing.worker import start_worker
from sqlalchemy import select

from ops.bench import REPO
from pipeline.api_keys import create_key
from pipeline.db import migrate
from pipeline.db.models import Job, as_utc
from pipeline.db.models_webhooks import WebhookDelivery
from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.hostinfo import cpu_name
from pipeline.settings import Settings
from pipeline.submit import BatchOptions, Item, create_item_batch
from pipeline.summary import percentile
from pipeline.webhooks import secrets
from synth_testkit.webhook_receiver import Receiver
from worker.app import default_queues, make_app
from worker.boot import boot
from worker.embedded import EmbeddedRedis
from worker.enqueue import enqueue_batch

SENTENCES = [
    "Your order has shipped.",
    "The meeting starts at noon.",
    "Please call us back tomorrow.",
    "The report is ready for review.",
    "Thank you for waiting.",
]


def _batch(sessions, settings, key_id, url, texts) -> str:
    with sessions() as s:
        batch = create_item_batch(
            s,
            settings,
            [Item(text=t) for t in texts],
            BatchOptions(name="bench"),
            source="bench",
            owner_key_id=key_id,
            webhook_url=url,
            webhook_events=["job.finished"],
        )
        s.commit()
        return batch.id


def _delays(sessions, receiver: Receiver) -> dict:
    """Per accepted event: emitted -> received, and job finished -> received (seconds)."""
    got = {r.webhook_id: r.at for r in receiver.accepted()}
    with sessions() as s:
        rows = s.execute(
            select(WebhookDelivery.id, WebhookDelivery.created_at, Job.finished_at)
            .join(Job, Job.id == WebhookDelivery.resource_id)
            .where(WebhookDelivery.id.in_(list(got)))
        ).all()
    emitted = [got[i] - as_utc(c).timestamp() for i, c, _ in rows]
    finished = [got[i] - as_utc(f).timestamp() for i, _, f in rows]
    return {"events": len(rows), "emitted_to_received_s": _stats(emitted), "finished_to_received_s": _stats(finished)}


def _stats(values: list[float]) -> dict:
    values = sorted(values)
    return {
        "p50": round(percentile(values, 50), 4),
        "p95": round(percentile(values, 95), 4),
        "min": round(values[0], 4),
        "max": round(values[-1], 4),
    }


def run(settings: Settings, redis_url: str, events: int) -> dict:
    engine = make_engine(settings.sqlalchemy_url)
    migrate.upgrade(engine)
    sessions = make_sessionmaker(engine)
    with sessions() as s:
        key_id = create_key(s, name="bench-webhooks").key.id
        secret = secrets.get_or_create(s, key_id).secret
        s.commit()
    app = make_app(settings, redis_url)
    boot(app)
    out = {}
    with ExitStack() as stack:
        stack.enter_context(
            start_worker(
                app,
                pool="threads",
                concurrency=2,
                perform_ping_check=False,
                queues=default_queues(settings),
                shutdown_timeout=30,
            )
        )
        idle = stack.enter_context(Receiver(secrets=[secret]))
        for i in range(events):
            batch_id = _batch(sessions, settings, key_id, idle.url, [SENTENCES[i % len(SENTENCES)]])
            enqueue_batch(app, sessions, batch_id, settings.jobs_per_task)
            idle.wait_for(i + 1, timeout=120)
        out["idle"] = _delays(sessions, idle)
        busy = stack.enter_context(Receiver(secrets=[secret]))
        batch_id = _batch(sessions, settings, key_id, busy.url, [SENTENCES[i % len(SENTENCES)] for i in range(events)])
        enqueue_batch(app, sessions, batch_id, settings.jobs_per_task)
        busy.wait_for(events, timeout=600)
        out["busy"] = _delays(sessions, busy)
        bad = [r for r in idle.requests + busy.requests if not r.valid_for]
        out["unverified_requests"] = len(bad)
    engine.dispose()
    return out


def _markdown(report: dict) -> str:
    m = report["machine"]
    lines = [
        "# Webhook delivery delay",
        "",
        f"{m['date']}, commit {m['commit']}, {m['cpu']} ({m['cores']} cores), {m['database']}, Redis {m['redis']}.",
        "",
        "Measured by `python -m ops.bench.webhooks` (see its docstring): a real Celery worker thread (2 slots, "
        "Piper on the CPU) renders single-sentence jobs; the render hook writes each `job.finished` event "
        "to `webhook_deliveries` and enqueues `synth.deliver_webhook` on the `webhooks` queue; a receiver "
        "on a loopback port verifies the Standard Webhooks signature and answers 200. Delay = receiver's "
        "arrival time minus the event row's `created_at` (emitted); also minus the job's `finished_at`.",
        "",
        "| scenario | events | emitted -> received p50 | p95 | max | job finished -> received p50 | p95 |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in ("idle", "busy"):
        r = report[name]
        e, f = r["emitted_to_received_s"], r["finished_to_received_s"]
        lines.append(
            f"| {name} | {r['events']} | {e['p50'] * 1000:.1f} ms | {e['p95'] * 1000:.1f} ms | "
            f"{e['max'] * 1000:.1f} ms | {f['p50'] * 1000:.1f} ms | {f['p95'] * 1000:.1f} ms |"
        )
    lines += ["", f"Requests whose signature did not verify: {report['unverified_requests']}.", ""]
    return "\n".join(lines)


@click.command()
@click.option("--events", default=20, show_default=True)
@click.option("--redis-url", default=lambda: os.environ.get("SYNTH_REDIS_URL"))
@click.option("--database-url", default=lambda: os.environ.get("SYNTH_DATABASE_URL"))
@click.option("--json", "json_path", type=click.Path(path_type=Path))
@click.option("--markdown", "md_path", type=click.Path(path_type=Path))
def main(events, redis_url, database_url, json_path, md_path) -> None:
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        if not redis_url:
            redis_url = stack.enter_context(EmbeddedRedis(Path(tmp) / "redis")).url
        settings = Settings(
            data_dir=Path(tmp) / "data",
            redis_url=redis_url,
            database_url=database_url or f"sqlite:///{tmp}/bench.db",
            webhook_allow_hosts=("127.0.0.0/8",),
        )
        report = run(settings, redis_url, events)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    report["machine"] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "database": (database_url or "sqlite").split("://")[0].split("+")[0],
        "redis": "embedded" if "socket" in redis_url else "service",
    }
    md = _markdown(report)
    print(md)
    if json_path:
        json_path.write_text(json.dumps(report, indent=2))
    if md_path:
        md_path.write_text(md)


if __name__ == "__main__":
    main()
