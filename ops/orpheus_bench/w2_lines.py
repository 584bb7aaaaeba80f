"""W2 runs as a table: the lines ``bench_orpheus.py`` prints per W2 run (``NAME COUNT {summary}``,
as ``grep '^w2'`` keeps them from its log; a tag before them is kept as the run's label), one row
each, with where each run's stalls were.

    python -m ops.orpheus_bench.w2_lines ops/results/orpheus_h200_s11_call1_freeze_w2_lines.txt

A device call's log is too big to come back whole; its W2 lines are not, and this reads them.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

HEADER = ("| run | streams | TTFB p50 / p95 / p99 ms | RTF max | RTF < 0.8 | underruns | "
          "prefill steps | full GC ms | longest step ms | longest realtime codec round ms | "
          "batch x real time |")


def parse(line: str) -> tuple[str, dict]:
    """One printed W2 line -> (its label: tag and config name, its summary dict)."""
    head, brace, rest = line.partition("{")
    if not brace:
        raise ValueError(f"not a W2 line (no summary): {line[:80]!r}")
    words = head.split()
    if len(words) < 2 or not words[-1].isdigit():
        raise ValueError(f"not a W2 line (no stream count before the summary): {line[:80]!r}")
    return " ".join(words[:-1]), ast.literal_eval(brace + rest)


def longest(items: list, at: int) -> float | None:
    """The largest of item[at] (ms) over a stall record's list, None if it is empty."""
    return max((i[at] for i in items), default=None)


def row(label: str, s: dict) -> str:
    stalls = s.get("stalls", {})
    steps = stalls.get("slowest_steps", [])
    step = max((sum(x[1:5]) for x in steps), default=None)
    gen2 = s.get("gc", {}).get("gen2", {})

    def ms(v) -> str:
        return "-" if v is None else f"{v:.0f}"

    cells = (label, s["streams"],
             " / ".join(ms(1000 * s[k]) for k in ("ttfb_p50", "ttfb_p95", "ttfb_p99")),
             f"{s['rtf_max']:.2f}", s["rtf_lt_0_8"], s["underruns"], s.get("prefill_steps", "-"),
             f"{gen2['max_ms']:.0f}" if gen2.get("count") else "none",
             ms(step), ms(longest(stalls.get("codec_realtime_slow_rounds", []), 1)),
             ms(s.get("background_x_real_time")))
    return "| " + " | ".join(map(str, cells)) + " |"


def table(lines: list[str]) -> str:
    out = [HEADER, "|" + "---|" * HEADER.count(" | ") + "---|"]
    for line in lines:
        if line.strip():
            out.append(row(*parse(line)))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    paths = (argv if argv is not None else sys.argv[1:])
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    print(table([line for p in paths for line in Path(p).read_text().splitlines()]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
