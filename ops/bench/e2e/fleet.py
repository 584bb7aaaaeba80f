"""Several workers behind one API, one Redis and one database: the corpus made long enough to keep
every worker busy, how the streams spread over the workers, and what the shared services spend."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis
from sqlalchemy import select, text

from ops.bench.e2e.streams import Stream, summarize
from pipeline.db.models import JobMetrics
from pipeline.db.session import make_engine, make_sessionmaker

RECORD_WAIT_S = 15.0  # how long spread() waits for the streams' jobs to be recorded

# Copy k of the corpus (k >= 1) starts each line with its own word, so no two lines of a repeated
# corpus are the same text: a render kept for one line could never serve another.
LEADS = (
    "Now",
    "Then",
    "Still",
    "Again",
    "Also",
    "Meanwhile",
    "Later",
    "Indeed",
    "Today",
    "Tonight",
    "Here",
    "Next",
    "Besides",
    "Anyway",
    "Otherwise",
    "Instead",
    "Afterwards",
    "Lately",
    "Finally",
    "Honestly",
    "Naturally",
    "Clearly",
    "Sadly",
    "Luckily",
)


def lead(copy: int) -> str:
    """The words copy ``copy`` puts before each line: none for copy 0, then one of LEADS, then two."""
    words, k = [], copy
    while k > 0:
        k -= 1
        words.append(LEADS[k % len(LEADS)])
        k //= len(LEADS)
    return ", ".join(reversed(words)).capitalize()


def distinct_copies(lines: list[str], copies: int, first: int = 0) -> list[str]:
    """``copies`` copies of ``lines``, copy ``first`` first, each copy's lines led by its own words."""
    out = []
    for copy in range(first, first + copies):
        words = lead(copy)
        out += [f"{words}, {line[:1].lower()}{line[1:]}" if words else line for line in lines]
    return out


def worker_slots(gpus: str | None, gpu: int, cpu: bool, workers: int) -> list[str]:
    """One slot per worker: the GPU indices of ``--gpus`` (or ``--gpu``), or ``workers`` CPU slots."""
    if cpu:
        return [str(i) for i in range(max(1, workers))]
    slots = [g.strip() for g in (gpus or "").split(",") if g.strip()]
    return slots or [str(gpu)]


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of a process so far (0 when it is gone or unknown)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, TypeError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def engine_pid(worker_pid: int) -> int | None:
    """The worker's engine process (SYNTH_ENGINE_PROCESS=separate), if it has one."""
    for task in Path(f"/proc/{worker_pid}/task").glob("*"):
        for child in (task / "children").read_text().split():
            if "spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes().decode(errors="replace"):
                return int(child)
    return None


def worker_pids(procs: list[subprocess.Popen]) -> dict[str, int | None]:
    """Each worker's process and its engine's, named worker/engine (one worker) or workerN/engineN."""
    out: dict[str, int | None] = {}
    for i, proc in enumerate(procs):
        suffix = "" if len(procs) == 1 else str(i)
        out[f"worker{suffix}"], out[f"engine{suffix}"] = proc.pid, engine_pid(proc.pid)
    return out


def db_transactions(db_url: str) -> int | None:
    """PostgreSQL's transactions committed and rolled back in this database so far; None for
    SQLite, which keeps no such count."""
    if not db_url.startswith("postgresql"):
        return None
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    text("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()")
                ).scalar_one()
            )
    finally:
        engine.dispose()


@dataclass
class Meter:
    """The shared services' load over a period: Redis commands a second and its CPU (from its
    INFO), the database's transactions a second, and each named process's CPU share (cores)."""

    client: redis.Redis
    db_url: str
    pids: dict[str, int | None]
    _start: dict = field(default_factory=dict)

    def _read(self) -> dict:
        stats, cpu = self.client.info("stats"), self.client.info("cpu")
        return {
            "t": time.monotonic(),
            "redis_cmds": stats["total_commands_processed"],
            "redis_cpu": cpu["used_cpu_sys"] + cpu["used_cpu_user"],
            "db": db_transactions(self.db_url),
            "cpu": {name: cpu_seconds(pid) for name, pid in self.pids.items()},
        }

    def start(self) -> None:
        self._start = self._read()

    def stop(self) -> dict:
        end, start = self._read(), self._start
        wall = max(1e-9, end["t"] - start["t"])
        db = None if end["db"] is None else round((end["db"] - start["db"]) / wall, 1)
        return {
            "wall_s": round(wall, 2),
            "redis_ops_per_s": round((end["redis_cmds"] - start["redis_cmds"]) / wall),
            "redis_cpu": round((end["redis_cpu"] - start["redis_cpu"]) / wall, 3),
            "db_transactions_per_s": db,
            "cpu_share": {name: round((end["cpu"][name] - start["cpu"][name]) / wall, 2) for name in self.pids},
        }


def spread(db_url: str, streams: list[Stream]) -> dict[str, dict]:
    """The streams by the worker that rendered them (job_metrics' worker host, host/gpuN): how
    many each took, and their first byte and dry streams as the client saw them."""
    ids = [s.job_id for s in streams if s.job_id]
    # A stream ends with its job's last chunk, before the worker has stored the file and written
    # the job's metrics: wait for them (a failed job may never have its row: not for long).
    sessions, deadline = make_sessionmaker(make_engine(db_url)), time.monotonic() + RECORD_WAIT_S
    while True:
        with sessions() as session:
            query = select(JobMetrics.job_id, JobMetrics.worker_host).where(JobMetrics.job_id.in_(ids))
            host = dict(session.execute(query).all())
        if len(host) >= len(set(ids)) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    by_worker: dict[str, list[Stream]] = {}
    for s in streams:
        by_worker.setdefault(host.get(s.job_id) or "unrecorded", []).append(s)
    keys = (
        "streams",
        "errors",
        "ttfb_p50_ms",
        "ttfb_p99_ms",
        "streams_dry",
        "streams_dry_100ms",
        "streams_dry_200ms",
        "rtf_max",
    )
    return {name: {k: v for k, v in summarize(group).items() if k in keys} for name, group in sorted(by_worker.items())}
