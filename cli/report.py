"""`synth report`"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click

_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([hdw])$")
_UNITS = {"h": 3600, "d": 86400, "w": 7 * 86400}


def parse_when(value: str | None, now: datetime, option: str) -> datetime | None:
    """ISO 8601 (naive means UTC), or a span back from now: 24h, 7d, 2w. ``option`` is named in the
    error, since --since and --until take the same forms."""
    if value is None:
        return None
    m = _RELATIVE.match(value.strip())
    if m:
        return now - timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError as e:
        raise click.BadParameter(
            f"{value!r} is neither ISO 8601 (2026-11-20, 2026-11-20T06:00) nor a span back from now (24h, 7d, 2w)",
            param_hint=f"'{option}'",
        ) from e
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@click.command()
@click.option("--since", help="Start (ISO 8601, UTC if no zone, or 24h/7d back from now) [default: --until - 24h].")
@click.option("--until", help="End, exclusive [default: now].")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["md", "html", "json"]),
    default="md",
    show_default=True,
    help="Markdown, HTML (with plots where synth[reports] is installed) or JSON.",
)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write here instead of stdout.")
def report(since: str | None, until: str | None, fmt: str, out: Path | None) -> None:
    """What the fleet did in a period: jobs, audio hours, failures, throughput per GPU type, worker,
    engine, model and quantization, TTFB/RTF percentiles, batching, cost, change against the
    previous period. Prices per GPU-hour come from SYNTH_GPU_PRICES (JSON by device type)."""
    from cli.context import open_database
    from pipeline.reports.compute import compute_report
    from pipeline.settings import Settings

    now = datetime.now(UTC)
    end = parse_when(until, now, "--until") or now
    start = parse_when(since, now, "--since") or end - timedelta(hours=24)
    if start >= end:
        raise click.UsageError(f"--since {start.isoformat()} is not before --until {end.isoformat()}")
    settings = Settings()
    _, sessions = open_database(settings)
    with sessions() as session:
        result = compute_report(session, start, end, gpu_prices=settings.gpu_prices)
    text = _render(result, fmt)
    if out is None:
        click.echo(text)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        click.echo(f"wrote {out}", err=True)


def _render(result, fmt: str) -> str:
    if fmt == "html":
        from pipeline.reports.render_html import render_html

        return render_html(result)
    if fmt == "json":
        from pipeline.reports.render_json import render_json

        return render_json(result)
    from pipeline.reports.render_md import render_md

    return render_md(result)
