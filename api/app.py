"""The app factory: ``create_app(settings)`` builds the database, store, broker and Redis clients once
(lifespan), adds the limits and metrics middleware, and includes the routers of api/routes."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
from collections.abc import AsyncIterator

import redis
import redis.asyncio as aioredis
from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.types import Message

from api import console, creating, errors, openapi, revocation
from api.limits import BodyLimitMiddleware
from api.livehub import LiveHub
from api.metrics import Metrics, MetricsMiddleware
from api.routes import ROUTERS
from api.state import ApiState
from pipeline import api_keys
from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.errors import ServiceUnavailableError
from pipeline.gcfreeze import freeze_boot_objects
from pipeline.live import redis_client_url
from pipeline.settings import Settings
from pipeline.storage import make_store
from worker.app import make_app

# Redis connections per pool. Requests take one for a command or two and give it back; the live
# streams share the hub's one. A request that finds the pool empty waits up to REDIS_WAIT_S for a
# connection rather than failing, and past that gets a 503.
REDIS_CONNECTIONS = 64
REDIS_WAIT_S = 5.0


def create_app(settings: Settings, *, broker_url: str | None = None, serving: bool = False) -> FastAPI:
    """``broker_url``: the Redis to use when settings.redis_url is unset (the CLI's embedded one).
    ``serving``: the app is its process's one for life (`synth api`): once started, what it
    built is frozen out of the garbage collector's scans (pipeline/gcfreeze.py)."""
    url = broker_url or settings.redis_url
    if not url:
        raise ServiceUnavailableError("the API needs Redis: set SYNTH_REDIS_URL (or run `synth api`)")
    metrics = Metrics()
    lifespan = _lifespan(settings, url, metrics, serving)

    app = FastAPI(
        title="synth",
        version="1",
        lifespan=lifespan,
        description="Batch and realtime text-to-speech. Authenticate with `Authorization: Bearer sk_synth_...`.",
    )
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.api_max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    errors.install(app)
    openapi.install(app, settings)
    for name in ROUTERS:
        app.include_router(importlib.import_module(f"api.routes.{name}").router)
    return app


def _lifespan(settings: Settings, url: str, metrics: Metrics, serving: bool):
    """The app's life: what it opens at start (the database, Redis, the live hub, the speech
    creator), warmed before the first request, and closes at the end."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = make_engine(settings.sqlalchemy_url)
        state = _state(settings, engine, url, metrics)
        await state.live.start()
        revocations = asyncio.create_task(revocation.watch(state), name="synth-revocations")
        await run_in_threadpool(_warm, state)
        speech = creating.SpeechCreator(state)
        speech.start()
        state.create_speech = speech.create
        state.console = console.SnapshotCache(functools.partial(console.snapshot, state), check=state.redis.ping).get
        app.state.synth = state
        await _warm_routes(app)
        if serving:
            freeze_boot_objects("api")
        try:
            yield
        finally:
            revocations.cancel()
            await run_in_threadpool(speech.stop)
            await state.live.close()
            await state.aredis.aclose()
            state.redis.close()
            engine.dispose()

    return lifespan


def _state(settings: Settings, engine, url: str, metrics: Metrics) -> ApiState:
    """The app's state over the database ``engine`` and the Redis at ``url``: the API's
    connection pools wait for a free connection rather than fail (REDIS_WAIT_S)."""
    client_url = redis_client_url(url)
    return ApiState(
        settings=settings,
        db=engine,
        sessions=make_sessionmaker(engine),
        store=make_store(settings),
        celery=make_app(settings, url),
        redis=redis.Redis(
            connection_pool=redis.BlockingConnectionPool.from_url(
                client_url, max_connections=REDIS_CONNECTIONS, timeout=REDIS_WAIT_S
            )
        ),
        aredis=aioredis.Redis(
            connection_pool=aioredis.BlockingConnectionPool.from_url(
                client_url, max_connections=REDIS_CONNECTIONS, timeout=REDIS_WAIT_S
            )
        ),
        live=LiveHub(client_url, settings.api_max_live_streams, settings.api_max_live_streams_per_key),
        metrics=metrics,
    )


def _warm(state: ApiState) -> None:
    """First-use costs at start, not on the first request: a database connection and the key
    lookup's compiled SQL, a Redis connection of the shared pool, and the create path's SQL and
    broker producer."""
    with state.sessions() as session:
        api_keys.authenticate(session, api_keys.KEY_PREFIX + "warm-up")
    state.redis.ping()
    creating.warm(state)


async def _warm_routes(app: FastAPI) -> None:
    """Route matching's first-use costs at start: FastAPI builds each included router's routes
    (their dependencies, models and validators) when the first request reaches them, which put
    15 ms on the first speech request (2-core VM). A request for no route walks them all; it is
    answered 404 by the router, past the middleware, so no request is counted."""
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/-/warm-up",
        "raw_path": b"/-/warm-up",
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "scheme": "http",
        "http_version": "1.1",
        "server": ("127.0.0.1", 0),
        "client": ("127.0.0.1", 0),
    }

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(_message: Message) -> None:
        pass

    await app.router(scope, receive, send)
