"""The console's numbers (GET /dashboard/data.json), built at most once per CACHE_S per API process.

Every open console asks every few seconds; twenty viewers would otherwise run the same queries
twenty times. The first request after the numbers age builds them while the others wait for that
build (one lock), and all get the same answer: the database sees one build per CACHE_S however
many watch."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from api.state import ApiState
from pipeline import deadletter
from pipeline.console import depths, progress, series
from pipeline.reports import fleet
from pipeline.reports.publish import latest_report
from pipeline.routing import VERIFY_QUEUE, all_queues

CACHE_S = 2.0
# A worker beats every 10 s (worker/metrics.py) and its heartbeat lives 30 s: one not heard from
# for two beats has stopped, though its row lingers until it expires.
STALE_S = 25.0


class SnapshotCache:
    """``check`` runs on every read, cached or not: a cheap probe (a Redis ping) so that a service
    gone since the last build says so at once rather than up to CACHE_S later."""

    def __init__(
        self, build: Callable[[], dict], ttl: float = CACHE_S, check: Callable[[], object] | None = None
    ) -> None:
        self._build, self._ttl, self._check = build, ttl, check
        self._lock = threading.Lock()
        self._value: dict | None = None
        self._at = 0.0

    def get(self) -> dict:
        if self._check is not None:
            self._check()
        with self._lock:
            if self._value is None or time.monotonic() - self._at >= self._ttl:
                self._value = self._build()
                self._at = time.monotonic()
            return self._value


def snapshot(state: ApiState) -> dict:
    now = datetime.now(UTC)
    with state.sessions() as session:
        row = latest_report(session)
        batches = progress.open_batches(session, now)
        failures = progress.latest_failures(session)
        day = series.last_day(session, now)
    report = None
    if row is not None:
        summary = row.summary or {}
        report = {
            "id": row.id,
            "period_start": row.period_start.isoformat(),
            "period_end": row.period_end.isoformat(),
            "html_key": row.html_key,
            "json_key": row.json_key,
            "headline": summary.get("headline", {}),
            "changes": summary.get("changes", {}),
        }
    # the verify queue too: how far checks lag the renders, as the plot and the workers' metrics show
    queues = [*all_queues(state.settings.bucket_seconds), VERIFY_QUEUE]
    day["queue_depths"] = depths.history(state.redis, day["start"])
    return {
        "now": now.isoformat(timespec="seconds"),
        "latest_report": report,
        "queues": fleet.queue_depths(state.redis, queues),
        "workers": workers(state.redis, now.timestamp()),
        "deadletter": deadletter.count(state.redis),
        "batches": batches,
        "failures": failures,
        "last_24h": day,
    }


def workers(client, now: float) -> list[dict]:
    """Each worker's heartbeat, with ``stale`` (not heard from for STALE_S) and ``rows_in_use``
    (its jobs in flight, up to the rows its engine decodes at once)."""
    out = []
    for beat in fleet.workers(client):
        try:
            seen = float(beat.get("last_seen", ""))
        except ValueError:
            seen = 0.0
        w: dict[str, object] = {**beat, "age_s": round(max(0.0, now - seen), 1), "stale": now - seen > STALE_S}
        rows, in_flight = beat.get("rows", ""), beat.get("jobs_in_flight", "")
        if rows.isdigit() and in_flight.isdigit():
            w["rows_in_use"] = f"{min(int(in_flight), int(rows))} / {rows}"
        out.append(w)
    return out
