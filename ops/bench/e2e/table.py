"""The e2e bench's figures beside the engine bench's, from the same run, as one Markdown table."""

from __future__ import annotations


def side_by_side(result: dict) -> str:
    """The user's figures beside the engine's, from the same run."""
    eng = result.get("engine_only") or {}
    rows = {r["approach"]: r for r in eng.get("rows", [])}
    modes = (eng.get("meta") or {}).get("modes") or {}
    mode = next(iter(modes.values()), {})
    lines = ["| figure | engine only | through synth | ratio |", "|---|---|---|---|"]

    def add(name, engine, user, higher_is_better=True):
        ratio = (user / engine if higher_is_better else engine / user) if engine and user else None
        lines.append(f"| {name} | {_f(engine)} | {_f(user)} | {_f(ratio, '.2f')} |")

    add(
        "batch workload x real time",
        (rows.get("fast batch") or {}).get("x_real_time"),
        result.get("batch", {}).get("x_real_time"),
    )
    single = mode.get("single_stream", {}).get("ttfb_s") or []
    user_single = [s["ttfb_ms"] for s in result.get("singles", []) if s["ttfb_ms"] is not None]
    add(
        "one request, first byte ms (median)",
        1000 * single[len(single) // 2] if single else None,
        sorted(user_single)[len(user_single) // 2] if user_single else None,
        False,
    )
    for count, w in result.get("streams", {}).items():
        e = (mode.get("streams") or {}).get(str(count)) or (mode.get("streams") or {}).get(count) or {}
        for k in ("p50", "p95", "p99"):
            ev = e.get(f"ttfb_{k}")
            add(
                f"{count} streams beside batch work, first byte {k} ms",
                1000 * ev if ev else None,
                w[f"ttfb_{k}_ms"],
                False,
            )
        add(f"{count} streams beside batch work, underruns", e.get("underruns"), w["underruns"], False)
        add(f"{count} streams beside batch work, slowest RTF", e.get("rtf_max"), w["rtf_max"], False)
        add(
            f"{count} streams beside batch work, batch x real time",
            e.get("background_x_real_time"),
            w["batch"]["x_real_time"],
        )
    return "\n".join(lines)


def _f(v, spec: str = ".4g") -> str:
    return "-" if v is None else format(v, spec)
