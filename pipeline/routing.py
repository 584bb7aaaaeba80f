"""Queue names and length buckets. No Celery in here: the worker maps these names onto its queues."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.text import estimate_seconds

REALTIME_QUEUE = "realtime"
WEBHOOK_QUEUE = "webhooks"
# The webhook queue's name before the product called these webhooks. Workers still consume it, so
# deliveries sent before an upgrade (a retry waiting out its countdown, above all) go out instead of
# waiting for the sweep; `synth worker -Q callbacks` consumes both (cli/worker.py).
FORMER_WEBHOOK_QUEUE = "callbacks"
# Checks of finished jobs' audio against their text (pipeline/verify/queued.py), served by CPU
# workers (`synth worker --verify`): a GPU worker never consumes it, so it never waits on a check.
VERIFY_QUEUE = "verify"
PRIORITIES = ("batch", "realtime")


def bucket_queues(thresholds: Sequence[float]) -> list[str]:
    """["batch.le10s", "batch.le30s", "batch.le120s", "batch.gt120s"] for thresholds (10, 30, 120)."""
    names = [f"batch.le{_fmt(t)}s" for t in thresholds]
    names.append(f"batch.gt{_fmt(thresholds[-1])}s" if thresholds else "batch.all")
    return names


def all_queues(thresholds: Sequence[float]) -> list[str]:
    """Every queue a worker listens on, highest priority first."""
    return [REALTIME_QUEUE, *bucket_queues(thresholds)]


def queue_for(text: str, priority: str, thresholds: Sequence[float]) -> str:
    if priority == "realtime":
        return REALTIME_QUEUE
    seconds = estimate_seconds(text)
    names = bucket_queues(thresholds)
    for limit, name in zip(thresholds, names):
        if seconds <= limit:
            return name
    return names[-1]


def _fmt(seconds: float) -> str:
    return f"{seconds:g}"
