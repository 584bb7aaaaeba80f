"""The CPU pipeline benchmark: one entry point, one timing helper.

    python ops/bench_cpu.py pipeline --lines 120 --repeat 2 --format wav --format mp3
    python ops/bench_cpu.py enqueue --lines 100000 --database-url sqlite --database-url postgresql+psycopg://...
    python ops/bench_cpu.py all --markdown ops/results/cpu-bench.md

`pipeline` times (a) the bare Piper engine on the text chunks the renderer would make, in the
renderer's order, and (b) the full path: submit -> Redis -> a real `synth worker` (booted and warmed
before the clock starts) -> engine -> join -> encode -> store -> metrics in SQL. Overhead % is
(full wall - bare wall) / bare wall. `enqueue` times parse, bulk insert and enqueue of a large corpus
with no worker running, checks the message count in Redis and removes what it wrote.

Services: --redis-url (default SYNTH_REDIS_URL, else a private embedded redis-server) and
--database-url (default SYNTH_DATABASE_URL, else a temporary SQLite file; "sqlite" names one).
Use a Redis db of its own: the benchmark refuses to start if its queues already hold messages.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import click  # noqa: E402
from sqlalchemy import delete, func, select  # noqa: E402

from pipeline import text  # noqa: E402
from pipeline.corpus import parse_corpus  # noqa: E402
from pipeline.db import jobs as db  # noqa: E402
from pipeline.db import migrate  # noqa: E402
from pipeline.db.models import Batch, Job, JobMetrics, JobStatus  # noqa: E402
from pipeline.db.session import make_engine, make_sessionmaker  # noqa: E402
from pipeline.engines.base import SynthesisRequest  # noqa: E402
from pipeline.engines.registry import load_engine  # noqa: E402
from pipeline.routing import all_queues, queue_for  # noqa: E402
from pipeline.settings import FORMATS, Settings  # noqa: E402
from pipeline.submit import BatchOptions, create_batch, resolve_options  # noqa: E402
from pipeline.summary import percentile  # noqa: E402
from worker.app import make_app  # noqa: E402
from worker.embedded import EmbeddedRedis  # noqa: E402
from worker.enqueue import check_broker, enqueue_batch  # noqa: E402

DEFAULT_CORPUS = REPO.parent / "shared" / "corpus" / "bench.txt"
TARGET_OVERHEAD_PCT = 10.0
POLL_S = 0.1                # how often the full path polls the database for the batch's end
WORKER_BOOT_TIMEOUT_S = 120
BATCH_TIMEOUT_S = 1800


# --- the one timing helper ------------------------------------------------------------------------

@dataclass
class Stopwatch:
    start: float = 0.0
    s: float = 0.0          # elapsed seconds once the block has ended


@contextlib.contextmanager
def stopwatch() -> Iterator[Stopwatch]:
    """Wall-clock seconds of a block (CPU work: nothing to synchronize)."""
    sw = Stopwatch(start=time.perf_counter())
    try:
        yield sw
    finally:
        sw.s = time.perf_counter() - sw.start


# --- inputs ---------------------------------------------------------------------------------------

def read_slice(path: Path, lines: int) -> bytes:
    """The first ``lines`` lines of the corpus, as the bytes `synth submit` would read."""
    kept = path.read_bytes().splitlines(keepends=True)[:lines]
    if len(kept) < lines:
        raise click.UsageError(f"{path} has only {len(kept)} lines; asked for {lines}")
    return b"".join(kept)


def repeat_corpus(path: Path, lines: int) -> bytes:
    """A ``lines``-line corpus made of the file's non-empty lines, repeated."""
    source = [line for line in path.read_bytes().splitlines() if line.strip()]
    return b"\n".join(source[i % len(source)] for i in range(lines)) + b"\n"


def renderer_requests(settings: Settings, data: bytes, voice: str) -> list[SynthesisRequest]:
    """The requests the worker would make for this corpus: jobs grouped per queue into messages of
    ``jobs_per_task`` (pipeline/submit.py, worker/enqueue.py), queues in the worker's priority
    order, and inside a message the first chunk of every job first (pipeline/render.py:_plan)."""
    corpus = parse_corpus(data, source="bench", max_line_chars=settings.max_line_chars)
    by_queue: dict[str, list[tuple[int, list[str]]]] = {}
    for line_no, line in corpus.lines:
        queue = queue_for(line, "batch", settings.bucket_seconds)
        by_queue.setdefault(queue, []).append((line_no, text.split_chunks(text.normalize(line),
                                                                          settings.max_chunk_chars)))
    requests = []
    for queue in all_queues(settings.bucket_seconds):
        jobs = by_queue.get(queue, [])
        for start in range(0, len(jobs), settings.jobs_per_task):
            group = jobs[start:start + settings.jobs_per_task]
            requests += [SynthesisRequest((line_no, i), chunks[i], voice)
                         for i in range(max(len(c) for _, c in group))
                         for line_no, chunks in group if i < len(chunks)]
    return requests


# --- results --------------------------------------------------------------------------------------

@dataclass
class PathResult:
    path: str                   # "bare engine" or "full path (wav)"
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


# --- services -------------------------------------------------------------------------------------

@contextlib.contextmanager
def services(redis_url: str | None, database_url: str | None, workdir: Path) -> Iterator[tuple[str, str]]:
    """(broker url, database url): the given ones, or an embedded redis / a SQLite file in workdir.
    The database is migrated to the current schema."""
    if database_url in (None, "sqlite"):
        database_url = f"sqlite:///{workdir / 'bench.db'}"
    engine = make_engine(database_url)
    if not migrate.is_current(engine):
        migrate.upgrade(engine)
    engine.dispose()
    if redis_url:
        yield redis_url, database_url
        return
    with EmbeddedRedis(workdir / "redis") as embedded:
        yield embedded.url, database_url


def bench_settings(broker_url: str, database_url: str, workdir: Path, fmt: str = "wav") -> Settings:
    return Settings(redis_url=broker_url, database_url=database_url, storage_dir=workdir / "objects",
                    data_dir=workdir / "data", default_format=fmt)


def queue_lengths(app) -> dict[str, int]:
    """Messages waiting in each of the app's queues (kombu keeps a queue as a Redis list, with
    priority sub-lists named queue + '\\x06\\x16' + priority)."""
    with app.connection_for_write() as conn:
        client = conn.default_channel.client
        out = {}
        for queue in all_queues(app.synth_settings.bucket_seconds):
            keys = [queue, *client.scan_iter(match=f"{queue}\x06\x16*")]
            out[queue] = sum(client.llen(k) for k in keys)
        return out


def drop_queues(app) -> None:
    with app.connection_for_write() as conn:
        client = conn.default_channel.client
        for queue in all_queues(app.synth_settings.bucket_seconds):
            client.delete(queue, *client.scan_iter(match=f"{queue}\x06\x16*"))


def refuse_busy_queues(app) -> None:
    waiting = {q: n for q, n in queue_lengths(app).items() if n}
    if waiting:
        raise click.ClickException(f"the benchmark's queues already hold messages ({waiting}); "
                                   "point --redis-url at a Redis db of its own")


def drop_batch(sessions, batch_id: str) -> None:
    with sessions() as session:
        session.execute(delete(Batch).where(Batch.id == batch_id))  # jobs and metrics cascade
        session.commit()


# --- the worker -----------------------------------------------------------------------------------

@dataclass
class WorkerProcess:
    process: subprocess.Popen
    name: str
    log_path: Path
    boot_s: float = 0.0

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            tail = self.log_path.read_text(errors="replace").splitlines()[-5:]
            raise click.ClickException(f"the worker exited ({self.process.returncode}): {' | '.join(tail)}")


@contextlib.contextmanager
def running_worker(app, settings: Settings, workdir: Path) -> Iterator[WorkerProcess]:
    """`synth worker` as a child; returns once it answers a ping (engine loaded and warmed up)."""
    name = f"synth-bench-{os.getpid()}@%h"
    env = {**os.environ, "SYNTH_REDIS_URL": app.conf.broker_url, "SYNTH_DATABASE_URL": settings.database_url,
           "SYNTH_STORAGE_DIR": str(settings.object_dir), "SYNTH_DATA_DIR": str(settings.data_dir),
           "PYTHONPATH": str(REPO)}
    log_path = workdir / "worker.log"
    with stopwatch() as boot, open(log_path, "ab") as log:
        process = subprocess.Popen([sys.executable, "-m", "cli.main", "worker", "--loglevel", "WARNING",
                                    "--hostname", name], cwd=REPO, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        worker = WorkerProcess(process, name.replace("%h", platform.node()), log_path)
        try:
            _wait_for_ping(app, worker)
        except BaseException:
            _stop(process)
            raise
    worker.boot_s = boot.s
    try:
        yield worker
    finally:
        _stop(process)


def _wait_for_ping(app, worker: WorkerProcess) -> None:
    deadline = time.monotonic() + WORKER_BOOT_TIMEOUT_S
    while time.monotonic() < deadline:
        worker.check_alive()
        replies = app.control.ping(timeout=0.5)
        names = {n for reply in replies for n in reply}
        if worker.name in names:
            others = names - {worker.name}
            if others:
                raise click.ClickException(f"other workers serve this Redis db too ({sorted(others)}); "
                                           "use a Redis db of its own")
            return
    raise click.ClickException(f"the worker did not answer within {WORKER_BOOT_TIMEOUT_S} s; see {worker.log_path}")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


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
    return PathResult("bare engine", run, len(lines), samples / engine.info.sample_rate, sw.s,
                      percentile(ttfbs, 50), percentile(ttfbs, 95))


def run_full(app, sessions, settings: Settings, data: bytes, fmt: str, run: int,
             worker: WorkerProcess) -> PathResult:
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
    return PathResult(f"full path ({fmt})", run, len(rows), sum(m.audio_s for _, m in done),
                      (last - started).total_seconds(), percentile(ttfbs, 50), percentile(ttfbs, 95),
                      failed=len(rows) - len(done),
                      extra={"submit_s": round(submit.s, 3),
                             "engine_synth_s_sum": round(sum(m.synth_s for _, m in done), 3)})


def _wait_for_batch(sessions, batch_id: str, worker: WorkerProcess) -> None:
    deadline = time.monotonic() + BATCH_TIMEOUT_S
    while time.monotonic() < deadline:
        with sessions() as session:
            open_jobs = session.scalar(select(func.count()).where(
                Job.batch_id == batch_id, Job.status.in_([s for s in JobStatus if not s.terminal])))
        if not open_jobs:
            return
        worker.check_alive()
        time.sleep(POLL_S)
    raise click.ClickException(f"batch {batch_id} did not finish within {BATCH_TIMEOUT_S} s")


def _utc(ts: datetime) -> datetime:
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)  # SQLite hands back naive UTC


def bench_pipeline(corpus: Path, lines: int, formats: tuple[str, ...], repeat: int,
                   redis_url: str | None, database_url: str | None) -> dict:
    data = read_slice(corpus, lines)
    with tempfile.TemporaryDirectory(prefix="synth-bench-") as tmp, \
            services(redis_url, database_url, Path(tmp)) as (broker_url, db_url):
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
                warm_data = read_slice(corpus, min(lines, settings.jobs_per_task * settings.worker_concurrency))
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
    return {"lines": lines, "corpus": str(corpus), "chunks": len(requests),
            "engine_threads": settings.engine_settings().threads,
            "worker_concurrency": settings.worker_concurrency, "jobs_per_task": settings.jobs_per_task,
            "engine_load_s": load.s, "worker_boot_s": worker.boot_s, "worker_warm_s": warm.s,
            "results": results}


# --- enqueue --------------------------------------------------------------------------------------

def bench_enqueue(corpus: Path, lines: int, repeat: int, redis_url: str | None,
                  database_urls: tuple[str, ...]) -> dict:
    data = repeat_corpus(corpus, lines)
    results: list[EnqueueResult] = []
    for database_url in database_urls:
        for run in range(1, repeat + 1):
            with tempfile.TemporaryDirectory(prefix="synth-bench-") as tmp, \
                    services(redis_url, database_url, Path(tmp)) as (broker_url, db_url):
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
        raise click.ClickException(f"enqueue lost work: sent {messages} messages, Redis holds {in_redis}; "
                                   f"{queued} of {len(corpus.lines)} jobs QUEUED")
    return EnqueueResult(_db_name(database_url), run, len(corpus.lines), messages, parse.s, insert.s,
                         enqueue.s, in_redis, queued)


def _db_name(url: str) -> str:
    return "sqlite" if url.startswith("sqlite") else url.split("+", 1)[0].split(":", 1)[0]


# --- reporting ------------------------------------------------------------------------------------

def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1000:,.0f}"


def pipeline_table(report: dict) -> list[str]:
    rows = ["| path | run | jobs | failed | audio s | wall s | jobs/s | x real time | TTFB p50 ms "
            "| TTFB p95 ms | overhead vs bare |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["results"]:
        over = "-" if r.overhead_pct is None else f"{r.overhead_pct:+.1f}%"
        rows.append(f"| {r.path} | {r.run} | {r.jobs} | {r.failed} | {r.audio_s:,.1f} | {r.wall_s:,.2f} "
                    f"| {r.jobs_per_s:.2f} | {r.x_real_time:.1f} | {_ms(r.ttfb_p50_s)} | {_ms(r.ttfb_p95_s)} "
                    f"| {over} |")
    return rows


def pipeline_notes(report: dict) -> list[str]:
    overheads: dict[str, list[float]] = {}
    for r in report["results"]:
        if r.overhead_pct is not None:
            overheads.setdefault(r.path, []).append(r.overhead_pct)
    lines = [f"Slice: first {report['lines']} lines of {report['corpus']} ({report['chunks']} engine requests); "
             f"engine threads {report['engine_threads']}, worker concurrency {report['worker_concurrency']}, "
             f"{report['jobs_per_task']} jobs per message.",
             f"Excluded from the timings: engine load + warm-up in this process {report['engine_load_s']:.1f} s; "
             f"worker boot (spawn to first ping) {report['worker_boot_s']:.1f} s; worker warm-up batch "
             f"{report['worker_warm_s']:.1f} s."]
    for path, values in overheads.items():
        verdict = "within" if max(values) <= TARGET_OVERHEAD_PCT else "OVER"
        lines.append(f"{path}: overhead {min(values):+.1f}% .. {max(values):+.1f}% over {len(values)} runs "
                     f"({verdict} the {TARGET_OVERHEAD_PCT:.0f}% target).")
    return lines


def enqueue_table(report: dict) -> list[str]:
    rows = ["| database | run | jobs | messages | parse s | bulk insert s | enqueue s | total s "
            "| messages in Redis | jobs QUEUED |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["results"]:
        rows.append(f"| {r.database} | {r.run} | {r.lines:,} | {r.messages:,} | {r.parse_s:.2f} "
                    f"| {r.insert_s:.2f} | {r.enqueue_s:.2f} | {r.total_s:.2f} | {r.messages_in_redis:,} "
                    f"| {r.jobs_queued:,} |")
    return rows


def machine() -> dict:
    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return out.stdout.strip() or "unknown"

    from pipeline.hostinfo import cpu_name

    return {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "nproc": os.cpu_count(),
            "cpu": cpu_name(), "load_avg_1_5_15": os.getloadavg(), "python": platform.python_version(),
            "git_commit": git("rev-parse", "--short", "HEAD"),
            "command": "python " + " ".join([os.path.relpath(sys.argv[0], REPO), *sys.argv[1:]])}


def markdown(host: dict, pipeline: dict | None, enqueue: dict | None) -> str:
    out = ["# CPU pipeline benchmark", "",
           f"- Date: {host['date']}", f"- Git commit: `{host['git_commit']}`",
           f"- Machine: {host['nproc']} cores (`nproc`), CPU `{host['cpu']}`, Python {host['python']}; "
           f"load average at the end {', '.join(f'{x:.2f}' for x in host['load_avg_1_5_15'])} "
           "(a shared machine: other agents ran tests at the same time)",
           f"- Command: `{host['command']}`", ""]
    if pipeline:
        out += ["## Pipeline: bare engine vs full path", "", *pipeline_table(pipeline), "",
                *(f"- {line}" for line in pipeline_notes(pipeline)), ""]
    if enqueue:
        out += [f"## Enqueue: {enqueue['lines']:,}-line corpus, no worker", "", *enqueue_table(enqueue), ""]
    return "\n".join(out)


def emit(pipeline: dict | None, enqueue: dict | None, json_path: Path | None, md_path: Path | None) -> None:
    if pipeline:
        click.echo("\n".join([*pipeline_table(pipeline), *pipeline_notes(pipeline)]))
    if enqueue:
        click.echo("\n".join(enqueue_table(enqueue)))
    host = machine()
    if json_path:
        def plain(report):
            return report and {**report, "results": [{**asdict(r), **_derived(r)} for r in report["results"]]}

        json_path.write_text(json.dumps({"machine": host, "pipeline": plain(pipeline),
                                         "enqueue": plain(enqueue)}, indent=2) + "\n")
    if md_path:
        md_path.parent.mkdir(parents=True, exist_ok=True)
        md_path.write_text(markdown(host, pipeline, enqueue))


def _derived(r) -> dict:
    if isinstance(r, PathResult):
        return {"jobs_per_s": r.jobs_per_s, "x_real_time": r.x_real_time}
    return {"total_s": r.total_s}


# --- command line ---------------------------------------------------------------------------------

def _common(f):
    for option in reversed([
        click.option("--corpus", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     default=DEFAULT_CORPUS, show_default=True),
        click.option("--repeat", type=int, default=2, show_default=True, help="Runs of each measurement."),
        click.option("--redis-url", envvar="SYNTH_REDIS_URL",
                     help="A Redis db of the benchmark's own [default: SYNTH_REDIS_URL, else embedded]."),
        click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path)),
        click.option("--markdown", "md_path", type=click.Path(dir_okay=False, path_type=Path)),
    ]):
        f = option(f)
    return f


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def cli() -> None:
    """Benchmarks of synth's CPU pipeline (Piper): throughput, TTFB, full-path overhead, enqueue."""


@cli.command()
@_common
@click.option("--lines", type=int, default=120, show_default=True, help="First N lines of the corpus.")
@click.option("--format", "formats", type=click.Choice(FORMATS), multiple=True, default=("wav",),
              show_default=True, help="Output format of the full path; repeat for several.")
@click.option("--database-url", envvar="SYNTH_DATABASE_URL",
              help="[default: SYNTH_DATABASE_URL, else a temporary SQLite file]")
def pipeline(corpus, repeat, redis_url, json_path, md_path, lines, formats, database_url) -> None:
    """Bare engine vs the full path (Redis, worker, database, storage, encoding) on one slice."""
    emit(bench_pipeline(corpus, lines, formats, repeat, redis_url, database_url), None, json_path, md_path)


@cli.command()
@_common
@click.option("--lines", type=int, default=100_000, show_default=True, help="Corpus size (lines repeated).")
@click.option("--database-url", "database_urls", multiple=True,
              help="Repeat for several; 'sqlite' is a temporary SQLite file "
                   "[default: sqlite, plus SYNTH_DATABASE_URL if set].")
def enqueue(corpus, repeat, redis_url, json_path, md_path, lines, database_urls) -> None:
    """Parse + bulk insert + enqueue of a large corpus, no worker running."""
    emit(None, bench_enqueue(corpus, lines, repeat, redis_url, _database_urls(database_urls)), json_path, md_path)


@cli.command(name="all")
@_common
@click.option("--lines", type=int, default=120, show_default=True, help="Pipeline slice.")
@click.option("--enqueue-lines", type=int, default=100_000, show_default=True)
@click.option("--format", "formats", type=click.Choice(FORMATS), multiple=True, default=("wav",), show_default=True)
@click.option("--database-url", "database_urls", multiple=True,
              help="The pipeline runs on the last one; enqueue on each.")
def all_(corpus, repeat, redis_url, json_path, md_path, lines, enqueue_lines, formats, database_urls) -> None:
    """`pipeline` then `enqueue`, one report."""
    urls = _database_urls(database_urls)
    pipe = bench_pipeline(corpus, lines, formats, repeat, redis_url, urls[-1])
    emit(pipe, bench_enqueue(corpus, enqueue_lines, repeat, redis_url, urls), json_path, md_path)


def _database_urls(given: tuple[str, ...]) -> tuple[str, ...]:
    if given:
        return given
    env = os.environ.get("SYNTH_DATABASE_URL")
    return ("sqlite", env) if env else ("sqlite",)


if __name__ == "__main__":
    cli()
