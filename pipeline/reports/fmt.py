"""Number formatting shared by the Markdown and HTML renderers."""

from __future__ import annotations

from datetime import datetime

from pipeline.reports.model import Percentiles, Report, ThroughputRow

HEADLINE_LABELS = {
    "jobs_done": "jobs done",
    "jobs_failed": "jobs failed",
    "audio_hours": "audio hours",
    "x_realtime": "x real time (busy)",
    "audio_s_per_gpu_hour": "audio s per GPU-hour",
    "ttfb_p50_s": "TTFB p50 (s)",
    "ttfb_p95_s": "TTFB p95 (s)",
    "cost_per_audio_hour": "cost per audio hour",
}


def num(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, int) or float(value).is_integer() and abs(value) >= 1000:
        return f"{int(value):,}"
    return f"{value:,.{digits}f}"


def pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:+.1f} %"


def share(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f} %"


def money(value: float | None) -> str:
    return "–" if value is None else f"{value:,.2f}"


def when(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC")


def title(r: Report) -> str:
    return f"synth throughput report {when(r.period_start)} – {when(r.period_end)}"


THROUGHPUT_HEAD = (
    "",
    "jobs",
    "audio h",
    "busy GPU-h",
    "workers",
    "x real time",
    "audio s / GPU-h",
    "utilization",
    "cost",
    "cost / audio h",
)
# A breakdown with no rows says why, where a table of headers alone reads as a rendering fault.
NO_THROUGHPUT = "No jobs finished in the period."


def throughput_cells(row: ThroughputRow) -> list[str]:
    return [
        row.key,
        str(row.jobs),
        num(row.audio_s / 3600, 3),
        num(row.busy_s / 3600, 3),
        str(row.workers),
        num(row.x_realtime, 1),
        num(row.audio_s_per_gpu_hour, 0),
        share(row.utilization),
        money(row.cost),
        money(row.cost_per_audio_hour),
    ]


PERCENTILE_HEAD = ("priority", "n", "p50", "p95", "p99", "mean")


def percentile_cells(priority: str, p: Percentiles, digits: int = 3) -> list[str]:
    return [priority, str(p.n), num(p.p50, digits), num(p.p95, digits), num(p.p99, digits), num(p.mean, digits)]


def headline_rows(r: Report) -> list[list[str]]:
    return [
        [
            HEADLINE_LABELS[k],
            num(v),
            num(r.previous.get(k)) if r.previous else "–",
            pct(r.changes.get(k)) if r.changes else "–",
        ]
        for k, v in r.headline.items()
    ]


BY_KEY_HEAD = ("API key", "id", "jobs done", "jobs failed", "characters", "audio h")
NO_BY_KEY = "No job finished in the period."


def by_key_cells(row: dict) -> list[str]:
    return [
        row["name"],
        (row["key_id"] or "–")[:12],
        str(row["jobs_done"]),
        str(row["jobs_failed"]),
        f"{row['characters']:,}",
        num(row["audio_s"] / 3600, 3),
    ]


def reused(r: Report) -> str:
    return (
        f"Reused from earlier renders: {r.reused} jobs, {num(r.reused_s / 3600, 3)} engine hours not spent again."
        if r.reused
        else ""
    )
