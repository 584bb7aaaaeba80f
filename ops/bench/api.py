"""The API benchmark: job-creation throughput and time to the first streamed byte.

    python -m ops.bench.api --database-url postgresql+psycopg://postgres@127.0.0.1:5432/synth_bench \
        --redis-url redis://127.0.0.1:6379/9 --markdown .bench/api-bench.md

1. `synth api` runs as its own process (uvicorn, one process), no worker running: jobs are written
   and enqueued, nothing renders. POST /v1/jobs from --threads client threads (one job each), then
   POST /v1/batches with 1,000 items each. Reported: requests/s and jobs/s.
2. The Redis db is flushed (the queued benchmark jobs are dropped), a `synth worker` (Piper, CPU) is
   started and warmed up, then POST /v1/audio/speech (wav, one sentence) --speech-runs times in a
   row: the time from sending the request to the first audio byte of the streamed body; median, p90.

The database must be one of its own (it is migrated to head); the Redis db too (it is flushed).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path


import click
import httpx
import redis

from ops.bench import REPO
from pipeline import api_keys
from pipeline.db import migrate
from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.hostinfo import cpu_name
from pipeline.live import redis_client_url
from synth_testkit.ports import free_port

SENTENCE = "The quick brown fox jumps over the lazy dog, and then it rests in the shade."
BOOT_TIMEOUT_S = 120


def _env(database_url: str, redis_url: str, data_dir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTH_")}
    env.update(
        SYNTH_DATABASE_URL=database_url,
        SYNTH_REDIS_URL=redis_url,
        SYNTH_DATA_DIR=data_dir,
        SYNTH_API_RATE_LIMIT="0",
        SYNTH_ENGINE_THREADS="2",
        SYNTH_REUSE="off",
    )  # a benchmark measures rendering: the same text again renders again
    return env


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "cli.main", *args],
            cwd=REPO,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def _wait_ready(url: str) -> None:
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit("the API did not become ready")


def _rate(client_factory, n: int, threads: int, body) -> tuple[float, int]:
    """(requests per second, failures) for n POSTs spread over ``threads`` clients."""
    local = threading.local()

    def one(i: int) -> bool:
        if not hasattr(local, "client"):
            local.client = client_factory()
        path, payload = body(i)
        return local.client.post(path, json=payload).status_code == 201

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(min(threads, n))))  # warm the connections
        started = time.perf_counter()
        ok = list(pool.map(one, range(n)))
        wall = time.perf_counter() - started
    return n / wall, ok.count(False)


def _first_byte(client: httpx.Client) -> float:
    started = time.perf_counter()
    with client.stream(
        "POST",
        "/v1/audio/speech",
        json={"model": "tts-1", "voice": "alloy", "input": SENTENCE, "response_format": "wav"},
    ) as r:
        r.raise_for_status()
        body = r.iter_raw()
        for chunk in body:
            if len(chunk) > 44:  # past the WAV header: audio
                first = time.perf_counter() - started
                break
        for _ in body:
            pass
    return first


@click.command()
@click.option("--database-url", required=True, help="PostgreSQL URL of a database of its own.")
@click.option("--redis-url", required=True, help="A Redis db of its own (it is flushed).")
@click.option("--jobs", default=1000, show_default=True, help="single-job POSTs")
@click.option("--batches", default=20, show_default=True, help="1,000-item batch POSTs")
@click.option("--threads", default=8, show_default=True, help="client threads")
@click.option("--speech-runs", default=10, show_default=True)
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path))
def main(database_url, redis_url, jobs, batches, threads, speech_runs, markdown) -> None:
    load_before = os.getloadavg()[0]
    migrate.upgrade(make_engine(database_url))
    with make_sessionmaker(make_engine(database_url))() as session:
        key = api_keys.create_key(session, name="bench").plaintext
        session.commit()
    flush = redis.Redis.from_url(redis_client_url(redis_url)).flushdb
    flush()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {key}"}
    with tempfile.TemporaryDirectory() as tmp:
        env, log = _env(database_url, redis_url, tmp), Path(tmp) / "bench.log"
        api = _start(["api", "--port", str(port)], env, log)
        try:
            _wait_ready(url)
            factory = lambda: httpx.Client(base_url=url, headers=headers, timeout=120)  # noqa: E731
            job_rps, job_fail = _rate(factory, jobs, threads, lambda i: ("/v1/jobs", {"text": f"{SENTENCE} {i}"}))
            items = [{"text": f"{SENTENCE} {i}"} for i in range(1000)]
            batch_rps, batch_fail = _rate(
                factory, batches, min(threads, 2), lambda i: ("/v1/batches", {"items": items})
            )
            flush()  # drop the benchmark's queued jobs before the worker starts
            worker = _start(["worker", "--cpu", "-c", "2"], env, log)
            try:
                with factory() as client:
                    _first_byte(client)  # waits out the worker's boot and warm-up; not counted
                    ttfb = [_first_byte(client) for _ in range(speech_runs)]
            finally:
                _stop(worker)
        finally:
            _stop(api)
    ttfb.sort()
    report = _markdown(
        database_url, jobs, job_rps, job_fail, batches, batch_rps, batch_fail, threads, ttfb, load_before
    )
    click.echo(report)
    if markdown:
        markdown.write_text(report, encoding="utf-8")


def _markdown(database_url, jobs, job_rps, job_fail, batches, batch_rps, batch_fail, threads, ttfb, load) -> str:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    db = make_engine(database_url).url.get_backend_name()
    p90 = ttfb[min(len(ttfb) - 1, int(round(0.9 * (len(ttfb) - 1))))]
    return f"""# API benchmark

{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit {commit}, {os.cpu_count()} cores ({cpu_name()}), database {db},
Redis on localhost; `synth api` (one uvicorn process) and the client on the same machine (1-minute
load average {load:.2f} at the start: the machine is shared, so these are lower bounds).
Produced by `python -m ops.bench.api` (see its docstring for the method).

| measure | result |
|---|---|
| POST /v1/jobs (one job each, {threads} client threads, {jobs} requests) | **{job_rps:.0f} requests/s** ({job_fail} failed) |
| POST /v1/batches (1,000 items each, {min(threads, 2)} client threads, {batches} requests) | **{batch_rps:.2f} requests/s = {batch_rps * 1000:,.0f} jobs/s** ({batch_fail} failed) |
| POST /v1/audio/speech to first audio byte (wav, Piper on the CPU, worker idle, {len(ttfb)} runs) | **median {statistics.median(ttfb) * 1000:.0f} ms**, p90 {p90 * 1000:.0f} ms, min {ttfb[0] * 1000:.0f} ms, max {ttfb[-1] * 1000:.0f} ms |

Job creation includes the key lookup, rate-limit counter, validation, the SQL insert and the Celery
message. The first byte includes the realtime queue hop, the worker's claim, Piper's first sentence
({len(SENTENCE)} characters, one sentence) and the Redis stream read.
"""


if __name__ == "__main__":
    main()
