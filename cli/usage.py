"""`synth usage`: what every API key used today and this month (UTC)."""

from __future__ import annotations

import json

import click

from cli.context import open_database
from cli.keys import limit_text
from pipeline import api_keys, usage
from pipeline.settings import Settings


@click.command("usage")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per key.")
def usage_(as_json: bool) -> None:
    """Characters, audio seconds and jobs done per key, today and this month (UTC days), with the
    characters of jobs not yet done and the key's daily quotas ("-": none)."""
    _, sessions = open_database(Settings())
    with sessions() as session:
        rows = usage.summaries(session, api_keys.list_keys(session))
    if as_json:
        for row in rows:
            click.echo(
                json.dumps(
                    {
                        "id": row.key.id,
                        "name": row.key.name,
                        "day": row.day.isoformat(),
                        "today": row.today.as_dict(),
                        "month": row.month.as_dict(),
                        "unfinished_chars": row.open_chars,
                        "quotas": {q: getattr(row.key, q) for q in usage.QUOTAS},
                        "revoked": row.key.revoked_at is not None,
                    }
                )
            )
        return
    head = (
        "key",
        "name",
        "chars today",
        "audio s today",
        "chars month",
        "audio s month",
        "jobs month",
        "unfinished chars",
        "chars/day",
        "audio s/day",
    )
    # the whole id: it is what `synth keys quota` and `synth keys revoke` take
    lines = [head] + [
        (
            r.key.id,
            r.key.name[:24] + (" (revoked)" if r.key.revoked_at else ""),
            f"{r.today.chars:,}",
            f"{r.today.audio_s:,.1f}",
            f"{r.month.chars:,}",
            f"{r.month.audio_s:,.1f}",
            f"{r.month.jobs:,}",
            f"{r.open_chars:,}",
            limit_text(r.key.chars_per_day),
            limit_text(r.key.audio_s_per_day),
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    for line in lines:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
