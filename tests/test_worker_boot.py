"""A worker's boot pays the first stream's costs: one short realtime request goes the way a
speech request's job goes, live stream included, and nothing is written to the database."""

from __future__ import annotations

import redis
from sqlalchemy import func, select

from pipeline.db.models import Job
from pipeline.live import END, PCM, START, redis_client_url, stream_key
from tests.waiting import eventually
from worker.boot import build_runtime


def test_the_boot_runs_a_realtime_request_through_the_live_path_and_writes_no_job(
    settings, redis_url, piper_engine, sessions
):
    runtime = build_runtime(settings, engine=piper_engine, broker_url=redis_url)
    client = redis.Redis.from_url(redis_client_url(redis_url))
    key = stream_key(f"warm-up-{runtime.renderer.live.owner}")
    # the live publisher writes on a thread of its own
    kinds = eventually(
        lambda: (k := [fields[b"kind"] for _, fields in client.xrange(key)]) and k[-1] == END and k,
        30,
        "the warm-up stream's end",
    )
    assert kinds[0] == START and kinds[-1] == END and PCM in kinds, kinds
    assert client.xrange(key)[-1][1][b"error"] == b""
    assert 0 < client.ttl(key) <= settings.live_stream_ttl
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 0
