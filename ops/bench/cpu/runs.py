"""The measurements: bare engine vs full path on one slice, and enqueue of a large corpus."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import click
from sqlalchemy import func, select

from ops.bench.cpu.services import bench_settings, drop_batch, drop_queues, queue_lengths, refuse_busy_queues, services
from ops.bench.timing import stopwatch
from ops.bench.cpu.worker_process import WorkerProcess, running_worker
from ops.bench.cpu.workload import read_slice, renderer_requests, repeat_corpus
from pipeline.corpus import parse_corpus
from pipeline.db import jobs as db
from pipeline.db.models import Job, JobStatus
from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.engines.base import SynthesisRequest
from pipeline.engines.registry import load_engine
from pipeline.settings import Settings
from pipeline.submit import BatchOptions, create_batch, resolve_options
from pipeline.summary import percentile
from worker.app import make_app
from worker.boot import batch_slots
from worker.enqueue import check_broker, enqueue_batch

POLL_S = 0.1  # how often the full path polls the database for the batch's end
BATCH_TIMEOUT_S = 1800


# --- results --------------------------------------------------------------------------------------


@dataclass
class PathResult:
    path: str  # "bare engine" or "full path (wav)"
    run: int
    jobs: int
    audio_s: float
    wall_s: float
    ttfb_p50_s: float | None
    ttfb_p95_s: float | None
    failed: int = 0
    overhead_pct: float | None = None
    extra: dict = field(default_factory=dict)

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.wall_s

    @property
    def x_real_time(self) -> float:
        return self.audio_s / self.wall_s


@dataclass
class EnqueueResult:
    database: str
    run: int
    lines: int
    messages: int
    parse_s: float
    insert_s: float
    enqueue_s: float
    messages_in_redis: int
    jobs_queued: int

    @property
    def total_s(self) -> float:
        return self.parse_s + self.insert_s + self.enqueue_s


# --- pipeline: bare engine and full path ----------------------------------------------------------


def run_bare(engine, requests: list[SynthesisRequest], run: int) -> PathResult:
    """One synthesize() call over all requests: audio seconds, wall, first audio per line."""
    samples, first, lines = 0, {}, {key[0] for key in (r.key for r in requests)}
    with stopwatch() as sw:
        for chunk in engine.synthesize(requests):
            if chunk.error is not None:
                raise click.ClickException(f"bare engine failed on {chunk.key}: {chunk.error}")
            samples += chunk.audio.size
            line_no, index = chunk.key
            if index == 0 and chunk.audio.size and line_no not in first:
                first[line_no] = time.perf_counter() - sw.start
    ttfbs = list(first.values())
    return PathResult(
        "bare engine",
        run,
        len(lines),
        samples / engine.info.sample_rate,
        sw.s,
        percentile(ttfbs, 50),
        percentile(ttfbs, 95),
    )


def run_full(app, sessions, settings: Settings, data: bytes, fmt: str, run: int, worker: WorkerProcess) -> PathResult:
    """Submit as `synth submit` does, wait for the worker to finish the batch, read its metrics."""
    started = datetime.now(UTC)
    with stopwatch() as submit:
        corpus = parse_corpus(data, source="bench", max_line_chars=settings.max_line_chars)
        with sessions() as session:
            batch = create_batch(session, settings, corpus, BatchOptions(format=fmt), source="bench")
            session.commit()
        enqueue_batch(app, sessions, batch.id, settings.jobs_per_task)
    _wait_for_batch(sessions, batch.id, worker)
    with sessions() as session:
        rows = db.jobs_with_metrics(session, batch.id)
    drop_batch(sessions, batch.id)
    done = [(job, m) for job, m in rows if job.status == JobStatus.DONE and m is not None]
    last = max(_utc(job.finished_at) for job, _ in rows)
    ttfbs = [m.ttfb_s for _, m in done if m.ttfb_s is not None]
    return PathResult(
        f"full path ({fmt})",
        run,
        len(rows),
        sum(m.audio_s for _, m in done),
        (last - started).total_seconds(),
        percentile(ttfbs, 50),
        percentile(ttfbs, 95),
        failed=len(rows) - len(done),
        extra={"submit_s": round(submit.s, 3), "engine_synth_s_sum": round(sum(m.synth_s for _, m in done), 3)},
    )


def _wait_for_batch(sessions, batch_id: str, worker: WorkerProcess) -> None:
    deadline = time.monotonic() + BATCH_TIMEOUT_S
    while time.monotonic() < deadline:
        with sessions() as session:
            open_jobs = session.scalar(
                select(func.count()).where(
                    Job.batch_id == batch_id, Job.status.in_([s for s in JobStatus if not s.terminal])
                )
            )
        if not open_jobs:
            return
        worker.check_alive()
        time.sleep(POLL_S)
    raise click.ClickException(f"batch {batch_id} did not finish within {BATCH_TIMEOUT_S} s")


def _utc(ts: datetime) -> datetime:
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)  # SQLite hands back naive UTC


def bench_pipeline(
    corpus: Path, lines: int, formats: tuple[str, ...], repeat: int, redis_url: str | None, database_url: str | None
) -> dict:
    data = read_slice(corpus, lines)
    with (
        tempfile.TemporaryDirectory(prefix="synth-bench-") as tmp,
        services(redis_url, database_url, Path(tmp)) as (broker_url, db_url),
    ):
        workdir = Path(tmp)
        settings = bench_settings(broker_url, db_url, workdir)
        voice = resolve_options(settings, BatchOptions()).voice
        requests = renderer_requests(settings, data, voice)
        app = make_app(settings, broker_url)
        check_broker(app)
        refuse_busy_queues(app)
        sessions = make_sessionmaker(make_engine(db_url))
        with stopwatch() as load:
            engine = load_engine(settings.engine_settings())
            engine.warmup()
        results: list[PathResult] = []
        try:
            with running_worker(app, settings, workdir) as worker:
                # Warm both sides on the same throwaway lines first: the worker's whole path (DB pool,
                # encoders) and onnxruntime's buffers for these input sizes in both processes.
                warm_data = read_slice(corpus, min(lines, settings.jobs_per_task * batch_slots(settings, engine)))
                run_bare(engine, renderer_requests(settings, warm_data, voice), 0)
                with stopwatch() as warm:
                    for fmt in formats:
                        run_full(app, sessions, settings, warm_data, fmt, 0, worker)
                for run in range(1, repeat + 1):
                    bare = run_bare(engine, requests, run)
                    results.append(bare)
                    for fmt in formats:
                        full = run_full(app, sessions, settings, data, fmt, run, worker)
                        full.overhead_pct = 100 * (full.wall_s - bare.wall_s) / bare.wall_s
                        results.append(full)
        finally:
            engine.close()
            drop_queues(app)
    return {
        "lines": lines,
        "corpus": str(corpus),
        "chunks": len(requests),
        "engine_threads": settings.engine_settings().threads,
        "worker_concurrency": batch_slots(settings, engine),
        "jobs_per_task": settings.jobs_per_task,
        "engine_load_s": load.s,
        "worker_boot_s": worker.boot_s,
        "worker_warm_s": warm.s,
        "results": results,
    }


# --- enqueue --------------------------------------------------------------------------------------


def bench_enqueue(corpus: Path, lines: int, repeat: int, redis_url: str | None, database_urls: tuple[str, ...]) -> dict:
    data = repeat_corpus(corpus, lines)
    results: list[EnqueueResult] = []
    for database_url in database_urls:
        for run in range(1, repeat + 1):
            with (
                tempfile.TemporaryDirectory(prefix="synth-bench-") as tmp,
                services(redis_url, database_url, Path(tmp)) as (broker_url, db_url),
            ):
                results.append(_enqueue_once(broker_url, db_url, Path(tmp), data, run))
    return {"lines": lines, "corpus": str(corpus), "results": results}


def _enqueue_once(broker_url: str, database_url: str, workdir: Path, data: bytes, run: int) -> EnqueueResult:
    settings = bench_settings(broker_url, database_url, workdir)
    app = make_app(settings, broker_url)
    check_broker(app)
    refuse_busy_queues(app)
    sessions = make_sessionmaker(make_engine(database_url))
    batch_id = None
    try:
        with stopwatch() as parse:
            corpus = parse_corpus(data, source="bench", max_line_chars=settings.max_line_chars)
        with stopwatch() as insert, sessions() as session:
            batch_id = create_batch(session, settings, corpus, BatchOptions(), source="bench").id
            session.commit()
        with stopwatch() as enqueue:
            messages = enqueue_batch(app, sessions, batch_id, settings.jobs_per_task)
        in_redis = sum(queue_lengths(app).values())
        with sessions() as session:
            queued = db.status_counts(session, batch_id)[JobStatus.QUEUED]
    finally:
        drop_queues(app)
        if batch_id:
            drop_batch(sessions, batch_id)
    if in_redis != messages or queued != len(corpus.lines):
        raise click.ClickException(
            f"enqueue lost work: sent {messages} messages, Redis holds {in_redis}; "
            f"{queued} of {len(corpus.lines)} jobs QUEUED"
        )
    return EnqueueResult(
        _db_name(database_url), run, len(corpus.lines), messages, parse.s, insert.s, enqueue.s, in_redis, queued
    )


def _db_name(url: str) -> str:
    return "sqlite" if url.startswith("sqlite") else url.split("+", 1)[0].split(":", 1)[0]
