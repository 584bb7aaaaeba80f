"""A book through `synth submit -o` as a user runs it (embedded: the command starts its own
`synth worker`): how long its jobs took to render, and how long the command ran on after the last
of them to write the assembled files, as a share of the render. The book is the benchmark corpus
in Markdown: each line a paragraph, ``--lines`` of them (or as many as make ``--words``) in
``--chapters`` chapters, each under its own heading. Where the corpus is too short, it is repeated,
and each line that appeared before is led by words of its own (as ops/bench/e2e's --repeat leads
each copy), so no two paragraphs are the same text, as in a real book.

    python -m ops.bench.documents --lines 200 --chapters 10
    python -m ops.bench.documents --format mp3 --json .bench/documents.json
    # on a GPU host: a 100,000-word book rendered by Orpheus on GPU 0
    python -m ops.bench.documents --engine orpheus --model /models/orpheus --gpu 0 --words 100000 \\
        --chapters 30 --json .bench/documents-orpheus.json

Nothing of the caller's SYNTH_* environment reaches synth: it runs with SYNTH_ENGINE (--engine),
SYNTH_MODEL (--model), a data folder of its own, SYNTH_REUSE=off and each --env. --gpu N shows the
command and the worker it starts GPU N alone (CUDA_VISIBLE_DEVICES, as `synth worker --gpu N`), and
sets SYNTH_DEVICE=cuda.

The render is the batch's creation to its last job's end (the database's times); on the GPU it
includes the embedded worker's boot (loading the model, capturing its graphs), reported apart as
the first job's start. The assembly is that end to the whole file's writing (its modification
time), the time a user waits for the files once the audio is rendered; the command's exit comes
after it, once the embedded worker it started has shut down.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import func, select

from ops.bench import REPO, SHARED_CORPUS, git_commit
from ops.bench.e2e.fleet import distinct_copies
from pipeline.db.models import Batch, Job, JobMetrics
from pipeline.documents.plan import place_of
from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.hostinfo import cpu_name

DEFAULT_LINES = 200


def paragraphs(corpus: Path, *, lines: int = 0, words: int = 0) -> list[str]:
    """The corpus's lines, ``lines`` of them or as many as first reach ``words`` words, the corpus
    repeated as often as that takes, and no two the same text: a line's first appearance is as the
    corpus has it, each later one (the corpus's own repeats, then its copies) led by the words of
    the line's next copy (ops/bench/e2e/fleet.py) that make a text of its own."""
    base = [line.strip() for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not base or not (lines or words):
        raise SystemExit(f"{corpus}: no lines to read, or none asked for")
    out: list[str] = []
    appeared: dict[str, int] = {}
    used: set[str] = set()
    own = set(base)
    count = 0
    for line in itertools.cycle(base):
        if (lines and len(out) >= lines) or (words and count >= words):
            return out
        text = line
        while text in used or (text != line and text in own):  # a lead may make a line the corpus has
            appeared[line] = appeared.get(line, 0) + 1
            text = distinct_copies([line], 1, first=appeared[line])[0]
        used.add(text)
        out.append(text)
        count += len(text.split())
    raise AssertionError("unreachable")


def book(text: list[str], chapters: int) -> str:
    per = -(-len(text) // chapters)
    parts = ["# Bench Book\n"]
    for n in range(chapters):
        parts += [f"## Chapter {n + 1}\n", *text[n * per : (n + 1) * per]]
    return "\n\n".join(parts) + "\n"


def times(data_dir: Path) -> dict:
    """The batch's creation, its jobs' first start and last end, the audio they rendered and the
    devices that rendered it."""
    sessions = make_sessionmaker(make_engine(f"sqlite:///{data_dir / 'synth.db'}"))
    with sessions() as session:
        created = session.scalar(select(Batch.created_at))
        first, last = session.execute(select(func.min(Job.started_at), func.max(Job.finished_at))).one()
        audio_s = session.scalar(select(func.sum(JobMetrics.audio_s)))
        jobs = session.scalar(select(func.count(Job.id)))
        devices = sorted(d for d in session.scalars(select(JobMetrics.device_type).distinct()) if d)
        rows = session.execute(select(Job.client_id, Job.queue, Job.started_at, Job.finished_at)).all()
    spans: list[list] = []
    utc = lambda t: t if t.tzinfo else t.replace(tzinfo=UTC)  # noqa: E731 (sqlite keeps no zone)
    since = lambda t: (utc(t) - utc(created)).total_seconds()  # noqa: E731
    chapters: dict[int, list[tuple[float, float]]] = {}
    queues: dict[str, list[tuple[float, float]]] = {}
    for client_id, queue, started, finished in rows:
        place = place_of(client_id)
        if started is None or finished is None:
            continue
        span = (since(started), since(finished))
        spans.append([client_id, queue, round(span[0], 3), round(span[1], 3)])
        queues.setdefault(queue, []).append(span)
        if place is not None:
            chapters.setdefault(place.chapter, []).append(span)
    return {
        # per chapter and per length bucket's queue: its jobs' first, median and last start, and
        # median and last end (s from the batch's creation): the order the worker reached them in
        "chapter_spans": {n: spread(chapters[n]) for n in sorted(chapters)},
        "queue_spans": {q: spread(v) for q, v in sorted(queues.items())},
        "job_spans": sorted(spans),
        "created": utc(created),
        "first_start": utc(first),
        "last_end": utc(last),
        "audio_s": audio_s,
        "jobs": jobs,
        "devices": devices,
    }


def chapters_encoded(data_dir: Path, created: datetime) -> list[float]:
    """When each chapter's encoding ended (s from the batch's creation), in the chapters' order:
    the modification time of its cached JSON in the object folder, written last
    (pipeline/documents/cache.py)."""
    ends: dict[int, float] = {}
    for meta in (data_dir / "objects" / "batches").glob("*/document/chapters/*.json"):
        n = int(meta.name.split("-", 1)[0])
        at = datetime.fromtimestamp(meta.stat().st_mtime, UTC)
        ends[n] = (at - created).total_seconds()
    return [ends[n] for n in sorted(ends)]


def spread(spans: list[tuple[float, float]]) -> dict:
    starts, ends = sorted(s for s, _ in spans), sorted(e for _, e in spans)
    mid = len(spans) // 2
    return {
        "jobs": len(spans),
        "start": [round(starts[0], 1), round(starts[mid], 1), round(starts[-1], 1)],
        "end": [round(ends[mid], 1), round(ends[-1], 1)],
    }


def synth_env(args, data_dir: Path) -> dict[str, str]:
    """What the synth processes run with: none of the caller's SYNTH_* settings, the engine and
    model asked for, and --env last, so it can set anything."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTH_")}
    path = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])  # the caller's packages too
    env.update(
        SYNTH_DATA_DIR=str(data_dir), PYTHONPATH=path, SYNTH_ENGINE=args.engine, SYNTH_REUSE="off"
    )  # every run renders: none copies the last
    if args.model:
        env["SYNTH_MODEL"] = str(args.model)
    if args.gpu is not None:  # what `synth worker --gpu N` sets (worker/gpu.py), for the worker submit starts
        env["CUDA_VISIBLE_DEVICES"] = str(args.gpu)
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        # A GPU torch cannot see fails the run at the worker's boot, rather than the engine's
        # "auto" rendering the book on the CPU for hours.
        env["SYNTH_DEVICE"] = "cuda"
    env.update(args.env)
    return env


def run(args) -> dict:
    text = paragraphs(args.corpus, lines=args.lines or 0, words=args.words or 0)
    with tempfile.TemporaryDirectory(prefix="synth-bench-documents-") as tmp:
        root = Path(tmp)
        (root / "book.md").write_text(book(text, args.chapters), encoding="utf-8")
        started = datetime.now(UTC)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "cli.main",
                "submit",
                str(root / "book.md"),
                "--format",
                args.format,
                "-o",
                str(root / "out"),
            ],
            cwd=REPO,
            env=synth_env(args, root / "data"),
            capture_output=True,
        )
        ended = datetime.now(UTC)
        if done.returncode != 0:
            worker_log = root / "data" / "worker.log"
            tail = worker_log.read_text(errors="replace")[-2000:] if worker_log.exists() else ""
            sys.exit(
                f"synth submit failed ({done.returncode}):\n{done.stderr.decode(errors='replace')[-2000:]}"
                + (f"\nthe embedded worker's log ends:\n{tail}" if tail else "")
            )
        t = times(root / "data")
        encoded = chapters_encoded(root / "data", t["created"])
        if args.jobs_json:
            args.jobs_json.parent.mkdir(parents=True, exist_ok=True)
            args.jobs_json.write_text(json.dumps(t["job_spans"]) + "\n")
        listed = json.loads((root / "out" / "chapters.json").read_text(encoding="utf-8"))
        written = datetime.fromtimestamp((root / "out" / listed["file"]).stat().st_mtime, UTC)
    render_s = (t["last_end"] - t["created"]).total_seconds()
    assembly_s = (written - t["last_end"]).total_seconds()
    command_s = (ended - started).total_seconds()
    done = [span["end"][1] for span in t["chapter_spans"].values()]
    return {
        "date": ended.date().isoformat(),
        "commit": git_commit(),
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "engine": args.engine,
        "model": str(args.model or ""),
        "gpu": args.gpu,
        "env": dict(args.env),
        "devices": t["devices"],
        "format": args.format,
        "lines": len(text),
        "words": sum(len(line.split()) for line in text),
        "chapters": len(listed["chapters"]),
        "jobs": t["jobs"],
        "audio_s": round(listed["duration_s"], 1),
        "render_s": round(render_s, 2),
        "x_real_time": round(listed["duration_s"] / render_s, 1),
        "first_start_s": round((t["first_start"] - t["created"]).total_seconds(), 2),
        "assembly_s": round(assembly_s, 2),
        "assembly_share": round(assembly_s / render_s, 4),
        # when each chapter's last job ended, in the chapters' order: what the encoding ahead
        # (pipeline/documents/ahead.py) had to start from
        "chapters_done_s": done,
        # when each chapter's encoding ended, in the chapters' order: the assembly waits for the last
        "chapters_encoded_s": [round(at, 1) for at in encoded],
        # the whole file's join (and its listing) after the last chapter's encoding: all of it
        # where the join waits for every chapter, the last chapter's share where it starts once
        # their marks are known (pipeline/documents/assemble.py)
        "join_s": round(assembly_s + render_s - max(encoded), 2) if encoded else None,
        # the jobs that took longest from their claim to their end: what held their chapter back
        "slowest_jobs": [
            [client_id, round(end - start, 1)]
            for client_id, _, start, end in sorted(t["job_spans"], key=lambda j: j[2] - j[3])[:5]
        ],
        "chapter_spans": t["chapter_spans"],
        "queue_spans": t["queue_spans"],
        # chapters whose last job ended in the last tenth of the render: encoded after it
        "chapters_in_last_tenth": sum(1 for d in done if d > 0.9 * render_s),
        "exit_after_last_job_s": round((ended - t["last_end"]).total_seconds(), 2),
        "start_s": round((t["created"] - started).total_seconds(), 2),
        "command_s": round(command_s, 2),
        "command_x_real_time": round(listed["duration_s"] / command_s, 1),
    }


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not (sep and key):
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m ops.bench.documents", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument(
        "--corpus",
        type=Path,
        default=SHARED_CORPUS,
        help="one paragraph a line [default: shared/corpus/bench.txt beside the checkout]",
    )
    size = ap.add_mutually_exclusive_group()
    size.add_argument(
        "--lines",
        type=int,
        help=f"paragraphs, a corpus line each, the corpus repeated past its end [default: {DEFAULT_LINES}]",
    )
    size.add_argument(
        "--words", type=int, help="paragraphs until the book has this many words, the corpus repeated past its end"
    )
    ap.add_argument("--chapters", type=int, default=10)
    ap.add_argument("--format", default="m4b", choices=("m4b", "mp3", "wav", "flac"))
    ap.add_argument(
        "--engine",
        choices=("piper", "orpheus"),
        default="piper",
        help="SYNTH_ENGINE: piper (the default, the CPU) or orpheus (a GPU; needs --model)",
    )
    ap.add_argument(
        "--model",
        type=Path,
        help="SYNTH_MODEL: an Orpheus checkpoint folder, or a Piper voice's .onnx [default: Piper's own voice]",
    )
    ap.add_argument(
        "--gpu",
        type=int,
        metavar="N",
        help="render on GPU N alone: CUDA_VISIBLE_DEVICES=N and SYNTH_DEVICE=cuda\n"
        "[default: the engine's auto: the first GPU torch sees, else the CPU]",
    )
    ap.add_argument(
        "--env",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set for every synth process, after the settings above (repeatable)",
    )
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument(
        "--jobs-json", type=Path, help="write each job's client id, queue, start and end (s from the batch's creation)"
    )
    args = ap.parse_args(argv)
    if args.engine == "orpheus" and args.model is None:
        ap.error("--engine orpheus needs --model (a checkpoint folder)")
    if args.engine == "piper" and args.gpu is not None:
        ap.error("--gpu is for --engine orpheus: Piper renders on the CPU")
    if args.words is None and args.lines is None:
        args.lines = DEFAULT_LINES
    return args


def main(argv=None) -> None:
    args = parse(argv)
    # A SIGTERM (a `timeout` around a long GPU run) unwinds like an exception, so subprocess.run
    # kills `synth submit`, and with it the worker holding the GPU (worker/embedded.py).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    out = run(args)
    where = ", ".join(out["devices"]) or out["cpu"]
    print(
        f"{out['words']:,} words in {out['lines']:,} paragraphs, {out['chapters']} chapters ({out['jobs']:,} jobs): "
        f"{out['audio_s']:,} s of audio as {out['format']} by {out['engine']} on {where} "
        f"({out['cores']} cores, commit {out['commit']})"
    )
    print(
        f"render: {out['render_s']:,} s ({out['x_real_time']}x real time), the first job started "
        f"{out['first_start_s']:,} s after the batch was written"
    )
    print(
        f"assembly after the last job: {out['assembly_s']:,} s, {100 * out['assembly_share']:.1f}% of the render; "
        f"the command exits {out['exit_after_last_job_s']:,} s after it"
    )
    done = out["chapters_done_s"]
    print(
        f"chapters done (their last job's end) from {min(done):,} s to {max(done):,} s, "
        f"{out['chapters_in_last_tenth']} of {len(done)} in the render's last tenth"
    )
    if out["chapters_encoded_s"]:
        lag = [e - d for e, d in zip(out["chapters_encoded_s"], done)]
        print(
            f"chapters encoded from {min(out['chapters_encoded_s']):,} s to {max(out['chapters_encoded_s']):,} s, "
            f"each {min(lag):.1f}-{max(lag):.1f} s after its last job; the join after the last: {out['join_s']} s"
        )
    print("slowest jobs, claim to end: " + ", ".join(f"{c} {d} s" for c, d in out["slowest_jobs"]))
    print(
        f"the command: {out['command_s']:,} s wall ({out['command_x_real_time']}x real time), its start to the "
        f"batch written {out['start_s']} s (bench wall {time.monotonic() - started:,.0f} s)"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
