"""Waiting for something to happen, in one place.

Tests wait for events (a batch closed, a server answering, a message on a queue), not for fixed
times: a fixed sleep is too short on a busy machine and wasted time on an idle one. ``eventually``
asks its predicate until it holds, and fails with what was awaited when the timeout runs out."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Call ``predicate()`` every ``interval`` seconds until it returns a truthy value, and return
    that value; after ``timeout`` seconds raise AssertionError naming ``what``. The predicate is
    asked once more at the deadline, and exceptions it raises are not caught."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(min(interval, left))
