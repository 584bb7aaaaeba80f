"""Store a report (HTML + JSON) in object storage and record it in the reports table."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from pipeline.db.models_reports import Report as ReportRow
from pipeline.reports.compute import compute_report
from pipeline.reports.render_html import render_html
from pipeline.reports.render_json import render_json
from pipeline.storage import ObjectStore


def report_keys(period_end: datetime) -> tuple[str, str]:
    """reports/<date>.html and .json, named by the day the period ends (a nightly run at 06:00 UTC
    on 2026-11-22 writes reports/2026-11-22.html)."""
    day = period_end.strftime("%Y-%m-%d")
    return f"reports/{day}.html", f"reports/{day}.json"


def publish_report(
    sessions: sessionmaker[Session],
    store: ObjectStore,
    since: datetime,
    until: datetime,
    *,
    gpu_prices: Mapping[str, float] | None = None,
) -> ReportRow:
    with sessions() as session:
        report = compute_report(session, since, until, gpu_prices=gpu_prices)
    html_key, json_key = report_keys(report.period_end)
    store.put(html_key, render_html(report).encode(), "text/html; charset=utf-8")
    store.put(json_key, render_json(report).encode(), "application/json")
    row = ReportRow(
        period_start=report.period_start,
        period_end=report.period_end,
        created_at=report.generated_at,
        html_key=html_key,
        json_key=json_key,
        summary=report.to_dict(series=False),
    )
    with sessions() as session:
        session.add(row)
        session.commit()
    return row


def latest_report(session: Session) -> ReportRow | None:
    return session.scalars(select(ReportRow).order_by(ReportRow.created_at.desc()).limit(1)).first()
