"""The fleet right now, from Redis: queue depths and worker heartbeats.

Workers (worker/metrics.py) keep a hash ``synth:workers:<name>`` (device, engine, model, jobs in
flight, last seen ...) that expires ``ttl`` seconds after its last refresh, so a dead worker drops
off by itself. The dashboard (api/routes/dashboard.py) reads both here.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import redis

WORKER_PREFIX = "synth:workers:"
HEARTBEAT_TTL = 30  # seconds a heartbeat outlives its last refresh
# kombu's Redis transport keeps a queue's messages of priority p > 0 in "<queue>\x06\x16<p>".
PRIORITY_SUFFIXES = ("", "\x06\x163", "\x06\x166", "\x06\x169")


def queue_depths(client: redis.Redis, queues: Sequence[str]) -> dict[str, int]:
    """Messages waiting per queue (LLEN; each message carries a few jobs)."""
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        for suffix in PRIORITY_SUFFIXES:
            pipe.llen(queue + suffix)
    counts = pipe.execute()
    n = len(PRIORITY_SUFFIXES)
    return {queue: sum(counts[i * n : (i + 1) * n]) for i, queue in enumerate(queues)}


def write_heartbeat(client: redis.Redis, name: str, fields: Mapping[str, object], ttl: int = HEARTBEAT_TTL) -> None:
    key = WORKER_PREFIX + name
    pipe = client.pipeline()
    pipe.hset(key, mapping={**{k: str(v) for k, v in fields.items()}, "last_seen": f"{time.time():.3f}"})
    pipe.expire(key, ttl)
    pipe.execute()


def remove_heartbeat(client: redis.Redis, name: str) -> None:
    client.delete(WORKER_PREFIX + name)


def workers(client: redis.Redis) -> list[dict[str, str]]:
    """Every live worker's heartbeat, by name."""
    keys = sorted(client.scan_iter(match=WORKER_PREFIX + "*", count=500))
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.hgetall(key)
    out = []
    for key, fields in zip(keys, pipe.execute()):
        if fields:
            row = {_s(k): _s(v) for k, v in fields.items()}
            row["name"] = _s(key)[len(WORKER_PREFIX) :]
            out.append(row)
    return out


def _s(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
