"""The operators' page: the latest report's key numbers, live queue depths and worker status.

GET /dashboard (HTML, refreshes itself) and GET /dashboard/data.json. With SYNTH_DASHBOARD_TOKEN
set, send ``Authorization: Bearer <token>``; unset, loopback clients only (api/operator.py). API keys
are not accepted: this is an operator view.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from string import Template

from fastapi import APIRouter
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from api.deps import State
from api.operator import OPERATOR_RESPONSES, DashboardAccess
from pipeline import deadletter
from pipeline.reports import fleet
from pipeline.reports.fmt import HEADLINE_LABELS, num, pct
from pipeline.reports.publish import latest_report
from pipeline.routing import all_queues

router = APIRouter(tags=["dashboard"])
TEMPLATE = Template((Path(__file__).resolve().parents[1] / "templates" / "dashboard.html").read_text())


def snapshot(state) -> dict:
    with state.sessions() as session:
        row = latest_report(session)
    report = None
    if row is not None:
        summary = row.summary or {}
        report = {"id": row.id, "period_start": row.period_start.isoformat(), "period_end": row.period_end.isoformat(),
                  "html_key": row.html_key, "json_key": row.json_key, "headline": summary.get("headline", {}),
                  "changes": summary.get("changes", {})}
    return {"now": datetime.now(UTC).isoformat(timespec="seconds"), "latest_report": report,
            "queues": fleet.queue_depths(state.redis, all_queues(state.settings.bucket_seconds)),
            "workers": fleet.workers(state.redis), "deadletter": deadletter.count(state.redis)}


@router.get("/dashboard/data.json", responses=OPERATOR_RESPONSES)
async def dashboard_data(state: State, _: DashboardAccess) -> dict:
    """The dashboard's numbers: latest report headline, queue depths, live workers, dead letters."""
    return await run_in_threadpool(snapshot, state)


@router.get("/dashboard", response_class=HTMLResponse, responses=OPERATOR_RESPONSES)
async def dashboard(state: State, _: DashboardAccess) -> HTMLResponse:
    data = await run_in_threadpool(snapshot, state)
    return HTMLResponse(render(data))


def render(data: dict) -> str:
    report = data["latest_report"]
    cards = "<p>No report yet.</p>"
    period = "none"
    if report is not None:
        period = f"{report['period_start'][:16]} – {report['period_end'][:16]} UTC"
        changes = report.get("changes") or {}
        cards = "".join(
            f'<div class="card"><div class="label">{escape(HEADLINE_LABELS.get(k, k))}</div>'
            f'<div class="value" id="h-{escape(k)}">{escape(num(v))}</div>'
            f'<div class="change">{escape(pct(changes.get(k)))} vs previous period</div></div>'
            for k, v in report["headline"].items())
    queues = "".join(f'<tr><td>{escape(q)}</td><td class="depth">{n}</td></tr>' for q, n in data["queues"].items())
    queues += (f'<tr><td>{deadletter.DEADLETTER} (could not be worked; docs/operations.md)</td>'
               f'<td class="depth" id="deadletter">{data["deadletter"]}</td></tr>')
    now = time.time()
    workers = "".join(
        f"<tr><td>{escape(w['name'])}</td><td>{escape(w.get('device', ''))}</td><td>{escape(w.get('engine', ''))}</td>"
        f"<td>{escape(w.get('model', ''))}</td><td>{escape(w.get('quantization', ''))}</td>"
        f'<td class="inflight">{escape(w.get("jobs_in_flight", "?"))}</td>'
        f'<td class="storage">{escape(w.get("storage", "?"))}</td>'
        f"<td>{_ago(now, w.get('last_seen'))}</td></tr>"
        for w in data["workers"]) or '<tr><td colspan="8">No live workers.</td></tr>'
    return TEMPLATE.substitute(now=escape(data["now"]), report_period=escape(period), report_cards=cards,
                               queue_rows=queues, worker_rows=workers)


def _ago(now: float, last_seen: str | None) -> str:
    try:
        return f"{max(0.0, now - float(last_seen)):.0f} s ago"
    except (TypeError, ValueError):
        return "?"
