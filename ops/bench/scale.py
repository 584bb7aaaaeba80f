"""Scaling benchmark: N workers (one per GPU) on one Redis and one database against one worker alone.

    # the 2-GPU machine (engine settings from SYNTH_* as for `synth worker`, e.g. SYNTH_MODEL=...):
    python -m ops.bench.scale --corpus ../shared/corpus/bench.txt --engine orpheus --gpus 0,1 \
        --json .bench/scale.json --markdown .bench/scale.md
    # CPU smoke run with Piper:
    python -m ops.bench.scale --corpus examples/corpus.txt --engine piper --cpu --workers 2 --lines 8

Each run: a fresh data folder (SQLite file, object folder), an embedded redis-server (or --redis-url,
--database-url), the workers started as `synth worker --gpu N` (or `--cpu`) subprocesses and waited
for until each one's heartbeat is in Redis (engine loaded and warmed up), a warm-up batch, then the
clock: submit the corpus, wait until every job is finished. Throughput = audio seconds / wall
seconds. Then `synth report` over the run's period must agree with the database: per worker, the
same jobs and audio seconds as job_metrics holds for that worker (workers on one host are told apart
by their name, host/gpuN). The baseline is the same with one worker on the first GPU.
Exit status 1 when a report row disagrees; the speedup goal (--goal, 1.9x) is reported, not enforced.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path


import click
import redis
from sqlalchemy import func, select

from ops.bench import REPO
from pipeline.corpus import parse_corpus
from pipeline.db import jobs as db
from pipeline.db.models import Job, JobMetrics
from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.live import redis_client_url
from ops.bench.cpu.services import services
from pipeline.reports import fleet
from pipeline.reports.compute import compute_report
from pipeline.settings import Settings
from pipeline.submit import BatchOptions, create_batch
from worker.app import make_app
from worker.enqueue import enqueue_batch

BOOT_TIMEOUT_S = 900
BATCH_TIMEOUT_S = 3600
POLL_S = 0.2


def read_lines(path: Path, lines: int | None) -> bytes:
    rows = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return ("\n".join(rows[:lines] if lines else rows) + "\n").encode()


def worker_env(
    slot: str, broker: str, database: str, workdir: Path, cpu: bool, index: int, base: dict[str, str] | None = None
) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update(
        SYNTH_REDIS_URL=broker,
        SYNTH_DATABASE_URL=database,
        SYNTH_DATA_DIR=str(workdir),
        SYNTH_STORAGE_DIR=str(workdir / "objects"),
        SYNTH_REUSE="off",
    )  # each run renders the corpus: none copies the one before
    env.pop("SYNTH_WORKER_NAME", None)  # `--gpu N` names a worker host/gpuN itself
    if cpu:  # CPU workers on one host need a name each
        env["SYNTH_WORKER_NAME"] = f"{platform.node()}/cpu{index}"
    return env


@contextlib.contextmanager
def worker_processes(
    slots: list[str], cpu: bool, broker: str, database: str, workdir: Path, base_env: dict[str, str] | None = None
) -> Iterator[list[tuple[subprocess.Popen, Path]]]:
    """Start one `synth worker` per slot (``base_env``: the environment to start from, by default
    this process's); yield each process with its log, and stop them on the way out."""
    procs: list[tuple[subprocess.Popen, Path]] = []
    try:
        for i, slot in enumerate(slots):
            log = workdir / f"worker-{i}.log"
            args = ["--cpu"] if cpu else ["--gpu", slot]
            with open(log, "wb") as f:
                procs.append(
                    (
                        subprocess.Popen(
                            [sys.executable, "-m", "cli.main", "worker", *args, "--loglevel", "WARNING"],
                            cwd=REPO,
                            env=worker_env(slot, broker, database, workdir, cpu, i, base_env),
                            stdout=f,
                            stderr=subprocess.STDOUT,
                            start_new_session=True,
                        ),
                        log,
                    )
                )
        yield procs
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc, _ in procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


@contextlib.contextmanager
def workers(slots: list[str], cpu: bool, broker: str, database: str, workdir: Path) -> Iterator[list[str]]:
    """Start one `synth worker` per slot; yield their names once each has a heartbeat in Redis."""
    with worker_processes(slots, cpu, broker, database, workdir) as procs:
        yield wait_heartbeats(procs, broker)


def wait_heartbeats(procs, broker: str) -> list[str]:
    """Each process's worker name, in order, once every one has a heartbeat in Redis (its engine
    loaded and warmed up)."""
    client = redis.Redis.from_url(redis_client_url(broker))
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    pids = {str(p.pid) for p, _ in procs}
    while time.monotonic() < deadline:
        for proc, log in procs:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-3000:]
                raise click.ClickException(f"worker exited ({proc.returncode}):\n{tail}")
        beats = {w["pid"]: w["name"] for w in fleet.workers(client) if w.get("pid") in pids}
        if len(beats) == len(procs):
            return [beats[str(p.pid)] for p, _ in procs]
        time.sleep(0.5)
    raise click.ClickException(f"workers did not boot within {BOOT_TIMEOUT_S} s; see {procs[0][1]}")


def submit(app, sessions, settings: Settings, data: bytes, name: str) -> str:
    corpus = parse_corpus(data, source=name, max_line_chars=settings.max_line_chars)
    with sessions() as session:
        batch = create_batch(session, settings, corpus, BatchOptions(name=name), source=name)
        session.commit()
    enqueue_batch(app, sessions, batch.id, settings.jobs_per_task)
    return batch.id


def wait_batch(sessions, batch_id: str) -> None:
    deadline = time.monotonic() + BATCH_TIMEOUT_S
    while time.monotonic() < deadline:
        with sessions() as session:
            if db.batch_finished(session, batch_id):
                return
        time.sleep(POLL_S)
    raise click.ClickException(f"batch {batch_id} did not finish within {BATCH_TIMEOUT_S} s")


def per_worker_truth(sessions, batch_id: str) -> dict[str, dict]:
    """What each worker did, straight from job_metrics: the reference the report must match."""
    with sessions() as session:
        rows = session.execute(
            select(JobMetrics.worker_host, func.count(), func.sum(JobMetrics.audio_s))
            .join(Job, Job.id == JobMetrics.job_id)
            .where(Job.batch_id == batch_id)
            .group_by(JobMetrics.worker_host)
        )
        return {host: {"jobs": n, "audio_s": float(audio or 0)} for host, n, audio in rows}


def run(slots: list[str], cpu: bool, data: bytes, warm: bytes, redis_url: str | None, database_url: str | None) -> dict:
    with (
        tempfile.TemporaryDirectory(prefix="synth-scale-") as tmp,
        services(redis_url, database_url, Path(tmp)) as (broker, database),
    ):
        workdir = Path(tmp)
        settings = Settings(data_dir=workdir, redis_url=broker, database_url=database, storage_dir=workdir / "objects")
        app = make_app(settings, broker)
        engine = make_engine(database)
        sessions = make_sessionmaker(engine)
        with workers(slots, cpu, broker, database, workdir) as names:
            wait_batch(sessions, submit(app, sessions, settings, warm, "warm-up"))
            time.sleep(1.0)  # the warm-up's last finish is outside the measured period
            started = datetime.now(UTC)
            clock = time.perf_counter()
            batch_id = submit(app, sessions, settings, data, "scale")
            wait_batch(sessions, batch_id)
            wall = time.perf_counter() - clock
            ended = datetime.now(UTC) + timedelta(seconds=1)
        truth = per_worker_truth(sessions, batch_id)
        with sessions() as session:
            errors = [
                e
                for (e,) in session.execute(
                    select(Job.error).where(Job.batch_id == batch_id, Job.error.is_not(None)).limit(3)
                )
            ]
        with sessions() as session:
            report = compute_report(session, started, ended, compare=False)
        engine.dispose()
    rows = {r.key: r for r in report.throughput["worker_host"]}
    checks = [_check(name, truth.get(name), rows.get(name)) for name in names]
    audio = sum(t["audio_s"] for t in truth.values())
    return {
        "workers": names,
        "wall_s": wall,
        "audio_s": audio,
        "jobs": sum(t["jobs"] for t in truth.values()),
        "failed": report.jobs_failed,
        "x_realtime_wall": audio / wall,
        "per_worker": [
            {
                "name": n,
                **(truth.get(n) or {"jobs": 0, "audio_s": 0.0}),
                "busy_s": rows[n].busy_s if n in rows else 0.0,
                "x_realtime_busy": rows[n].x_realtime if n in rows else None,
                "device": ", ".join(rows[n].device_types) if n in rows else "",
            }
            for n in names
        ],
        "report_matches": all(c["ok"] for c in checks),
        "checks": checks,
        "errors": errors,
    }


def _check(name: str, truth: dict | None, row) -> dict:
    if truth is None or row is None:
        return {"worker": name, "ok": False, "why": "the worker did no job" if truth is None else "no report row"}
    ok = row.jobs == truth["jobs"] and abs(row.audio_s - truth["audio_s"]) <= 1e-6 * max(1.0, truth["audio_s"])
    return {
        "worker": name,
        "ok": ok,
        "report_jobs": row.jobs,
        "db_jobs": truth["jobs"],
        "report_audio_s": row.audio_s,
        "db_audio_s": truth["audio_s"],
    }


def markdown(result: dict) -> str:
    out = [
        f"# Scaling: {result['engine']} on {result['machine']['host']} ({result['date']}, {result['commit']})",
        "",
        f"Corpus {result['corpus']} ({result['lines']} lines). Throughput = audio s / wall s.",
        "",
        "| run | workers | jobs | failed | audio s | wall s | x real time | report matches DB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, r in result["runs"].items():
        out.append(
            f"| {label} | {len(r['workers'])} | {r['jobs']} | {r['failed']} | {r['audio_s']:.1f} | "
            f"{r['wall_s']:.1f} | {r['x_realtime_wall']:.2f} | {'yes' if r['report_matches'] else 'NO'} |"
        )
    out += [
        "",
        "| run | worker | device | jobs | audio s | busy s | x real time (busy) |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, r in result["runs"].items():
        for w in r["per_worker"]:
            xrt = f"{w['x_realtime_busy']:.2f}" if w["x_realtime_busy"] else "–"
            out.append(
                f"| {label} | {w['name']} | {w['device']} | {w['jobs']} | {w['audio_s']:.1f} | "
                f"{w['busy_s']:.1f} | {xrt} |"
            )
    if result.get("speedup") is not None:
        verdict = "meets" if result["speedup"] >= result["goal"] else "is BELOW"
        out += ["", f"Speedup {result['speedup']:.2f}x over one worker: {verdict} the {result['goal']}x goal."]
    return "\n".join(out) + "\n"


def _commit() -> str:
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or "unknown"
        )
    except OSError:
        return "unknown"


@click.command()
@click.option("--corpus", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True)
@click.option("--engine", help="SYNTH_ENGINE for the workers [default: the environment's].")
@click.option("--gpus", default="0,1", show_default=True, help="GPU indices, one worker each.")
@click.option("--cpu", is_flag=True, help="CPU workers (`synth worker --cpu`) instead of GPUs.")
@click.option("--workers", "n_workers", type=int, help="With --cpu: how many workers [default: 2].")
@click.option("--lines", type=int, help="Only the first N non-empty lines.")
@click.option("--warm-lines", type=int, default=8, show_default=True, help="Warm-up batch, not timed.")
@click.option("--baseline/--no-baseline", default=True, show_default=True, help="Also run one worker alone.")
@click.option("--goal", type=float, default=1.9, show_default=True)
@click.option("--redis-url", help="Use this Redis (a db of its own) instead of an embedded one.")
@click.option("--database-url", help="Use this database instead of a fresh SQLite file per run.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--markdown", "md_path", type=click.Path(dir_okay=False, path_type=Path))
def main(
    corpus, engine, gpus, cpu, n_workers, lines, warm_lines, baseline, goal, redis_url, database_url, json_path, md_path
) -> None:
    if engine:
        os.environ["SYNTH_ENGINE"] = engine
    slots = [str(i) for i in range(n_workers or 2)] if cpu else [g.strip() for g in gpus.split(",") if g.strip()]
    data, warm = read_lines(corpus, lines), read_lines(corpus, warm_lines)
    runs = {f"{len(slots)} workers": run(slots, cpu, data, warm, redis_url, database_url)}
    if baseline and len(slots) > 1:
        runs["1 worker"] = run(slots[:1], cpu, data, warm, redis_url, database_url)
    many, one = runs[f"{len(slots)} workers"], runs.get("1 worker")
    result = {
        "engine": os.environ.get("SYNTH_ENGINE", "piper"),
        "corpus": str(corpus),
        "lines": data.count(b"\n"),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(),
        "machine": {"host": platform.node(), "python": platform.python_version()},
        "goal": goal,
        "runs": runs,
        "speedup": many["x_realtime_wall"] / one["x_realtime_wall"] if one and one["x_realtime_wall"] else None,
    }
    text = markdown(result)
    click.echo(text)
    if md_path:
        md_path.write_text(text)
    if json_path:
        json_path.write_text(json.dumps(result, indent=2))
    if not all(r["report_matches"] for r in runs.values()):
        raise click.ClickException("the report's per-worker rows do not match what each worker did")


if __name__ == "__main__":
    main()
