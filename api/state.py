"""What every request shares (``ApiState``), built by the app factory (app.py) and handed to the
routes through ``deps.State``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import redis.asyncio as aioredis
from celery import Celery
from redis import Redis
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from api.livehub import LiveHub
from api.metrics import Metrics
from pipeline.settings import Settings
from pipeline.db.jobs import PlannedBatch
from pipeline.storage import ObjectStore


@dataclass
class ApiState:
    """What every request shares; built once at start, closed at shutdown."""

    settings: Settings
    db: Engine
    sessions: sessionmaker[Session]
    store: ObjectStore
    celery: Celery
    redis: Redis  # rate limits, readiness (a bounded pool, shared by the request threads)
    aredis: aioredis.Redis  # small async checks beside the live streams (a bounded pool)
    live: LiveHub  # every live stream, read over one connection (api/livehub.py)
    metrics: Metrics
    # a speech request's job: created with others waiting, in one transaction (api/creating.py)
    create_speech: Callable[[Callable[[], PlannedBatch]], Awaitable[str]] | None = None
    # the console's numbers, built at most every few seconds however many watch (api/console.py)
    console: Callable[[], dict] | None = None
