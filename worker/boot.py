"""Build a worker's runtime once per process: database, store, engine (loaded and warmed up)."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from celery import Celery

from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.engines.base import Engine
from pipeline.engines.registry import load_engine
from pipeline.errors import StorageFullError
from pipeline.hostinfo import cpu_name
from pipeline.live import LiveAudio
from pipeline.render import warm
from pipeline.renderer import Renderer
from pipeline.settings import Settings
from pipeline.storage import make_store
from pipeline.verify.jobs import plan_checks
from worker.embedded import EmbeddedRedis
from worker.verify import check_later, retakes_for

log = logging.getLogger(__name__)
_lock = threading.Lock()


@dataclass
class Runtime:
    settings: Settings
    engine: Engine
    renderer: Renderer


def build_runtime(
    settings: Settings,
    engine: Engine | None = None,
    broker_url: str | None = None,
    check_later: Callable[[str], None] | None = None,
) -> Runtime:
    """``check_later``: how finished jobs' checks go to the verify queue; None checks them inline."""
    if engine is None:
        started = time.monotonic()
        engine = load_engine(settings.engine_settings())
        engine.warmup()
        log.info(
            "engine %s (%s, %s) ready on %s in %.1f s",
            engine.info.name,
            engine.info.model,
            engine.info.quantization,
            engine.info.device_type,
            time.monotonic() - started,
        )
    store = make_store(settings)
    fault = None
    try:
        store.check()
    except StorageFullError as e:  # an outage: the worker starts, and its jobs wait it out
        log.warning("%s: jobs wait until it takes writes again: %s", e.state, e)
        fault = e
    live = LiveAudio.from_url(broker_url, settings.live_stream_ttl) if broker_url else None
    if live is not None and broker_url:  # (a live publisher is made with a broker only)
        engine.publish_live(broker_url, settings.live_stream_ttl, live.owner)
    renderer = Renderer(
        engine=engine,
        store=store,
        sessions=make_sessionmaker(make_engine(settings.sqlalchemy_url)),
        max_chunk_chars=settings.max_chunk_chars,
        crossfade_ms=settings.crossfade_ms,
        worker_host=settings.worker_name,
        read_emoji=settings.read_emoji,
        live=live,
        storage_fault=fault,
        reuse=settings.reuse,
        silent_retries=settings.rerender_budget,
        meter_every_job=settings.loudness_meter == "all" or engine.info.device_type == cpu_name(),
        verifier=plan_checks(
            settings.verify,
            settings.verify_recognizer,
            on_cpu=engine.info.device_type == cpu_name(),
            sample=settings.verify_share,
            later=check_later,
        ),
    )
    warm(renderer)
    return Runtime(settings=settings, engine=engine, renderer=renderer)


def boot(app: Celery, engine: Engine | None = None) -> Runtime:
    """Load the engine before the worker consumes its first message."""
    with _lock:
        runtime = getattr(app, "synth_runtime", None)
        if runtime is None:
            settings, broker_url = app.synth_settings, app.conf.broker_url
            runtime = app.synth_runtime = build_runtime(
                settings, engine, broker_url, None if on_embedded_redis(settings, broker_url) else check_later(app)
            )
            runtime.renderer.retakes = retakes_for(app)
        return runtime


def on_embedded_redis(settings: Settings, broker_url: str) -> bool:
    """Whether the worker serves its data folder's embedded Redis (`synth submit` with nothing
    configured, or `synth worker` beside it): there it is the whole fleet, and checks its jobs as
    it finishes them, so the batch's summary and manifest carry every verdict."""
    return broker_url == EmbeddedRedis(settings.data_dir).url


def runtime_for(app: Celery) -> Runtime:
    runtime = getattr(app, "synth_runtime", None)
    return runtime if runtime is not None else boot(app)


MIN_BATCH_SLOTS = 2


def batch_slots(settings: Settings, engine: Engine) -> int:
    """Batch tasks in flight: ``settings.worker_concurrency``, or enough messages to fill the
    engine's rows twice over. An engine batches every job it is handed, so the worker's slots, not
    the engine, would otherwise cap the batch (2 slots of 8 jobs: 16 of 512 rows). Twice over,
    because a message holds its slot until its last job ends: the jobs waiting in the engine's
    own queue take the rows the finished ones free."""
    if settings.worker_concurrency:
        return settings.worker_concurrency
    return max(MIN_BATCH_SLOTS, math.ceil(2 * engine.info.max_batch / max(1, settings.jobs_per_task)))
