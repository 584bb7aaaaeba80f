"""Counts in words: "1 job", "2 jobs", "1 empty line skipped"."""

from __future__ import annotations


def counted(n: int, one: str, many: str | None = None) -> str:
    """``n`` and the noun phrase that agrees with it; ``many`` where adding an s is wrong
    ("1 entry", "2 entries") or the noun is not last ("1 job queued", "2 jobs queued")."""
    return f"{n:,} {one if n == 1 else many if many is not None else one + 's'}"
