"""The console's query time (GET /dashboard/data.json's database part) over a large jobs table.

    python -m ops.bench.console --database-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres

Creates a scratch PostgreSQL database beside the one named (dropped at the end unless --keep),
fills it in SQL with --jobs jobs spread evenly over --days days (1 % failed over four reasons, the
rest done with metrics on three device types, a tenth realtime) in batches of --batch-size, the
newest --open of them still rendering, then times what one build of the console's numbers asks
the database: the batches in progress, the latest failures and the last 24 hours' aggregates.
Each part is timed --reps times after one warm-up; then --viewers threads ask at once, without
the API's cache (each runs the queries) and through it (one build, the rest wait for it).
"""

from __future__ import annotations

import statistics
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import click
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from api.console import SnapshotCache
from ops.bench import git_commit
from ops.bench.timing import stopwatch
from pipeline.console import progress, series
from pipeline.db import migrate
from pipeline.db.session import make_engine, make_sessionmaker

FILL = [
    """INSERT INTO batches (id, name, voice, format, priority, total_jobs, skipped_lines, created_at, finished_at, kind)
       SELECT 'b' || g, 'batch ' || g, 'joe', 'wav', 'batch', :size, 0,
              now() - make_interval(secs => (:batches - g + 1) * :span / :batches),
              CASE WHEN g > :batches - :open THEN NULL
                   ELSE now() - make_interval(secs => (:batches - g) * :span / :batches) END, 'batch'
       FROM generate_series(1, :batches) g""",
    """INSERT INTO jobs (id, batch_id, client_id, text, voice, format, priority, status, attempts, error,
                        created_at, queued_at, started_at, finished_at, updated_at)
       SELECT md5(g::text), 'b' || (1 + (g - 1) / :size), g::text, repeat('x', 80 + g % 200), 'joe', 'wav',
              CASE WHEN g % 10 = 0 THEN 'realtime' ELSE 'batch' END,
              CASE WHEN (g - 1) / :size >= :batches - :open AND g % :size > :size / 2 THEN 'queued'
                   WHEN g % 100 = 0 THEN 'failed' ELSE 'done' END, 1,
              CASE WHEN g % 100 = 0 THEN (ARRAY['nothing speakable in line: ''' || g || '''',
                   'gave up after 5 retries: database unreachable', 'engine produced no audio',
                   'internal error: KeyError: ''' || g || ''''])[1 + g / 100 % 4] END,
              t, t, t, t + interval '4 seconds', t + interval '4 seconds'
       FROM (SELECT g, now() - make_interval(secs => (:jobs - g) * :span / :jobs) AS t
             FROM generate_series(1, :jobs) g) s""",
    """UPDATE jobs SET finished_at = NULL, started_at = NULL WHERE status = 'queued'""",
    """INSERT INTO job_metrics (job_id, queue_wait_s, ttfb_s, synth_s, audio_s, rtf, engine, model, device_type,
                               worker_host, recorded_at)
       SELECT id, 1.0, 0.2 + (length(text) % 50) / 10.0, 1.0, 6.0, 0.16, 'orpheus', 'orpheus-3b',
              (ARRAY['NVIDIA H100 80GB HBM3', 'NVIDIA L4', 'NVIDIA A10G'])[1 + length(text) % 3],
              'host/gpu0', finished_at
       FROM jobs WHERE status = 'done'""",
    "ANALYZE",
]


def build(sessions) -> dict:
    now = datetime.now(UTC)
    with sessions() as session:
        return {
            "batches": progress.open_batches(session, now),
            "failures": progress.latest_failures(session),
            "day": series.last_day(session, now),
        }


def timed(fn, reps: int) -> tuple[float, float]:
    fn()
    times = []
    for _ in range(reps):
        with stopwatch() as sw:
            fn()
        times.append(sw.s * 1000)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.95))]


@click.command()
@click.option("--database-url", required=True, help="A PostgreSQL server to make the scratch database on.")
@click.option("--jobs", default=1_000_000, show_default=True)
@click.option("--days", default=30, show_default=True, help="The jobs are spread over this many days.")
@click.option("--batch-size", default=500, show_default=True)
@click.option("--open", "open_", default=10, show_default=True, help="Batches still rendering.")
@click.option("--reps", default=20, show_default=True)
@click.option("--viewers", default=20, show_default=True, help="Consoles asking at once.")
@click.option("--keep", is_flag=True, help="Keep the scratch database.")
def main(
    database_url: str, jobs: int, days: int, batch_size: int, open_: int, reps: int, viewers: int, keep: bool
) -> None:
    """Time the console's queries over a large jobs table (PostgreSQL)."""
    name = f"synth_bench_console_{uuid.uuid4().hex[:8]}"
    admin = create_engine(database_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(database_url).set(database=name).render_as_string(hide_password=False)
    engine = make_engine(url)
    try:
        migrate.upgrade(engine)
        params = {
            "jobs": jobs,
            "batches": -(-jobs // batch_size),
            "size": batch_size,
            "open": open_,
            "span": days * 86400.0,
        }
        with stopwatch() as filled, engine.begin() as conn:
            for sql in FILL[:-1]:
                conn.execute(text(sql), params)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(FILL[-1]))
        click.echo(f"{jobs:,} jobs over {days} days written in {filled.s:.0f} s (commit {git_commit()})", err=True)
        _report(make_sessionmaker(engine), reps, viewers)
    finally:
        engine.dispose()
        if not keep:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _report(sessions, reps: int, viewers: int) -> None:
    now = datetime.now(UTC)

    def part(fn):
        def run():
            with sessions() as session:
                fn(session)

        return run

    rows = [
        ("batches in progress", part(lambda s: progress.open_batches(s, now))),
        ("latest failures", part(progress.latest_failures)),
        ("last 24 h aggregates", part(lambda s: series.last_day(s, now))),
        ("all (one build)", lambda: build(sessions)),
    ]
    click.echo("| query | median ms | p95 ms |\n|---|---|---|")
    for label, fn in rows:
        median, p95 = timed(fn, reps)
        click.echo(f"| {label} | {median:.1f} | {p95:.1f} |")
    with ThreadPoolExecutor(viewers) as pool:
        with stopwatch() as bare:
            list(pool.map(lambda _: build(sessions), range(viewers)))
        cache = SnapshotCache(lambda: build(sessions))
        with stopwatch() as cached:
            list(pool.map(lambda _: cache.get(), range(viewers)))
    click.echo(f"| {viewers} viewers at once, no cache (wall) | {bare.s * 1000:.0f} | |")
    click.echo(f"| {viewers} viewers at once, through the API's cache (wall) | {cached.s * 1000:.0f} | |")


if __name__ == "__main__":
    main()
