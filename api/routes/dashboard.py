"""The operators' console: batches in progress, the last 24 hours as plots, workers, the latest
failures, the latest report's key numbers and live queue depths.

GET /dashboard (HTML; it refreshes itself from GET /dashboard/data.json every few seconds), its
script and the vendored uPlot under /dashboard/static/, and a login for browsers (POST
/dashboard/login, then a session cookie: api/operator.py). With SYNTH_DASHBOARD_TOKEN set, send
``Authorization: Bearer <token>`` or log in; unset, loopback clients only. API keys are not
accepted: this is an operator view.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from html import escape
from pathlib import Path
from string import Template
from typing import Annotated

from fastapi import APIRouter, Form, Header, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from api.deps import State
from api.limits import check_rate
from api.operator import (
    OPERATOR_RESPONSES,
    DashboardAccess,
    check_operator,
    dashboard_tokens,
    end_session,
    refuse_query_token,
    start_session,
    token_matches,
)
from pipeline import deadletter
from pipeline.reports.fmt import HEADLINE_LABELS, num, pct

router = APIRouter(tags=["dashboard"])
LOGIN_TRIES, LOGIN_WINDOW_S = 10, 60
API_DIR = Path(__file__).resolve().parents[1]
TEMPLATE = Template((API_DIR / "templates" / "dashboard.html").read_text())
LOGIN = Template((API_DIR / "templates" / "login.html").read_text())
# What /dashboard/static/ serves, by name: the console's own script and style, and uPlot (MIT,
# vendored: deployments may have no internet, and no page of ours loads code from elsewhere).
STATIC = {
    "console.js": API_DIR / "static" / "console.js",
    "console.css": API_DIR / "static" / "console.css",
    "uPlot.iife.min.js": API_DIR / "static" / "uplot" / "uPlot.iife.min.js",
    "uPlot.min.css": API_DIR / "static" / "uplot" / "uPlot.min.css",
    "uPlot.LICENSE": API_DIR / "static" / "uplot" / "LICENSE",
}
# Scripts and styles from this origin only; the page's data rides in a JSON block no browser runs.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
    "form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@router.get("/dashboard/data.json", responses=OPERATOR_RESPONSES)
async def dashboard_data(state: State, _: DashboardAccess) -> dict:
    """The console's numbers: batches in progress, the last 24 h per time bucket, workers, latest
    failures, latest report headline, queue depths, dead letters."""
    assert state.console is not None  # set as the app starts (api/app.py)
    return await run_in_threadpool(state.console)


@router.get("/dashboard", response_class=HTMLResponse, responses=OPERATOR_RESPONSES)
async def dashboard(
    request: Request, state: State, authorization: Annotated[str | None, Header()] = None
) -> HTMLResponse:
    """The console; without access, the login form (401)."""
    try:
        check_operator(request, dashboard_tokens(state.settings), authorization, "SYNTH_DASHBOARD_TOKEN", cookie=True)
    except HTTPException as e:
        if e.status_code != 401:
            raise
        return login_page(e.headers)
    assert state.console is not None  # set as the app starts (api/app.py)
    data = await run_in_threadpool(state.console)
    return HTMLResponse(render(data), headers=SECURITY_HEADERS)


@router.post(
    "/dashboard/login",
    response_class=HTMLResponse,
    responses={
        303: {"description": "logged in: to /dashboard, with the session cookie"},
        401: {"description": "not the token of SYNTH_DASHBOARD_TOKEN"},
        429: {"description": "too many tries from this address (Retry-After)"},
        400: {"description": "a token in the query string"},
    },
)
async def login(request: Request, state: State, token: Annotated[str, Form(min_length=1, max_length=1000)]) -> Response:
    """Log a browser in with the operator token, sent in the form's body (never in the URL)."""
    refuse_query_token(request)
    tokens = dashboard_tokens(state.settings)
    if not tokens:  # nothing to log in to: loopback clients are let in, others told why not
        check_operator(request, (), None, "SYNTH_DASHBOARD_TOKEN")
    # guesses are slowed per client address, so a short token cannot be tried through at speed
    client = request.client.host if request.client else "unknown"
    await run_in_threadpool(check_rate, state.redis, f"login:{client}", limit=LOGIN_TRIES, window=LOGIN_WINDOW_S)
    if tokens and not token_matches(token, tokens):
        return login_page({"WWW-Authenticate": "Bearer"}, "That is not the operator token.")
    response = RedirectResponse("/dashboard", status_code=303)
    if tokens:
        start_session(response, request, token.strip())
    return response


@router.post("/dashboard/logout", responses={303: {"description": "to /dashboard, the session cookie removed"}})
async def logout(request: Request) -> RedirectResponse:
    response = RedirectResponse("/dashboard", status_code=303)
    end_session(response, request)
    return response


@router.get("/dashboard/static/{name}", include_in_schema=False)
async def static(name: str, _: DashboardAccess) -> FileResponse:
    path = STATIC.get(name)
    if path is None:
        raise HTTPException(404, detail=f"no file {name!r} here")
    media = "text/plain" if name.endswith("LICENSE") else None
    return FileResponse(
        path, media_type=media, headers={"Cache-Control": "private, max-age=300", "X-Content-Type-Options": "nosniff"}
    )


def login_page(headers: Mapping[str, str] | None, message: str = "") -> HTMLResponse:
    body = LOGIN.substitute(message=f'<p class="error">{escape(message)}</p>' if message else "")
    return HTMLResponse(body, status_code=401, headers={**SECURITY_HEADERS, **(headers or {})})


def render(data: dict) -> str:
    """The page with the numbers of its first paint in place (a browser without script, or the
    DOM read before the script ran, sees them); the script takes over from ``data``."""
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
            for k, v in report["headline"].items()
        )
    queues = "".join(f'<tr><td>{escape(q)}</td><td class="depth">{n}</td></tr>' for q, n in data["queues"].items())
    queues += (
        f"<tr><td>{deadletter.DEADLETTER} (could not be worked; docs/operations.md)</td>"
        f'<td class="depth" id="deadletter">{data["deadletter"]}</td></tr>'
    )
    workers = (
        "".join(
            f'<tr class="{"stale" if w["stale"] else ""}"><td>{escape(w["name"])}</td><td>{escape(w.get("device", ""))}</td>'
            f"<td>{escape(w.get('engine', ''))}</td><td>{escape(w.get('model', ''))}</td>"
            f"<td>{escape(w.get('quantization', ''))}</td><td>{escape(w.get('rows_in_use', '?'))}</td>"
            f'<td class="inflight">{escape(w.get("jobs_in_flight", "?"))}</td>'
            f'<td class="storage">{escape(w.get("storage", "?"))}</td>'
            f"<td>{w['age_s']:.0f} s ago{' (stale)' if w['stale'] else ''}</td></tr>"
            for w in data["workers"]
        )
        or '<tr><td colspan="9">No live workers.</td></tr>'
    )
    # "</" would end the script element early whatever the JSON says
    initial = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return TEMPLATE.substitute(
        now=escape(data["now"]),
        report_period=escape(period),
        report_cards=cards,
        queue_rows=queues,
        worker_rows=workers,
        initial=initial,
    )
