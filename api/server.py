"""The HTTP server under the API: uvicorn, with the guards it lacks against clients that hold
connections without using them (slowloris).

- **A deadline for a request's headers** (``SYNTH_API_HEADER_TIMEOUT``), from the connection's
  start and again from each response: uvicorn waits for headers as long as a client trickles them.
- **A cap on open connections** (``SYNTH_API_MAX_CONNECTIONS``): past it, the connection that has
  waited longest for its request's headers is closed to make room (a real client sends its headers
  at once, so it is the slow ones that go), else the new one gets 503. uvicorn's own
  ``limit_concurrency`` still accepts every connection and answers 503 only once headers arrive.
- **Accept errors logged once a minute**: out of file descriptors, asyncio logs a traceback at
  every retry of accept.
- **Tokens kept out of the access log**: it writes the request line whole, query string included.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import json
import logging
import math
import re
import resource
import time
from dataclasses import dataclass
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from pipeline.settings import Settings

logger = logging.getLogger("uvicorn.error")
WARN_EVERY_S = 60.0
# File descriptors the API keeps for itself beside its clients' connections: two Redis pools of 64
# (api/app.py), the database pool, the object store's, logs and files.
FILE_RESERVE = 256
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_REFUSED_BODY = json.dumps({"detail": "the server is at its connection limit; try again shortly"}).encode()
REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
    b"connection: close\r\ncontent-length: " + str(len(_REFUSED_BODY)).encode() + b"\r\n\r\n" + _REFUSED_BODY
)


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout: float
    keep_alive: int
    max_connections: int

    @classmethod
    def of(cls, settings: Settings) -> ConnectionLimits:
        return cls(settings.api_header_timeout, settings.api_keep_alive_timeout, settings.api_max_connections)


class OncePer:
    """Lets one of a stream of events through per ``seconds``, saying how many it stands for."""

    def __init__(self, seconds: float, clock=time.monotonic) -> None:
        self.seconds, self.clock = seconds, clock
        self.next_at = -math.inf
        self.count = 0

    def due(self) -> int | None:
        """Counts an event; when it is the one to report, the events since the last one reported."""
        self.count += 1
        now = self.clock()
        if now < self.next_at:
            return None
        self.next_at = now + self.seconds
        counted, self.count = self.count, 0
        return counted


class ConnectionGuard:
    """The cap on one server's connections, and which of them wait for a request's headers (in the
    order they began waiting)."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.waiting: dict[GuardedH11Protocol, None] = {}
        self.warning = OncePer(WARN_EVERY_S)

    def admit(self, connections: set) -> bool:
        """Room for a connection just made (counted in ``connections``): True, having closed the
        longest-waiting one if the cap needs it; False when every connection is mid-request."""
        if len(connections) <= self.limits.max_connections:
            return True
        oldest = next(iter(self.waiting), None)
        if (times := self.warning.due()) is not None:
            logger.warning(
                "%d connections open, over SYNTH_API_MAX_CONNECTIONS (%d; %d times since this was last logged): %s",
                len(connections),
                self.limits.max_connections,
                times,
                "closing those slowest to send headers" if oldest else "refusing new ones with 503",
            )
        if oldest is None:
            return False
        oldest.close_waiting()
        return True


class GuardedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline for each request's headers and the cap of
    ``guard``. ``awaited_after`` is the request cycle that was current when the deadline was set:
    a new cycle means a new request's headers arrived."""

    def __init__(self, *args: Any, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard
        self.deadline: asyncio.TimerHandle | None = None
        self.awaited_after: object = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if not self.guard.admit(self.connections):
            transport.write(REFUSED)
            transport.close()
            return
        self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_arrived()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self.cycle is not self.awaited_after:
            self._headers_arrived()

    def on_response_complete(self) -> None:
        # Set before uvicorn goes on to a pipelined request, whose headers (already here) clear it.
        if not self.transport.is_closing():
            self._await_headers()
        super().on_response_complete()

    def handle_websocket_upgrade(self, event: Any) -> None:
        self._headers_arrived()
        super().handle_websocket_upgrade(event)

    def close_waiting(self) -> None:
        self._headers_arrived()
        self.transport.close()

    def _await_headers(self) -> None:
        self._headers_arrived()
        self.awaited_after = self.cycle
        self.deadline = self.loop.call_later(self.guard.limits.header_timeout, self.close_waiting)
        self.guard.waiting[self] = None

    def _headers_arrived(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        self.guard.waiting.pop(self, None)


class ResourceErrorLog:
    """The event loop's handler for errors it has nowhere to send: an accept that failed for want
    of file descriptors or memory is logged once a minute, with a count, not at each retry."""

    def __init__(self) -> None:
        self.once = OncePer(WARN_EVERY_S)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        error = context.get("exception")
        if not (isinstance(error, OSError) and error.errno in OUT_OF_RESOURCES):
            loop.default_exception_handler(context)
            return
        if (times := self.once.due()) is not None:
            logger.error(
                "%s: %s (%d times since this was last logged); see SYNTH_API_MAX_CONNECTIONS and the open-file limit",
                context.get("message", "out of resources"),
                error,
                times,
            )


class RedactedQuery(logging.Filter):
    """Blanks the values of query parameters that carry secrets in uvicorn's access lines (their
    third argument is the path with its query string)."""

    SECRET = re.compile(r"(?i)([?&][^&=]*(?:token|key|secret|password)=)[^&]*")

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) > 2 and isinstance(args[2], str):
            record.args = (*args[:2], self.SECRET.sub(r"\1***", args[2]), *args[3:])
        return True


class Server(uvicorn.Server):
    async def serve(self, sockets: Any = None) -> None:
        asyncio.get_running_loop().set_exception_handler(ResourceErrorLog())
        await super().serve(sockets)


def server(app: Any, settings: Settings, *, host: str, port: int, **options: Any) -> Server:
    """A server for ``app`` with the connection limits of ``settings``; ``options`` go to uvicorn."""
    limits = ConnectionLimits.of(settings)
    # uvicorn calls ``http`` to make each connection's protocol; its annotation asks for a class
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        timeout_keep_alive=limits.keep_alive,
        http=functools.partial(GuardedH11Protocol, guard=ConnectionGuard(limits)),  # type: ignore[arg-type]
        **options,
    )
    logging.getLogger("uvicorn.access").addFilter(RedactedQuery())
    return Server(config)


def fit_file_limit(max_connections: int) -> None:
    """Raises the soft open-file limit so the connections and the API's own files fit (as Go's
    runtime does); where the hard limit is too low for that, says so at start."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = max_connections + FILE_RESERVE
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    raised = need if hard == resource.RLIM_INFINITY else min(need, hard)
    if raised > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    if raised < need:
        logger.warning(
            "the open-file limit (%d) is below SYNTH_API_MAX_CONNECTIONS (%d) plus the %d the API "
            "keeps for itself: raise it (ulimit -n, LimitNOFILE=) or lower the setting",
            raised,
            max_connections,
            FILE_RESERVE,
        )
