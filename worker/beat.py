"""Periodic work: the nightly report and hourly batch expiry, scheduled by `synth beat`. (The
reconciler is no beat entry: every worker runs it on a timer of its own, worker/maintenance.py.)

``register`` adds the report task to an app and its beat schedule; make_app calls it, so every worker
can run the task and `synth beat` (celery beat) sends it on the crontab in Settings.report_cron.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from celery import Celery
from celery.schedules import crontab

from pipeline.db.session import make_engine, make_sessionmaker
from pipeline.errors import InputError
from pipeline.reports.publish import publish_report
from pipeline.settings import Settings
from pipeline.storage import make_store
from worker.maintenance import EXPIRE_TASK

log = logging.getLogger(__name__)

REPORT_TASK = "synth.nightly_report"


def parse_cron(expr: str) -> crontab:
    """'m h dom mon dow' (UTC) -> a celery crontab."""
    fields = expr.split()
    if len(fields) != 5:
        raise InputError(f"cron expression {expr!r} must have 5 fields: minute hour day month weekday")
    minute, hour, day_of_month, month_of_year, day_of_week = fields
    return crontab(
        minute=minute, hour=hour, day_of_month=day_of_month, month_of_year=month_of_year, day_of_week=day_of_week
    )


def beat_schedule(settings: Settings) -> dict:
    return {
        "nightly-report": {"task": REPORT_TASK, "schedule": parse_cron(settings.report_cron)},
        "expire-batches": {"task": EXPIRE_TASK, "schedule": parse_cron(settings.expire_cron)},
    }


def report_period(now: datetime, hours: float = 24) -> tuple[datetime, datetime]:
    """The ``hours`` before ``now`` rounded down to the hour: a run at 06:00:07 covers 06:00 to 06:00."""
    until = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return until - timedelta(hours=hours), until


def register(app: Celery) -> None:
    settings: Settings = app.synth_settings
    app.conf.beat_schedule = beat_schedule(settings)
    app.conf.timezone = "UTC"
    app.conf.enable_utc = True

    @app.task(name=REPORT_TASK, shared=False)
    def nightly_report(until: str | None = None, hours: float = 24) -> dict:
        now = datetime.fromisoformat(until) if until else datetime.now(UTC)
        since, end = report_period(now, hours)
        engine = make_engine(settings.sqlalchemy_url)
        try:
            row = publish_report(
                make_sessionmaker(engine), make_store(settings), since, end, gpu_prices=settings.gpu_prices
            )
        finally:
            engine.dispose()
        log.info("report %s for %s .. %s written to %s", row.id, since, end, row.html_key)
        return {"id": row.id, "html_key": row.html_key, "json_key": row.json_key}
