"""OPTIONS on any route: 204 with ``Allow`` listing the methods the path has (RFC 9110), without a
key, as a browser's preflight sends none. Included last, so it only answers what no other route does."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, Response
from starlette.routing import Match

router = APIRouter()
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


@router.options("/{path:path}", include_in_schema=False, status_code=204)
def options(path: str, request: Request) -> Response:
    allowed = [method for method in METHODS if any(
        route.matches({**request.scope, "method": method})[0] == Match.FULL for route in request.app.router.routes)]
    if not allowed:
        raise HTTPException(404, detail="Not Found")
    return Response(status_code=204, headers={"Allow": ", ".join([*allowed, "OPTIONS"])})
