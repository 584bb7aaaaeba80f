"""`synth worker`"""

from __future__ import annotations

import os
import sys

import click


@click.command()
@click.option("--gpu", type=int, help="Pin this worker to GPU N (sets CUDA_VISIBLE_DEVICES before torch loads).")
@click.option("--cpu", "cpu_only", is_flag=True, help="Hide all GPUs from this worker.")
@click.option("-Q", "--queues", help="Comma-separated queues [default: realtime, callbacks and every length bucket].")
@click.option("-c", "--concurrency", type=int, help="Tasks in flight [default: SYNTH_WORKER_CONCURRENCY].")
@click.option("--loglevel", default="INFO", show_default=True)
@click.option("-n", "--hostname", help="Celery node name [default: synth-gpuN@host or synth-cpu@host].")
def worker(gpu, cpu_only, queues, concurrency, loglevel, hostname) -> None:
    """Run a worker: load the engine once, warm it up, then render jobs from the queues.

    One worker per GPU: `synth worker --gpu 0`, `synth worker --gpu 1`, ... With no SYNTH_REDIS_URL
    it serves the embedded Redis of the data folder, finishing jobs queued there earlier.
    """
    if gpu is not None and cpu_only:
        raise click.UsageError("--gpu and --cpu exclude each other")
    from worker.gpu import pin_gpu

    pin_gpu(gpu, cpu_only)  # before anything imports torch

    from cli.context import broker, open_database
    from pipeline.settings import Settings
    from worker.app import default_queues, make_app, run_worker
    from worker.boot import boot
    from worker.maintenance import reconcile_at_start

    settings = Settings()
    if gpu is not None and settings.worker_name is None:  # workers sharing a host, told apart
        from pipeline.hostinfo import hostname as host_name

        settings = settings.with_overrides(worker_name=f"{host_name()}/gpu{gpu}")
    open_database(settings)
    with broker(settings) as broker_url:
        app = make_app(settings, broker_url)
        boot(app)
        from worker.metrics import install as install_metrics

        install_metrics(app, broker_url)  # Prometheus (SYNTH_WORKER_METRICS_PORT) + Redis heartbeat
        reconcile_at_start(app)
        name = hostname or f"synth-{'gpu' + str(gpu) if gpu is not None else 'cpu'}-{os.getpid()}@%h"
        sys.exit(run_worker(app, [
            "worker", "--pool", "threads",
            "--concurrency", str(concurrency or settings.worker_concurrency),
            "--queues", queues or ",".join(default_queues(settings)),
            "--loglevel", loglevel, "--hostname", name, "--without-gossip", "--without-mingle",
        ]))
