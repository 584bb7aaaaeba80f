"""The Celery app, built from Settings (never at import time).

A producer (`synth submit`, the API) only sends messages by task name: ``make_producer`` gives it
the app without the worker's task modules, which import the renderer, the reports and the webhook
client, a quarter of a second that every `synth submit` would pay. ``make_app`` is the worker's."""

from __future__ import annotations

from celery import Celery
from kombu import Queue

from pipeline.routing import FORMER_WEBHOOK_QUEUE, VERIFY_QUEUE, WEBHOOK_QUEUE, all_queues
from pipeline.settings import Settings


def default_queues(settings: Settings) -> list[str]:
    """What a worker consumes unless told otherwise, in polling order: realtime, then webhooks
    (short, and late webhooks are what clients notice; their queue's former name too), then the
    length buckets, longest first unless ``bucket_order`` says shortest (see Settings)."""
    realtime, *buckets = all_queues(settings.bucket_seconds)
    if settings.bucket_order == "longest":
        buckets.reverse()
    return [realtime, WEBHOOK_QUEUE, FORMER_WEBHOOK_QUEUE, *buckets]


def restore_interval(settings: Settings) -> int:
    """Seconds between a worker's sweeps for messages whose visibility timeout ran out."""
    return max(1, min(60, settings.visibility_timeout // 6))


def worker_command():
    """Celery's command line. Imported here, not at the top: it (an interactive shell's toolkit
    with it) is a tenth of a second that producers such as `synth submit` need not pay. A worker
    imports it before it boots its engine, so an install that lacks a piece of it fails at once
    rather than after minutes of loading."""
    from celery.bin.celery import celery

    return celery


def run_worker(app: Celery, argv: list[str]) -> int:
    """``celery worker`` on ``app``; returns its exit status (``app.worker_main`` drops it, so a
    worker that stopped on an error would exit 0)."""
    celery = worker_command()
    celery.params[0].default = app
    try:
        return celery.main(args=argv, standalone_mode=False) or 0
    finally:
        celery.params[0].default = None


def make_app(settings: Settings, broker_url: str) -> Celery:
    """The worker's app: the producer's, with every task registered."""
    from worker import beat, deadletter, documents, tasks, verify, webhooks

    app = make_producer(settings, broker_url)
    deadletter.install(app)  # a message it cannot act on goes to synth.deadletter, not the worker
    tasks.register(app)  # the render task, and batch expiry (maintenance.py)
    verify.register(app)  # checks of finished jobs on the verify queue
    beat.register(app)  # the nightly report task and the beat schedule
    webhooks.register(app)  # after beat: it adds the webhook sweep to the beat schedule
    documents.register(app)  # after beat: a document's assembly, on the verify queue, and its sweep
    return app


def make_producer(settings: Settings, broker_url: str) -> Celery:
    """The app's configuration, with no task registered: enough to send any message by name."""
    app = Celery("synth", broker=broker_url, set_as_current=False)
    queues = all_queues(settings.bucket_seconds)
    app.conf.update(
        task_queues=[
            Queue(name, routing_key=name) for name in [*queues, WEBHOOK_QUEUE, FORMER_WEBHOOK_QUEUE, VERIFY_QUEUE]
        ],
        task_default_queue=queues[1],
        task_serializer="json",
        accept_content=["json"],
        # Outcomes live in the database; Celery's result backend would be a second source of truth.
        task_ignore_result=True,
        # Ack only after the task body returns. A worker that dies mid-job (OOM, kill -9, a lost
        # machine) leaves its message unacked, and Redis hands it to another worker: no job is lost.
        # Rendering is idempotent (claim() skips finished jobs, object keys are deterministic), so
        # a redelivered message finishes its jobs once.
        task_acks_late=True,
        # A prefork child killed by a signal: requeue its message instead of acking it as failed.
        task_reject_on_worker_lost=True,
        # One message in hand per slot: a long batch task must not hold others hostage in a busy
        # worker's prefetch buffer while idle workers wait.
        worker_prefetch_multiplier=1,
        broker_transport_options={
            # Redis redelivers an unacked message after this many seconds. It must be longer than the
            # longest task (jobs_per_task jobs of the longest bucket), or a slow but healthy task is
            # delivered twice. Default one hour.
            "visibility_timeout": settings.visibility_timeout,
            # How often a worker sweeps for messages whose visibility ran out (a dead worker's), so
            # recovery time follows the timeout instead of kombu's fixed 100 s sweep.
            "unacked_restore_interval": restore_interval(settings),
            "unacked_restore_throttle": 1,
            # A sweep holds a Redis lock for its few milliseconds; kombu lets it expire after
            # 300 s. A worker killed inside a sweep (kill -9) leaves the lock held, and no worker
            # could restore its messages for those 5 minutes.
            "unacked_mutex_expire": max(5, restore_interval(settings)),
            # Poll queues in the listed order, realtime first, instead of round-robin.
            "queue_order_strategy": "priority",
        },
        # Wait for the broker as long as it takes (kombu backs off up to 30 s between tries and
        # Celery logs each one): a worker that gave up would leave its queues unserved until
        # someone restarted it, and would throw away its loaded engine.
        broker_connection_retry_on_startup=True,
        broker_connection_retry=True,
        broker_connection_max_retries=None,
        worker_send_task_events=True,
        task_send_sent_event=False,
        worker_hijack_root_logger=False,
    )
    app.synth_settings = settings
    return app
