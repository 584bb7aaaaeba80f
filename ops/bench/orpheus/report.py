"""Rows, a one-line progress print, and the markdown/JSON a run writes (--json, --markdown)."""

from __future__ import annotations

import json
from pathlib import Path

from ops.bench.orpheus.runs import percentiles

COLUMNS = (
    "approach",
    "quant",
    "jobs",
    "x_real_time",
    "tok_s",
    "ttfb_p50",
    "ttfb_p95",
    "ttfb_p99",
    "peak_gib",
    "wall_s",
    "padded_tokens",
    "mean_rows",
    "idle_slot_waste",
    "ms_per_step",
)


def row(approach: str, quant: str, res, peak_gib) -> dict:
    p50, p95, p99 = percentiles(res.ttfb.values())
    rt = [k for k in res.done if k.startswith("rt-")]
    rtf = [res.done[k] / max(1e-9, res.stream_audio.get(k, 0.0)) for k in rt]
    return {
        "approach": approach,
        "quant": quant,
        "jobs": res.jobs,
        "x_real_time": res.audio_s / res.wall_s,
        "tok_s": res.tokens / res.wall_s,
        "ttfb_p50": p50,
        "ttfb_p95": p95,
        "ttfb_p99": p99,
        "rt_stream_rtf": max(rtf) if rtf else None,
        "underruns": res.underruns,
        "mean_rows": None,
        "idle_slot_waste": None,
        "ms_per_step": None,
        "peak_gib": peak_gib,
        "wall_s": res.wall_s,
        "padded_tokens": res.padded_tokens,
    }


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def line(r: dict) -> str:
    return " ".join(f"{c}={_fmt(r[c])}" for c in COLUMNS)


def markdown(meta: dict, rows: list[dict]) -> str:
    head = [
        f"# Orpheus benchmark: {meta.get('device', '?')}",
        "",
        *(f"- {k}: {v}" for k, v in meta.items() if k != "modes"),
        "",
    ]
    for mode, m in meta.get("modes", {}).items():
        head.append(
            f"- quant {mode}: applied {m['applied']} ({m['kernel']}, {m['dtype']})"
            + (f"; fallback: {m['fallback']}" if m["fallback"] else "")
        )
        for k, v in m.items():
            if k not in ("applied", "kernel", "fallback", "dtype"):
                head.append(f"  - {k}: {json.dumps(v, default=_fmt)}")
    table = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    table += ["| " + " | ".join(_fmt(r[c]) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(head + [""] + table) + "\n"


def write(meta: dict, rows: list[dict], json_path: Path | None, md_path: Path | None) -> None:
    if json_path:
        json_path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    if md_path:
        md_path.write_text(markdown(meta, rows))
