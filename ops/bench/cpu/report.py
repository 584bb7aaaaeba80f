"""Tables on stdout, and the JSON and markdown a run writes (--json, --markdown), with the machine it ran on."""

from __future__ import annotations

import json
import os
import platform
import sys
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import click

from ops.bench import git_commit
from ops.bench.cpu.runs import PathResult

TARGET_OVERHEAD_PCT = 10.0


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1000:,.0f}"


def pipeline_table(report: dict) -> list[str]:
    rows = [
        "| path | run | jobs | failed | audio s | wall s | jobs/s | x real time | TTFB p50 ms "
        "| TTFB p95 ms | overhead vs bare |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["results"]:
        over = "-" if r.overhead_pct is None else f"{r.overhead_pct:+.1f}%"
        rows.append(
            f"| {r.path} | {r.run} | {r.jobs} | {r.failed} | {r.audio_s:,.1f} | {r.wall_s:,.2f} "
            f"| {r.jobs_per_s:.2f} | {r.x_real_time:.1f} | {_ms(r.ttfb_p50_s)} | {_ms(r.ttfb_p95_s)} "
            f"| {over} |"
        )
    return rows


def pipeline_notes(report: dict) -> list[str]:
    overheads: dict[str, list[float]] = {}
    for r in report["results"]:
        if r.overhead_pct is not None:
            overheads.setdefault(r.path, []).append(r.overhead_pct)
    lines = [
        f"Slice: first {report['lines']} lines of {report['corpus']} ({report['chunks']} engine requests); "
        f"engine threads {report['engine_threads']}, worker concurrency {report['worker_concurrency']}, "
        f"{report['jobs_per_task']} jobs per message.",
        f"Excluded from the timings: engine load + warm-up in this process {report['engine_load_s']:.1f} s; "
        f"worker boot (spawn to first ping) {report['worker_boot_s']:.1f} s; worker warm-up batch "
        f"{report['worker_warm_s']:.1f} s.",
    ]
    for path, values in overheads.items():
        verdict = "within" if max(values) <= TARGET_OVERHEAD_PCT else "OVER"
        lines.append(
            f"{path}: overhead {min(values):+.1f}% .. {max(values):+.1f}% over {len(values)} runs "
            f"({verdict} the {TARGET_OVERHEAD_PCT:.0f}% target)."
        )
    return lines


def enqueue_table(report: dict) -> list[str]:
    rows = [
        "| database | run | jobs | messages | parse s | bulk insert s | enqueue s | total s "
        "| messages in Redis | jobs QUEUED |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["results"]:
        rows.append(
            f"| {r.database} | {r.run} | {r.lines:,} | {r.messages:,} | {r.parse_s:.2f} "
            f"| {r.insert_s:.2f} | {r.enqueue_s:.2f} | {r.total_s:.2f} | {r.messages_in_redis:,} "
            f"| {r.jobs_queued:,} |"
        )
    return rows


def machine() -> dict:
    from pipeline.hostinfo import cpu_name

    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu_name(),
        "load_avg_1_5_15": os.getloadavg(),
        "python": platform.python_version(),
        "git_commit": git_commit(),
        "command": " ".join(["python -m ops.bench.cpu", *sys.argv[1:]]),
    }


def markdown(host: dict, pipeline: dict | None, enqueue: dict | None) -> str:
    out = [
        "# CPU pipeline benchmark",
        "",
        f"- Date: {host['date']}",
        f"- Git commit: `{host['git_commit']}`",
        f"- Machine: {host['nproc']} cores (`nproc`), CPU `{host['cpu']}`, Python {host['python']}; "
        f"load average at the end {', '.join(f'{x:.2f}' for x in host['load_avg_1_5_15'])} "
        "(what else ran on the machine shows here)",
        f"- Command: `{host['command']}`",
        "",
    ]
    if pipeline:
        out += [
            "## Pipeline: bare engine vs full path",
            "",
            *pipeline_table(pipeline),
            "",
            *(f"- {line}" for line in pipeline_notes(pipeline)),
            "",
        ]
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

        json_path.write_text(
            json.dumps({"machine": host, "pipeline": plain(pipeline), "enqueue": plain(enqueue)}, indent=2) + "\n"
        )
    if md_path:
        md_path.parent.mkdir(parents=True, exist_ok=True)
        md_path.write_text(markdown(host, pipeline, enqueue))


def _derived(r) -> dict:
    if isinstance(r, PathResult):
        return {"jobs_per_s": r.jobs_per_s, "x_real_time": r.x_real_time}
    return {"total_s": r.total_s}
