"""Chaos run: faults injected into real services while a corpus renders, with the same invariants
checked after each one.

    python -m ops.bench.chaos --database-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres \\
        --jobs 300 --workers 2 --faults kill-worker,term-worker,redis,database,db-backends,s3 \\
        --fault-seconds 60

It starts its own redis-server (append-only file, fsync always), moto's S3 server behind a TCP
proxy, a fresh PostgreSQL database (made on the server given, dropped at the end) behind another,
and ``--workers`` `synth worker` processes, which run the reconciler themselves (no `synth beat`).
For each fault it submits a corpus, waits until a tenth of it is done, injects the fault, and
waits for the batch to close:

- kill-worker: ``kill -9`` a worker and start another, ``--kills`` times over the fault's length;
- term-worker: SIGTERM a worker (what a supervisor or a scale-down sends) and start another as it
  stops, ``--kills`` times;
- redis: ``kill -9`` the redis-server, start it again from its append-only file;
- database, s3: the proxy drops every connection and refuses new ones, then lets them in again;
- db-backends: PostgreSQL terminates every backend of the run's database (``pg_terminate_backend``,
  as a failover or an operator does), ``--kills`` times over the fault's length.

Invariants (``check``): every job done, or failed with a reason; one object per done job and none
for others; the manifest equals the database; nothing stranded (the batch closed). Exit status 1
if any failed.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import create_engine, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from synth_testkit.faults import RedisProcess, TcpProxy
from synth_testkit.ports import free_port
from ops.bench import REPO
from pipeline.db import migrate
from pipeline.db.models import Batch, Job, JobStatus
from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.manifest import manifest_lines
from pipeline.storage.s3 import S3Store

FAULTS = ("kill-worker", "term-worker", "redis", "database", "db-backends", "s3")
WORDS = (
    "the committee reviewed every proposal carefully before the final vote was taken and then "
    "adjourned for lunch while the rain kept falling on the quiet harbour town"
).split()


@dataclass
class Options:
    database_url: str  # a PostgreSQL server to make the run's database on
    jobs: int = 300
    workers: int = 2
    faults: tuple[str, ...] = FAULTS
    fault_seconds: float = 60
    kills: int = 5
    visibility_timeout: int = 60
    settle_timeout: float = 900  # seconds a batch may take to close after its fault
    seed: int = 0


@dataclass
class Round:
    fault: str
    jobs: int
    done: int = 0
    failed: int = 0
    objects: int = 0
    recovered_s: float = 0.0  # fault over -> batch closed
    problems: list[str] = field(default_factory=list)


def check(sessions, store, batch_id: str) -> list[str]:
    """The invariants, as a list of what is wrong (empty: all hold)."""
    problems = []
    with sessions() as s:
        batch = s.get(Batch, batch_id)
        jobs = s.scalars(select(Job).where(Job.batch_id == batch_id)).all()
        expected = [
            (line["client_id"], line["status"], line["object_key"]) for line in manifest_lines(s, store, batch_id)
        ]
    open_jobs = [j.client_id for j in jobs if not j.status.terminal]
    if open_jobs:
        problems.append(f"{len(open_jobs)} jobs stranded open: {', '.join(open_jobs[:5])}")
    if unexplained := [j.client_id for j in jobs if j.status == JobStatus.FAILED and not j.error]:
        problems.append(f"{len(unexplained)} jobs failed without a reason")
    done_keys = sorted(j.object_key for j in jobs if j.status == JobStatus.DONE)
    objects = sorted(store.list(f"batches/{batch_id}/audio/"))
    if objects != done_keys:
        extra, missing = set(objects) - set(done_keys), set(done_keys) - set(objects)
        problems.append(
            f"objects differ from done jobs: {len(extra)} extra, {len(missing)} missing, "
            f"{len(done_keys)} done jobs for {len(objects)} objects"
        )
    if batch.finished_at is None or not batch.manifest_key:
        problems.append("the batch never closed")
    else:
        written = [
            tuple(_json(line)[k] for k in ("client_id", "status", "object_key"))
            for line in store.get(batch.manifest_key).decode().splitlines()
        ]
        if written != expected:
            problems.append("the manifest differs from the database")
    return problems


def _json(line: str) -> dict:
    import json

    return json.loads(line)


def corpus(n: int, rng: random.Random) -> str:
    return "".join(
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))).capitalize() + ".\n" for _ in range(n)
    )


class Rig:
    """The services and processes of one run; faults act on them."""

    def __init__(self, stack: ExitStack, opts: Options, root: Path) -> None:
        self.opts, self.root = opts, root
        self.redis = stack.enter_context(RedisProcess(root / "redis", free_port()))
        db_url = stack.enter_context(_fresh_database(opts.database_url))
        self.db_admin = create_engine(db_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
        url = make_url(db_url)
        self.db_proxy = stack.enter_context(TcpProxy((url.host, url.port or 5432)))
        self.sessions = make_sessionmaker(make_engine(db_url))
        s3_endpoint = stack.enter_context(_moto())
        self.s3_proxy = stack.enter_context(TcpProxy(("127.0.0.1", int(s3_endpoint.rsplit(":", 1)[1]))))
        bucket = f"chaos-{uuid.uuid4().hex[:8]}"
        self.store = S3Store(bucket=bucket, endpoint_url=s3_endpoint)
        self.store.client.create_bucket(Bucket=bucket)
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("SYNTH_")},
            "AWS_ACCESS_KEY_ID": "chaos",
            "AWS_SECRET_ACCESS_KEY": "chaos",
            "SYNTH_DATA_DIR": str(root / "data"),
            "SYNTH_REDIS_URL": self.redis.url,
            "SYNTH_DATABASE_URL": url.set(host="127.0.0.1", port=self.db_proxy.port).render_as_string(
                hide_password=False
            ),
            "SYNTH_S3_BUCKET": bucket,
            "SYNTH_S3_ENDPOINT_URL": f"http://127.0.0.1:{self.s3_proxy.port}",
            "SYNTH_VISIBILITY_TIMEOUT": str(opts.visibility_timeout),
            "SYNTH_RETRY_BACKOFF_MAX": "8",
            "SYNTH_RECONCILE_INTERVAL": "15",
            "SYNTH_ENGINE_THREADS": "1",
            "SYNTH_WORKER_CONCURRENCY": "1",
            "SYNTH_JOBS_PER_TASK": "4",
            "SYNTH_REUSE": "off",
        }  # faults must meet jobs that render, not copies
        self.procs: list[subprocess.Popen] = []
        stack.callback(self.stop_all)
        self.workers = [self.start("worker") for _ in range(opts.workers)]

    def start(self, *args: str) -> subprocess.Popen:
        log = open(self.root / f"{args[0]}-{len(self.procs)}.log", "ab")  # the child owns it
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", *args],
            cwd=REPO,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()

    def inject(self, fault: str, seconds: float, rng: random.Random) -> None:
        if fault in ("kill-worker", "term-worker"):
            for _ in range(self.opts.kills):
                victim = rng.choice(self.workers)
                os.kill(victim.pid, signal.SIGKILL if fault == "kill-worker" else signal.SIGTERM)
                self.workers[self.workers.index(victim)] = self.start("worker")
                victim.wait()  # a warm shutdown finishes the tasks in hand first
                time.sleep(seconds / self.opts.kills)
            return
        if fault == "db-backends":
            for _ in range(self.opts.kills):
                with self.db_admin.connect() as conn:
                    conn.execute(
                        text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                        )
                    )
                time.sleep(seconds / self.opts.kills)
            return
        cut, restore = {
            "redis": (self.redis.kill, self.redis.start),
            "database": (self.db_proxy.cut, self.db_proxy.restore),
            "s3": (self.s3_proxy.cut, self.s3_proxy.restore),
        }[fault]
        cut()
        time.sleep(seconds)
        restore()

    def submit(self, name: str, text_: str) -> str:
        path = self.root / f"{name}.txt"
        path.write_text(text_)
        done = subprocess.run(
            [sys.executable, "-m", "cli.main", "submit", str(path), "--no-wait", "--name", name],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise RuntimeError(f"submit failed: {done.stderr.decode()[-2000:]}")
        return done.stdout.decode().strip()

    def count(self, batch_id: str, *states: JobStatus) -> int:
        with self.sessions() as s:
            return len(s.scalars(select(Job.id).where(Job.batch_id == batch_id, Job.status.in_(states))).all())

    def closed(self, batch_id: str) -> bool:
        with self.sessions() as s:
            return s.get(Batch, batch_id).finished_at is not None


def run_round(rig: Rig, fault: str, rng: random.Random) -> Round:
    opts = rig.opts
    batch_id = rig.submit(f"chaos-{fault}-{uuid.uuid4().hex[:6]}", corpus(opts.jobs, rng))
    _wait(lambda: rig.count(batch_id, JobStatus.DONE) >= max(1, opts.jobs // 10), opts.settle_timeout)
    rig.inject(fault, opts.fault_seconds, rng)
    over = time.monotonic()
    _wait(lambda: rig.closed(batch_id), opts.settle_timeout)
    result = Round(fault, opts.jobs, recovered_s=time.monotonic() - over)
    result.done = rig.count(batch_id, JobStatus.DONE)
    result.failed = rig.count(batch_id, JobStatus.FAILED)
    result.objects = len(rig.store.list(f"batches/{batch_id}/audio/"))
    result.problems = check(rig.sessions, rig.store, batch_id)
    return result


def run(opts: Options) -> list[Round]:
    rng = random.Random(opts.seed)
    with tempfile.TemporaryDirectory(prefix="synth-chaos-") as tmp, ExitStack() as stack:
        rig = Rig(stack, opts, Path(tmp))
        return [run_round(rig, fault, rng) for fault in opts.faults]


def _wait(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except Exception:  # noqa: BLE001 — the database may be the fault; the check comes after
            pass
        time.sleep(0.5)
    return False


@contextmanager
def _fresh_database(server_url: str):
    name = f"synth_chaos_{uuid.uuid4().hex[:8]}"
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    engine = make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextmanager
def _moto():
    from moto.server import ThreadedMotoServer

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "chaos")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "chaos")
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def table(rounds: list[Round]) -> str:
    lines = [
        "| fault | jobs | done | failed | objects | closed after fault (s) | invariants |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.fault} | {r.jobs} | {r.done} | {r.failed} | {r.objects} | {r.recovered_s:.1f} | "
        f"{'hold' if not r.problems else '; '.join(r.problems)} |"
        for r in rounds
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--database-url", required=True, help="a PostgreSQL server URL (a database is made on it)")
    p.add_argument("--jobs", type=int, default=Options.jobs)
    p.add_argument("--workers", type=int, default=Options.workers)
    p.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of {', '.join(FAULTS)}")
    p.add_argument("--fault-seconds", type=float, default=Options.fault_seconds)
    p.add_argument("--kills", type=int, default=Options.kills)
    p.add_argument("--visibility-timeout", type=int, default=Options.visibility_timeout)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's server logs every request
    faults = tuple(f for f in a.faults.split(",") if f)
    if unknown := set(faults) - set(FAULTS):
        p.error(f"unknown faults: {', '.join(sorted(unknown))}")
    rounds = run(
        Options(
            database_url=a.database_url,
            jobs=a.jobs,
            workers=a.workers,
            faults=faults,
            fault_seconds=a.fault_seconds,
            kills=a.kills,
            visibility_timeout=a.visibility_timeout,
            seed=a.seed,
        )
    )
    print(table(rounds))
    return 1 if any(r.problems for r in rounds) else 0


if __name__ == "__main__":
    sys.exit(main())
