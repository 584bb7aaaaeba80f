"""Request limits: body size (middleware, before any parsing) and the per-key rate limit."""

from __future__ import annotations

import json
import time

import redis
from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_body


class BodyLimitMiddleware:
    """413 for a body over ``max_bytes``: from Content-Length when given, else counted as it arrives
    (a chunked upload is cut off at the limit, not read to the end)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            await _too_large(send, self.max_bytes, scope["path"])
            return
        seen = 0
        started = False

        async def counted_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _BodyTooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted_receive, tracking_send)
        except _BodyTooLarge:
            if not started:
                await _too_large(send, self.max_bytes, scope["path"])


class _BodyTooLarge(HTTPException):
    """An HTTPException, so FastAPI's body parsing passes it on as the 413 it is (any other error
    while reading the body it answers with a 400)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, detail=_too_large_detail(limit))


def _too_large_detail(limit: int) -> str:
    return f"request body is over the limit of {limit:,} bytes"


async def _too_large(send: Send, limit: int, path: str) -> None:
    body = json.dumps(error_body(path, _too_large_detail(limit))).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def check_rate(client: redis.Redis, key_id: str, *, limit: int, window: int) -> None:
    """Fixed window in Redis: at most ``limit`` requests per key per ``window`` seconds, else 429
    with Retry-After (the seconds left in the window)."""
    if limit <= 0:
        return
    now = time.time()
    slot = int(now // window)
    name = f"synth:rate:{key_id}:{slot}"
    pipe = client.pipeline()
    pipe.incr(name)
    pipe.expire(name, window + 1)
    count, _ = pipe.execute()
    if count > limit:
        retry = max(1, int((slot + 1) * window - now + 0.999))
        raise HTTPException(
            429,
            detail=f"rate limit of {limit} requests per {window} s exceeded for this key",
            headers={"Retry-After": str(retry)},
        )
