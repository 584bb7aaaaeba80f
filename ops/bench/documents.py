"""A book through `synth submit -o` as a user runs it (embedded, the default engine): how long its
jobs took to render, and how long the command ran on after the last of them to write the
assembled files, as a share of the render. The book is the benchmark corpus in Markdown: each
line a paragraph, ``--lines`` of them in ``--chapters`` chapters, each under its own heading.

    python -m ops.bench.documents --lines 200 --chapters 10
    python -m ops.bench.documents --format mp3 --json .bench/documents.json

The render is the batch's creation to its last job's end (the database's times); the assembly is
that end to the whole file's writing (its modification time), the time a user waits for the
files once the audio is rendered; the command's exit comes after it, once the embedded worker it
started has shut down.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import func, select

from ops.bench import REPO, SHARED_CORPUS, git_commit
from pipeline.db.models import Batch, Job, JobMetrics
from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.hostinfo import cpu_name


def book(corpus: Path, lines: int, chapters: int) -> str:
    paragraphs = [line.strip() for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()][:lines]
    per = -(-len(paragraphs) // chapters)
    parts = ["# Bench Book\n"]
    for n in range(chapters):
        parts += [f"## Chapter {n + 1}\n", *paragraphs[n * per:(n + 1) * per]]
    return "\n\n".join(parts) + "\n"


def times(data_dir: Path) -> dict:
    """The batch's creation, its jobs' first start and last end, and the audio they rendered."""
    sessions = make_sessionmaker(make_engine(f"sqlite:///{data_dir / 'synth.db'}"))
    with sessions() as session:
        created = session.scalar(select(Batch.created_at))
        first, last = session.execute(select(func.min(Job.started_at), func.max(Job.finished_at))).one()
        audio_s = session.scalar(select(func.sum(JobMetrics.audio_s)))
        jobs = session.scalar(select(func.count(Job.id)))
    utc = lambda t: t if t.tzinfo else t.replace(tzinfo=UTC)  # noqa: E731 (sqlite keeps no zone)
    return {"created": utc(created), "first_start": utc(first), "last_end": utc(last), "audio_s": audio_s,
            "jobs": jobs}


def run(args) -> dict:
    with tempfile.TemporaryDirectory(prefix="synth-bench-documents-") as tmp:
        root = Path(tmp)
        (root / "book.md").write_text(book(args.corpus, args.lines, args.chapters), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTH_")}
        env.update(SYNTH_DATA_DIR=str(root / "data"), PYTHONPATH=str(REPO),
                   SYNTH_REUSE="off")   # every run renders: none copies the last
        started = datetime.now(UTC)
        done = subprocess.run([sys.executable, "-m", "cli.main", "submit", str(root / "book.md"), "--format",
                               args.format, "-o", str(root / "out")], cwd=REPO, env=env, capture_output=True)
        ended = datetime.now(UTC)
        if done.returncode != 0:
            sys.exit(f"synth submit failed ({done.returncode}):\n{done.stderr.decode(errors='replace')[-2000:]}")
        t = times(root / "data")
        listed = json.loads((root / "out" / "chapters.json").read_text(encoding="utf-8"))
        written = datetime.fromtimestamp((root / "out" / listed["file"]).stat().st_mtime, UTC)
    render_s = (t["last_end"] - t["created"]).total_seconds()
    assembly_s = (written - t["last_end"]).total_seconds()
    return {
        "date": ended.date().isoformat(), "commit": git_commit(), "cpu": cpu_name(), "cores": os.cpu_count(),
        "python": platform.python_version(), "format": args.format, "lines": args.lines, "chapters": args.chapters,
        "jobs": t["jobs"], "audio_s": round(listed["duration_s"], 1),
        "render_s": round(render_s, 2), "x_real_time": round(listed["duration_s"] / render_s, 1),
        "assembly_s": round(assembly_s, 2), "assembly_share": round(assembly_s / render_s, 4),
        "exit_after_last_job_s": round((ended - t["last_end"]).total_seconds(), 2),
        "start_s": round((t["created"] - started).total_seconds(), 2),
        "command_s": round((ended - started).total_seconds(), 2),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m ops.bench.documents", description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=SHARED_CORPUS)
    ap.add_argument("--lines", type=int, default=200, help="corpus lines, one paragraph each")
    ap.add_argument("--chapters", type=int, default=10)
    ap.add_argument("--format", default="m4b", choices=("m4b", "mp3", "wav", "flac"))
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    started = time.monotonic()
    out = run(args)
    print(f"{out['jobs']} jobs, {out['chapters']} chapters, {out['audio_s']:,} s of audio as {out['format']} on "
          f"{out['cpu']} ({out['cores']} cores, commit {out['commit']})")
    print(f"render: {out['render_s']:,} s ({out['x_real_time']}x real time)")
    print(f"assembly after the last job: {out['assembly_s']:,} s, {100 * out['assembly_share']:.1f}% of the render; "
          f"the command exits {out['exit_after_last_job_s']:,} s after it")
    print(f"the command: {out['command_s']:,} s, its start to the batch written {out['start_s']} s "
          f"(bench wall {time.monotonic() - started:,.0f} s)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
