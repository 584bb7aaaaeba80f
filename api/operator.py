"""Who may read the operator routes (/dashboard, /metrics): they take no API key, and they show
what a tenant must not see (worker hosts, queue depths, every route's traffic).

Closed unless opened: with a token set, ``Authorization: Bearer <token>`` from anywhere; with none
set, loopback clients only (``synth api`` on a laptop, an SSH tunnel, a sidecar). A request relayed
by a proxy is never a loopback client, even from a proxy on the same host. A token in the query
string is refused rather than read: URLs are written to access logs and browser histories.

A browser logs in to the console once (POST /dashboard/login, the token in the form's body) and
then carries a session cookie: ``<expiry>.<HMAC-SHA256 of the expiry under the token>``. The
cookie holds no token and no server keeps sessions; changing the token ends every session. It is
HttpOnly (no script reads it), SameSite=Strict (no other site's page sends it), Secure over HTTPS,
and scoped to /dashboard.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import time
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request, Response

from api.deps import Responses, Settings

# Headers a proxy adds to say who its client is. uvicorn already takes the client from
# X-Forwarded-For when the proxy is a trusted (loopback) one; a proxy that sends only X-Real-IP
# or Forwarded would otherwise make every client look local.
PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-real-ip")
QUERY_TOKENS = ("token", "access_token")
SESSION_COOKIE = "synth_console"
SESSION_PATH = "/dashboard"
SESSION_S = 12 * 3600  # a working day; then the operator logs in again
OPERATOR_RESPONSES: Responses = {
    400: {"description": "a token in the query string (send it as a Bearer token)"},
    401: {"description": "a token is set and this request did not send it"},
    403: {"description": "no token is set and the client is not on loopback"},
}


def check_operator(
    request: Request, tokens: tuple[str, ...], authorization: str | None, setting: str, *, cookie: bool = False
) -> None:
    """Passes, or raises the 400, 401 or 403 that says what to send; ``setting`` names the
    variables that set ``tokens``. ``cookie``: a console session (``SESSION_COOKIE``) opens it too."""
    refuse_query_token(request)
    if tokens and cookie and authorization is None and valid_session(request.cookies.get(SESSION_COOKIE), tokens):
        return
    if tokens:
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token_matches(given, tokens):
            raise HTTPException(
                401,
                detail=f"send the token of {setting} as `Authorization: Bearer <token>`",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return
    if not _loopback(request):
        raise HTTPException(403, detail=f"{setting} is unset, so this route answers loopback clients only")


def refuse_query_token(request: Request) -> None:
    if any(name in request.query_params for name in QUERY_TOKENS):
        raise HTTPException(
            400, detail="a token in the URL is refused (URLs are logged): send it as `Authorization: Bearer <token>`"
        )


def token_matches(given: str, tokens: tuple[str, ...]) -> bool:
    return any(_same(given.strip(), t) for t in tokens)


def _signature(token: str, expires: int) -> str:
    return hmac.new(token.encode(), f"synth-console:{expires}".encode(), hashlib.sha256).hexdigest()


def valid_session(cookie: str | None, tokens: tuple[str, ...], now: float | None = None) -> bool:
    expires, _, signature = (cookie or "").partition(".")
    if not expires.isdigit() or len(expires) > 12 or int(expires) < (time.time() if now is None else now):
        return False
    return any(_same(signature, _signature(t, int(expires))) for t in tokens)


def start_session(response: Response, request: Request, token: str) -> None:
    expires = int(time.time()) + SESSION_S
    response.set_cookie(
        SESSION_COOKIE,
        f"{expires}.{_signature(token, expires)}",
        max_age=SESSION_S,
        path=SESSION_PATH,
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )


def end_session(response: Response, request: Request) -> None:
    response.delete_cookie(
        SESSION_COOKIE, path=SESSION_PATH, secure=request.url.scheme == "https", httponly=True, samesite="strict"
    )


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def _loopback(request: Request) -> bool:
    if request.client is None or any(h in request.headers for h in PROXY_HEADERS):
        return False
    try:
        return ipaddress.ip_address(request.client.host).is_loopback
    except ValueError:  # not an address (a Unix socket's peer): nothing says it is local
        return False


# A header parameter, so the OpenAPI document lists it; these routes declare no security scheme,
# since with no token set they answer a loopback client without one.
async def dashboard_access(
    request: Request, settings: Settings, authorization: Annotated[str | None, Header()] = None
) -> None:
    check_operator(request, dashboard_tokens(settings), authorization, "SYNTH_DASHBOARD_TOKEN", cookie=True)


def dashboard_tokens(settings) -> tuple[str, ...]:
    return _tokens(settings.dashboard_token)


async def metrics_access(
    request: Request, settings: Settings, authorization: Annotated[str | None, Header()] = None
) -> None:
    """The scraper's own token, or the operator's."""
    check_operator(
        request,
        _tokens(settings.metrics_token, settings.dashboard_token),
        authorization,
        "SYNTH_METRICS_TOKEN (or SYNTH_DASHBOARD_TOKEN)",
    )


def _tokens(*tokens: str | None) -> tuple[str, ...]:
    return tuple(t for t in tokens if t)


DashboardAccess = Annotated[None, Depends(dashboard_access)]
MetricsAccess = Annotated[None, Depends(metrics_access)]
