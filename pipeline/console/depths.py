"""Queue depths over time. Redis holds only the depth now, so the workers' heartbeat samples it:
each minute the first worker to claim that minute (SET NX) appends one sample to a capped list,
however many workers beat. A fleet with no worker running records nothing, which the plot shows
as a gap."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import redis

from pipeline.reports import fleet

HISTORY = "synth:console:depths"
CLAIM = "synth:console:depths:minute:"
SAMPLE_S = 60
KEEP = 24 * 60 + 5  # a day of minutes, and a few over so the plot's left edge is filled


def sample(client: redis.Redis, queues: Sequence[str], now: float | None = None) -> bool:
    """Append this minute's depths unless another worker did; True if this call did."""
    now = time.time() if now is None else now
    minute = int(now // SAMPLE_S)
    if not client.set(CLAIM + str(minute), 1, nx=True, ex=SAMPLE_S * 2):
        return False
    depths = fleet.queue_depths(client, queues)
    pipe = client.pipeline()
    pipe.rpush(HISTORY, json.dumps({"t": minute * SAMPLE_S, "depths": depths}, separators=(",", ":")))
    pipe.ltrim(HISTORY, -KEEP, -1)
    pipe.execute()
    return True


def history(client: redis.Redis, since: float) -> list[dict]:
    """The samples since ``since`` (epoch seconds), oldest first: {"t": ..., "depths": {queue: n}}."""
    out = []
    for raw in client.lrange(HISTORY, 0, -1):
        try:
            row = json.loads(raw)
        except ValueError:  # not ours: skipped rather than failing the page
            continue
        if isinstance(row, dict) and isinstance(row.get("t"), int) and row["t"] >= since:
            out.append(row)
    return sorted(out, key=lambda row: row["t"])  # workers' clocks differ: appended nearly in order
