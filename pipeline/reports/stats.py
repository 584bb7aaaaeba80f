"""The small definitions a report rests on: busy time, percentiles, failure reasons."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime

from pipeline.summary import percentile

__all__ = ["busy_seconds", "percentile", "reason", "ratio"]


def busy_seconds(intervals: Iterable[tuple[datetime, datetime]]) -> float:
    """Length of the union of [start, end] intervals: the time one worker had any job in hand.
    Jobs rendered together overlap; counting each job's own time would count the GPU twice."""
    total = 0.0
    current: tuple[datetime, datetime] | None = None  # the union's last interval so far
    for start, end in sorted(intervals):
        if end < start:
            continue
        if current is None or start > current[1]:
            if current is not None:
                total += (current[1] - current[0]).total_seconds()
            current = (start, end)
        elif end > current[1]:
            current = (current[0], end)
    if current is not None:
        total += (current[1] - current[0]).total_seconds()
    return total


def ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


def change(now: float | None, before: float | None) -> float | None:
    """Relative change (0.25 = +25 %); None when either side is missing or the base is zero."""
    if now is None or before is None or before == 0:
        return None
    return (now - before) / abs(before)


_RULES: Sequence[tuple[re.Pattern, str]] = (
    (re.compile(r"^nothing speakable", re.I), "nothing speakable in line"),
    (re.compile(r"^voice .* is not served", re.I), "voice not served by engine"),
    (re.compile(r"^gave up after \d+ retries", re.I), "retries exhausted"),
    (re.compile(r"^engine produced no audio", re.I), "engine produced no audio"),
    (re.compile(r"^engine ended without", re.I), "engine ended without finishing the job"),
    (re.compile(r"^internal error: (\w+)", re.I), r"internal error: \1"),
)
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_HEX_ID = re.compile(r"\b[0-9a-f]{8,}\b", re.I)
_NUMBER = re.compile(r"\b\d+(\.\d+)?\b")
MAX_REASON = 80


def reason(error: str | None) -> str:
    """A failure's reason: the error string without the parts that differ per job (the text quoted,
    ids, numbers), so that 300 failures read as a few reasons."""
    if not error or not error.strip():
        return "unknown (no error recorded)"
    first = error.strip().splitlines()[0]
    for pattern, name in _RULES:
        m = pattern.match(first)
        if m:
            return m.expand(name)
    text = _NUMBER.sub("N", _HEX_ID.sub("<id>", _QUOTED.sub("'…'", first)))
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"
