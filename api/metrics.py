"""Prometheus metrics of the API: requests and latency by route template, method and status.

Every label takes a bounded set of values: a client chooses the method and path it sends, and a
label per made-up value would grow the registry (and each scrape) without end."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class Metrics:
    """One registry per app, so two apps in one process (tests) keep separate counts."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "synth_api_requests", "HTTP requests", ["method", "route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "synth_api_request_seconds",
            "Time to the response's first byte",
            ["method", "route"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def timed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                self.metrics.latency.labels(_method(scope), _route(scope)).observe(time.perf_counter() - started)
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            self.metrics.requests.labels(_method(scope), _route(scope), str(status)).inc()


# The methods HTTP defines (RFC 9110, and PATCH); uvicorn passes on any token as a method.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"})


def _method(scope: Scope) -> str:
    method = scope["method"]
    return method if method in METHODS else "other"


def _route(scope: Scope) -> str:
    """The matched route's template (/v1/jobs/{job_id}), never the raw path: one label for every
    path no route serves."""
    route = scope.get("route")
    return getattr(route, "path", None) or "unmatched"
