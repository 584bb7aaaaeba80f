"""A report as Markdown (the default of `synth report`)."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.reports import fmt
from pipeline.reports.model import DIMENSION_TITLES, Report


def table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render_md(r: Report) -> str:
    parts = [
        f"# {fmt.title(r)}",
        "",
        "## Headline (change against the previous period of equal length)",
        table(("", "this period", "previous", "change"), fmt.headline_rows(r)),
        "",
        "## Jobs and batches",
        f"Jobs created in the period by state: {_pairs(r.jobs_by_state)}  ",
        f"Batches created in the period: {_pairs(r.batches_by_state)}  ",
        f"Finished in the period: {r.jobs_done} done, {r.jobs_failed} failed; "
        f"{r.characters:,} characters, {fmt.num(r.audio_hours, 3)} audio hours.  ",
        fmt.reused(r),
        "",
    ]
    parts += [
        "## Failures by reason",
        table(("reason", "jobs"), [(k, str(v)) for k, v in r.failures_by_reason.items()])
        if r.failures_by_reason
        else "No failures.",
        "",
    ]
    parts += ["## Checked against the text", *_verification_md(r), ""]
    parts += [
        "## By API key",
        table(fmt.BY_KEY_HEAD, [fmt.by_key_cells(row) for row in r.by_key]) if r.by_key else fmt.NO_BY_KEY,
        "",
    ]
    parts += ["## Throughput", table(fmt.THROUGHPUT_HEAD, [fmt.throughput_cells(r.overall)]), ""]
    for dim, rows in r.throughput.items():
        parts += [
            f"### By {DIMENSION_TITLES[dim]}",
            table(fmt.THROUGHPUT_HEAD, [fmt.throughput_cells(row) for row in rows]) if rows else fmt.NO_THROUGHPUT,
            "",
        ]
    if r.unpriced_device_types:
        parts += [f"No price per GPU-hour for: {', '.join(r.unpriced_device_types)} (SYNTH_GPU_PRICES).", ""]
    for name, data in (("TTFB (s)", r.ttfb), ("RTF", r.rtf), ("Queue wait (s)", r.queue_wait)):
        parts += [
            f"## {name} by priority",
            table(fmt.PERCENTILE_HEAD, [fmt.percentile_cells(p, v) for p, v in data.items()]),
            "",
        ]
    b = r.batching
    parts += [
        "## Batching",
        f"Mean batch size {fmt.num(b.mean_batch_size)} over {b.jobs_with_size} jobs; "
        f"jobs by batch size: {_pairs(b.sizes) or '–'}.  ",
        f"Slot fill {fmt.share(b.slot_fill)}, padding waste {fmt.share(b.padding_fraction)}, "
        f"idle-slot waste {fmt.share(b.idle_slot_fraction)} ({b.jobs_with_extra} jobs with engine "
        "batch details).",
        "",
    ]
    parts += ["## Definitions", *[f"- {n}" for n in r.notes], ""]
    return "\n".join(parts)


def _verification_md(r: Report) -> list[str]:
    v = r.verification
    if v is None or not v.checked:
        return ["No job of the period was checked (SYNTH_VERIFY)."]
    lines = [f"{fmt.share(v.clean_share)} verified clean: {_pairs(v.verdicts)} of {v.checked} checked jobs."]
    if v.worst:
        lines += [
            "",
            table(
                ("batch", "job", "verdict", "CER", "reasons"),
                [
                    (j["batch_id"], j["client_id"], j["verdict"], fmt.num(j["cer"]), "; ".join(j["reasons"]))
                    for j in v.worst
                ],
            ),
        ]
    return lines


def _pairs(d: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items())
