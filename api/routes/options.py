"""OPTIONS on any documented path: 204 with ``Allow`` listing the path's methods in the OpenAPI
document (RFC 9110), without a key, as a browser's preflight sends none. A literal path wins over a
template that would also match it (/v1/batches/upload is not a batch id). Included last, so it
answers only what no other route does, and only for OPTIONS: were its path to match every method,
Starlette would answer a path no route serves with 405 instead of 404."""

from __future__ import annotations

import re

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.routing import APIRoute
from starlette.routing import Match
from starlette.types import Scope


class _OptionsOnly(APIRoute):
    """Matches OPTIONS requests only; to any other method its path is not there at all."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] == "http" and scope["method"] != "OPTIONS":
            return Match.NONE, {}
        return super().matches(scope)


router = APIRouter(route_class=_OptionsOnly)
_PARAM = re.compile(r"\{[^}]+\}")


@router.options("/{path:path}", include_in_schema=False, status_code=204)
def options(path: str, request: Request) -> Response:
    matches = [
        (template.count("{"), methods)
        for template, methods in request.app.openapi()["paths"].items()
        if re.fullmatch(
            _PARAM.sub("[^/]+", re.escape(template).replace(r"\{", "{").replace(r"\}", "}")), request.url.path
        )
    ]
    if not matches:
        raise HTTPException(404, detail="Not Found")
    _, methods = min(matches, key=lambda m: m[0])
    return Response(status_code=204, headers={"Allow": ", ".join([*(m.upper() for m in methods), "OPTIONS"])})
