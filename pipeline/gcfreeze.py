"""Boot objects out of the cyclic garbage collector's reach, in a long-lived serving process."""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)


def freeze_boot_objects(process: str) -> None:
    """Collect, then move every object alive now out of the cyclic garbage collector's reach
    (``gc.freeze``), so that its full collections while serving scan only what came later.

    A full collection holds the GIL for as long as it scans, and a serving process's imports
    alone are a lot to scan: torch and transformers in the engine (some 360,000 objects), FastAPI,
    pydantic and SQLAlchemy in the API (150,000, 90 ms a collection on a 2-core VM). Every thread
    and the event loop wait it out, so an unfrozen full collection while streams play holds back
    every stream's next chunk, and the first byte of every request arriving meanwhile, for as long
    (docs/performance.md).

    Frozen objects are still freed by reference counting; only cycles among them are no longer
    collected, which for what a process builds at boot and keeps until it exits costs nothing.
    Call it once, at the end of a serving process's boot: never in a process that builds and drops
    many apps or engines, as a test session does."""
    gc.collect()
    gc.freeze()
    log.info("%s: %d boot objects frozen out of the garbage collector's scans", process, gc.get_freeze_count())
