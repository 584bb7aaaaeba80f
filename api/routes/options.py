"""OPTIONS on any documented path: 204 with ``Allow`` listing the path's methods in the OpenAPI
document (RFC 9110), without a key, as a browser's preflight sends none. A literal path wins over a
template that would also match it (/v1/batches/upload is not a batch id). Included last, so it
answers only what no other route does."""

from __future__ import annotations

import re

from fastapi import APIRouter, HTTPException, Request, Response

router = APIRouter()
_PARAM = re.compile(r"\{[^}]+\}")


@router.options("/{path:path}", include_in_schema=False, status_code=204)
def options(path: str, request: Request) -> Response:
    matches = [(template.count("{"), methods) for template, methods in request.app.openapi()["paths"].items()
               if re.fullmatch(_PARAM.sub("[^/]+", re.escape(template).replace(r"\{", "{").replace(r"\}", "}")),
                               request.url.path)]
    if not matches:
        raise HTTPException(404, detail="Not Found")
    _, methods = min(matches, key=lambda m: m[0])
    return Response(status_code=204, headers={"Allow": ", ".join([*(m.upper() for m in methods), "OPTIONS"])})
