"""How long a task waits before its retry, for every task that retries."""

from __future__ import annotations

import random


def backoff(retries: int, cap: int) -> float:
    """Exponential backoff with full jitter: 2, 4, 8 ... seconds, capped, times U(0.5, 1)."""
    return min(cap, 2 ** (min(retries, 30) + 1)) * random.uniform(0.5, 1.0)
