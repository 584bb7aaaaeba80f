"""`synth beat`"""

from __future__ import annotations

from pathlib import Path

import click

from pipeline.settings import Settings


def schedule_path(settings: Settings) -> Path:
    """Where beat keeps when each entry last ran, so a restart neither repeats nor skips a run."""
    return settings.data_dir / "celerybeat-schedule"


@click.command()
@click.option(
    "--loglevel", default="INFO", show_default=True, help="Celery's log level: DEBUG, INFO, WARNING or ERROR."
)
def beat(loglevel: str) -> None:
    """Run the scheduler: the nightly report (SYNTH_REPORT_CRON, default 06:00 UTC), hourly batch
    expiry (SYNTH_EXPIRE_CRON) and the webhook sweep. Run exactly one per deployment; workers do
    the work (and run the reconciler themselves, every SYNTH_RECONCILE_INTERVAL). With no
    SYNTH_REDIS_URL it uses the embedded Redis of the data folder, like `synth worker`."""
    from cli.context import broker, open_database
    from worker.app import make_app

    settings = Settings()
    open_database(settings)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with broker(settings) as broker_url:
        app = make_app(settings, broker_url)
        app.Beat(loglevel=loglevel, schedule=str(schedule_path(settings)), quiet=True).run()
