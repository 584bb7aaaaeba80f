"""`synth worker`"""

from __future__ import annotations

import os
import sys

import click

from pipeline.errors import InputError


@click.command()
@click.option("--gpu", type=int, help="Pin this worker to GPU N (sets CUDA_VISIBLE_DEVICES before torch loads).")
@click.option("--cpu", "cpu_only", is_flag=True, help="Hide all GPUs from this worker.")
@click.option("-Q", "--queues", help="Comma-separated queues [default: realtime, webhooks and every length bucket].")
@click.option(
    "-c",
    "--concurrency",
    type=click.IntRange(min=0),
    help="Batch tasks in flight [default: SYNTH_WORKER_CONCURRENCY, else derived from the engine's rows].",
)
@click.option(
    "--loglevel", default="INFO", show_default=True, help="Celery's log level: DEBUG, INFO, WARNING or ERROR."
)
@click.option("-n", "--hostname", help="Celery node name [default: synth-gpuN@host or synth-cpu@host].")
@click.option(
    "--verify",
    "verify_only",
    is_flag=True,
    help="Check finished jobs' audio against their text (the verify queue); load no engine. "
    "-c: checks at once [default: the CPU cores].",
)
def worker(gpu, cpu_only, queues, concurrency, loglevel, hostname, verify_only) -> None:
    """Run a worker: load the engine once, warm it up, then render jobs from the queues.

    One worker per GPU: `synth worker --gpu 0`, `synth worker --gpu 1`, ... With no SYNTH_REDIS_URL
    it serves the embedded Redis of the data folder, finishing jobs queued there earlier.

    `synth worker --verify` checks finished jobs against their text (SYNTH_VERIFY) with no engine.

    Realtime jobs have a consumer of their own beside the batch tasks' slots, so they reach the
    engine as soon as they arrive, however much batch work is running or queued; so do webhook
    deliveries (SYNTH_WEBHOOK_CONCURRENCY at once, SYNTH_WEBHOOK_HOST_CONCURRENCY per receiver). The batch slots
    follow the engine's rows: nothing needs tuning per GPU.
    """
    if gpu is not None and cpu_only:
        raise click.UsageError("--gpu and --cpu exclude each other")
    if verify_only and (gpu is not None or queues):
        raise click.UsageError("--verify serves the verify queue on the CPU: it takes no --gpu or -Q")
    from worker.gpu import pin_gpu

    if verify_only:
        _verify_worker(concurrency, loglevel, hostname)
    pin_gpu(gpu, cpu_only)  # before anything imports torch
    _render_worker(gpu, queues, concurrency, loglevel, hostname)


def _render_worker(gpu, queues, concurrency, loglevel, hostname) -> None:
    """The engine's worker, its GPU pinned: boot the engine, serve the queues until stopped."""
    from cli.context import broker, open_database
    from pipeline.settings import Settings
    from worker.app import default_queues, make_app, run_worker, worker_command
    from worker.boot import batch_slots, boot
    from worker.maintenance import ReconcileTimer
    from pipeline.gcfreeze import freeze_boot_objects

    worker_command()
    settings = Settings()
    if gpu is not None and settings.worker_name is None:  # workers sharing a host, told apart
        from pipeline.hostinfo import hostname as host_name

        settings = settings.with_overrides(worker_name=f"{host_name()}/gpu{gpu}")
    open_database(settings)
    with broker(settings) as broker_url:
        app = make_app(settings, broker_url)
        runtime = boot(app)
        engine_lost = _stop_when_engine_is_lost(runtime.engine)
        from worker.metrics import install as install_metrics

        install_metrics(app, broker_url)  # Prometheus (SYNTH_WORKER_METRICS_PORT) + Redis heartbeat
        wanted = _former_names(queues.split(",")) if queues else _cpu_checks(runtime, default_queues(settings))
        batch_queues = _own_consumers(app, runtime, wanted)
        slots = concurrency or batch_slots(settings, runtime.engine)
        name = hostname or f"synth-{'gpu' + str(gpu) if gpu is not None else 'cpu'}-{os.getpid()}@%h"
        reconciler = ReconcileTimer(app).start()  # the fleet heals itself, with or without `synth beat`
        freeze_boot_objects("worker")  # a full collection while serving scans only what came later
        argv = ["worker", "--pool", "threads", "--concurrency", str(slots), "--queues", ",".join(batch_queues)]
        try:
            code = run_worker(
                app, [*argv, "--loglevel", loglevel, "--hostname", name, "--without-gossip", "--without-mingle"]
            )
        finally:
            # Also when Celery fails to start: an engine process of its own ignores SIGTERM (the
            # worker decides when it stops), so the exit would wait on it forever, its heartbeat
            # still saying the worker is alive.
            reconciler.stop()
            runtime.engine.close()
        sys.exit(code or (1 if engine_lost.is_set() else 0))


def _verify_worker(concurrency, loglevel, hostname) -> None:
    """`synth worker --verify`: the verify queue alone, with no engine. Checks are CPU-bound, in
    a recognizer that holds the GIL, so each runs in a process of its own (Celery's prefork pool);
    a process killed mid-check leaves its message unacked, and it is checked again."""
    from cli.context import broker, open_database
    from pipeline.routing import VERIFY_QUEUE
    from pipeline.settings import Settings
    from worker.app import make_app, run_worker
    from worker.gpu import pin_gpu

    pin_gpu(None, True)
    settings = Settings()
    _lower_priority(settings.verify_nice)
    if settings.redis_url is None:
        # nothing is ever sent to the embedded Redis's verify queue: a worker there would wait forever
        raise InputError(
            "synth worker --verify serves the verify queue of a shared Redis (SYNTH_REDIS_URL); "
            "on the embedded Redis, the worker that renders a job checks it"
        )
    open_database(settings)
    with broker(settings) as broker_url:
        app = make_app(settings, broker_url)
        code = run_worker(
            app,
            [
                "worker",
                "--pool",
                "prefork",
                "--concurrency",
                str(concurrency or os.cpu_count() or 1),
                "--queues",
                VERIFY_QUEUE,
                "--loglevel",
                loglevel,
                "--hostname",
                hostname or f"synth-verify-{os.getpid()}@%h",
                "--without-gossip",
                "--without-mingle",
            ],
        )
        sys.exit(code)


def _lower_priority(nice: int) -> None:
    """This process and the pool's processes it forks run ``nice`` steps below where it started,
    so the kernel gives a render worker on the same host its CPU first. Where the OS has no
    niceness (Windows), checks run as started."""
    if nice and hasattr(os, "nice"):
        os.nice(nice)


def _cpu_checks(runtime, queues: list[str]) -> list[str]:
    """A worker whose engine runs on the CPU checks jobs too, once its own queues are empty: a CPU
    fleet has its checks done with no worker of their own. A GPU worker never waits for one."""
    from pipeline.hostinfo import cpu_name
    from pipeline.routing import VERIFY_QUEUE

    return [*queues, VERIFY_QUEUE] if runtime.engine.info.device_type == cpu_name() else queues


def _own_consumers(app, runtime, wanted: list[str]) -> list[str]:
    """Start the consumers of the realtime and webhook queues, which work beside Celery's pool so
    that neither waits for a render slot; return the queues left to Celery. A worker that consumes
    nothing else leaves them to Celery: its pool is theirs alone."""
    from celery.signals import worker_shutdown

    from pipeline.routing import REALTIME_QUEUE
    from worker.deliveries import WEBHOOK_QUEUES, DeliveryConsumer
    from worker.realtime import RealtimeConsumer, realtime_slots

    hooks = tuple(q for q in wanted if q in WEBHOOK_QUEUES)
    rest = [q for q in wanted if q not in hooks]
    if hooks and rest:
        deliveries = DeliveryConsumer(app, hooks).start()
        worker_shutdown.connect(lambda **_: deliveries.stop(), weak=False)
    else:
        rest = wanted
    batch = [q for q in rest if q != REALTIME_QUEUE]
    if REALTIME_QUEUE in rest and batch:
        realtime = RealtimeConsumer(app, realtime_slots(runtime.engine.info.max_batch)).start()
        worker_shutdown.connect(lambda **_: realtime.stop(), weak=False)
        rest = batch
    return rest


def _former_names(queues: list[str]) -> list[str]:
    """``-Q callbacks``, the webhook queue's former name, still works: it consumes the queue under
    both names (messages of the previous release wait under the old one), with a warning."""
    from pipeline.routing import FORMER_WEBHOOK_QUEUE as FORMER_QUEUE
    from pipeline.routing import WEBHOOK_QUEUE

    if FORMER_QUEUE not in queues:
        return queues
    click.echo(
        f"synth worker: the queue {FORMER_QUEUE!r} is now {WEBHOOK_QUEUE!r}; -Q {FORMER_QUEUE} is "
        f"deprecated and consumes both (write -Q {WEBHOOK_QUEUE})",
        err=True,
    )
    at = queues.index(FORMER_QUEUE)
    return [*queues[:at], WEBHOOK_QUEUE, *queues[at:]] if WEBHOOK_QUEUE not in queues else queues


def _stop_when_engine_is_lost(engine):
    """A worker whose engine process died can render nothing: it shuts down (its open jobs end
    retryable, its messages go back to the queue) and exits non-zero, so its supervisor starts a
    fresh one."""
    import signal
    import threading

    from pipeline.engines.hosted import HostedEngine

    lost = threading.Event()
    if isinstance(engine, HostedEngine):

        def on_lost() -> None:
            lost.set()
            os.kill(os.getpid(), signal.SIGTERM)

        engine.on_lost = on_lost
    return lost
