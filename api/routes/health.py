"""Liveness and readiness (no key needed), and Prometheus metrics (an operator route:
api/operator.py)."""

from __future__ import annotations

from collections.abc import Callable

import redis
from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool

from api.deps import State
from api.operator import OPERATOR_RESPONSES, MetricsAccess
from pipeline.db.session import check_reachable
from pipeline.errors import StorageFullError, SynthError

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "a dependency is unreachable"}})
async def readyz(state: State) -> JSONResponse:
    """Database, Redis and object storage are reachable, and the storage takes writes."""
    checks: dict[str, Callable[[], object]] = {
        "database": lambda: check_reachable(state.db),
        "redis": state.redis.ping,
        "storage": state.store.check,
    }
    results = {}
    for name, check in checks.items():
        try:
            await run_in_threadpool(check)
            results[name] = "ok"
        except StorageFullError as e:
            results[name] = f"{e.state}: {e}"
        except (SynthError, redis.RedisError, OSError) as e:
            results[name] = f"unreachable: {e}"
    ok = all(v == "ok" for v in results.values())
    return JSONResponse({"status": "ok" if ok else "unavailable", "checks": results}, status_code=200 if ok else 503)


@router.get("/metrics", response_class=Response, responses=OPERATOR_RESPONSES)
def metrics(state: State, _: MetricsAccess) -> Response:
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
