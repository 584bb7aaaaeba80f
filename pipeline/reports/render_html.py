"""A report as one self-contained HTML page: tables plus matplotlib plots embedded as base64 PNGs."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from pipeline.reports import fmt, plots
from pipeline.reports.model import DIMENSION_TITLES, Report

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f3f3f3; }
.notes { color: #555; font-size: 0.9em; }
"""


def table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    out = ["<table><tr>", *(f"<th>{escape(h)}</th>" for h in head), "</tr>"]
    for row in rows:
        out += ["<tr>", *(f"<td>{escape(str(c))}</td>" for c in row), "</tr>"]
    out.append("</table>")
    return "".join(out)


def render_html(r: Report, *, with_plots: bool = True) -> str:
    body = [
        f"<h1>{escape(fmt.title(r))}</h1>",
        "<h2>Headline</h2>",
        table(("", "this period", "previous", "change"), fmt.headline_rows(r)),
        "<h2>Jobs and batches</h2>",
        table(("jobs by state", *r.jobs_by_state), [("", *map(str, r.jobs_by_state.values()))]),
        table(("batches by state", *r.batches_by_state), [("", *map(str, r.batches_by_state.values()))]),
        f"<p>Finished in the period: {r.jobs_done} done, {r.jobs_failed} failed; {r.characters:,} "
        f"characters, {fmt.num(r.audio_hours, 3)} audio hours.</p>",
        f"<p>{escape(fmt.reused(r))}</p>" if r.reused else "",
        "<h2>Failures by reason</h2>",
        table(("reason", "jobs"), list(r.failures_by_reason.items()))
        if r.failures_by_reason
        else "<p>No failures.</p>",
        "<h2>Checked against the text</h2>",
        *_verification_html(r),
        "<h2>By API key</h2>",
        table(fmt.BY_KEY_HEAD, [fmt.by_key_cells(row) for row in r.by_key])
        if r.by_key
        else f"<p>{escape(fmt.NO_BY_KEY)}</p>",
        "<h2>Throughput</h2>",
        table(fmt.THROUGHPUT_HEAD, [fmt.throughput_cells(r.overall)]),
    ]
    for dim, rows in r.throughput.items():
        body += [
            f"<h3>By {escape(DIMENSION_TITLES[dim])}</h3>",
            table(fmt.THROUGHPUT_HEAD, [fmt.throughput_cells(row) for row in rows])
            if rows
            else f"<p>{escape(fmt.NO_THROUGHPUT)}</p>",
        ]
    for name, data in (("TTFB (s)", r.ttfb), ("RTF", r.rtf), ("Queue wait (s)", r.queue_wait)):
        body += [
            f"<h2>{escape(name)} by priority</h2>",
            table(fmt.PERCENTILE_HEAD, [fmt.percentile_cells(p, v) for p, v in data.items()]),
        ]
    b = r.batching
    body += [
        "<h2>Batching</h2>",
        table(
            ("mean batch size", "slot fill", "padding waste", "idle-slot waste"),
            [
                (
                    fmt.num(b.mean_batch_size),
                    fmt.share(b.slot_fill),
                    fmt.share(b.padding_fraction),
                    fmt.share(b.idle_slot_fraction),
                )
            ],
        ),
    ]
    body += _plots(r) if with_plots else []
    body += ["<h2>Definitions</h2><ul class=notes>", *(f"<li>{escape(n)}</li>" for n in r.notes), "</ul>"]
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>{escape(fmt.title(r))}</title>"
        f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>"
    )


def _verification_html(r: Report) -> list[str]:
    v = r.verification
    if v is None or not v.checked:
        return ["<p>No job of the period was checked (SYNTH_VERIFY).</p>"]
    counts = ", ".join(f"{n} {escape(k)}" for k, n in v.verdicts.items())
    out = [f"<p>{fmt.share(v.clean_share)} verified clean: {counts} of {v.checked} checked jobs.</p>"]
    if v.worst:
        out.append(
            table(
                ("batch", "job", "verdict", "CER", "reasons"),
                [
                    (j["batch_id"], j["client_id"], j["verdict"], fmt.num(j["cer"]), "; ".join(j["reasons"]))
                    for j in v.worst
                ],
            )
        )
    return out


def _plots(r: Report) -> list[str]:
    if not plots.available():
        return ["<p>Plots need matplotlib: pip install 'synth[reports]'.</p>"]
    return [
        "<h2>Plots</h2>",
        *(
            f'<figure><img alt="{escape(name)}" src="data:image/png;base64,{png}">'
            f"<figcaption>{escape(name)}</figcaption></figure>"
            for name, png in plots.all_plots(r).items()
        ),
    ]
