"""The CPU pipeline benchmark: one entry point, one timing helper.

    python -m ops.bench.cpu pipeline --lines 120 --repeat 2 --format wav --format mp3
    python -m ops.bench.cpu enqueue --lines 100000 --database-url sqlite --database-url postgresql+psycopg://...
    python -m ops.bench.cpu all --markdown .bench/cpu-bench.md

`pipeline` times (a) the bare Piper engine on the text chunks the renderer would make, in the
renderer's order, and (b) the full path: submit -> Redis -> a real `synth worker` (booted and warmed
before the clock starts) -> engine -> join -> encode -> store -> metrics in SQL. Overhead % is
(full wall - bare wall) / bare wall. `enqueue` times parse, bulk insert and enqueue of a large corpus
with no worker running, checks the message count in Redis and removes what it wrote.

Services: --redis-url (default SYNTH_REDIS_URL, else a private embedded redis-server) and
--database-url (default SYNTH_DATABASE_URL, else a temporary SQLite file; "sqlite" names one).
Use a Redis db of its own: the benchmark refuses to start if its queues already hold messages.

This file is the command line; the work lives beside it in ops/bench/cpu/: workload.py (corpus
slices, the renderer's requests), services.py (Redis, database, cleanup), worker_process.py (`synth
worker` as a child), runs.py (the measurements), report.py (tables, JSON, markdown); the stopwatch
is ops/bench/timing.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from ops.bench import SHARED_CORPUS
from ops.bench.cpu.report import emit
from ops.bench.cpu.runs import bench_enqueue, bench_pipeline
from pipeline.settings import FORMATS


def _common(f):
    for option in reversed(
        [
            click.option(
                "--corpus",
                type=click.Path(exists=True, dir_okay=False, path_type=Path),
                default=SHARED_CORPUS,
                show_default=True,
            ),
            click.option("--repeat", type=int, default=2, show_default=True, help="Runs of each measurement."),
            click.option(
                "--redis-url",
                envvar="SYNTH_REDIS_URL",
                help="A Redis db of the benchmark's own [default: SYNTH_REDIS_URL, else embedded].",
            ),
            click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path)),
            click.option("--markdown", "md_path", type=click.Path(dir_okay=False, path_type=Path)),
        ]
    ):
        f = option(f)
    return f


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def cli() -> None:
    """Benchmarks of synth's CPU pipeline (Piper): throughput, TTFB, full-path overhead, enqueue."""


@cli.command()
@_common
@click.option("--lines", type=int, default=120, show_default=True, help="First N lines of the corpus.")
@click.option(
    "--format",
    "formats",
    type=click.Choice(FORMATS),
    multiple=True,
    default=("wav",),
    show_default=True,
    help="Output format of the full path; repeat for several.",
)
@click.option(
    "--database-url", envvar="SYNTH_DATABASE_URL", help="[default: SYNTH_DATABASE_URL, else a temporary SQLite file]"
)
def pipeline(corpus, repeat, redis_url, json_path, md_path, lines, formats, database_url) -> None:
    """Bare engine vs the full path (Redis, worker, database, storage, encoding) on one slice."""
    emit(bench_pipeline(corpus, lines, formats, repeat, redis_url, database_url), None, json_path, md_path)


@cli.command()
@_common
@click.option("--lines", type=int, default=100_000, show_default=True, help="Corpus size (lines repeated).")
@click.option(
    "--database-url",
    "database_urls",
    multiple=True,
    help="Repeat for several; 'sqlite' is a temporary SQLite file [default: sqlite, plus SYNTH_DATABASE_URL if set].",
)
def enqueue(corpus, repeat, redis_url, json_path, md_path, lines, database_urls) -> None:
    """Parse + bulk insert + enqueue of a large corpus, no worker running."""
    emit(None, bench_enqueue(corpus, lines, repeat, redis_url, _database_urls(database_urls)), json_path, md_path)


@cli.command(name="all")
@_common
@click.option("--lines", type=int, default=120, show_default=True, help="Pipeline slice.")
@click.option("--enqueue-lines", type=int, default=100_000, show_default=True)
@click.option("--format", "formats", type=click.Choice(FORMATS), multiple=True, default=("wav",), show_default=True)
@click.option(
    "--database-url", "database_urls", multiple=True, help="The pipeline runs on the last one; enqueue on each."
)
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
