"""A small webhook receiver (standard library only): verifies each request with signing.verify,
dedupes by webhook-id, and records what it saw. The tests and the webhooks bench
(ops/bench/webhooks.py) run it on a loopback port; it also shows a client what receiving synth's
webhooks takes. It is a tool beside the product, not part of it: nothing under pipeline/ uses it.

``fail_first=N`` answers the first N requests of every webhook-id with ``fail_code`` (500), to
exercise retries.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pipeline.webhooks.signing import WebhookVerificationError, verify


@dataclass
class Received:
    at: float  # time.time() when the request arrived
    webhook_id: str
    headers: dict[str, str]
    body: bytes
    valid_for: list[str]  # the secrets whose signature verified
    answered: int  # the status code we answered
    duplicate: bool = False  # an accepted id seen again


@dataclass
class Receiver:
    secrets: list[str]
    fail_first: int = 0
    fail_code: int = 500
    tolerance: int = 300
    host: str = "127.0.0.1"
    requests: list[Received] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the receiver first"
        return f"http://{self.host}:{self._server.server_address[1]}/hooks/synth"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # the http.server API
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                code = receiver._take(dict(self.headers.items()), body)
                self.send_response(code)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):  # keep test output quiet
                pass

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _take(self, headers: dict[str, str], body: bytes) -> int:
        at = time.time()
        valid = []
        for secret in self.secrets:
            try:
                verify(secret, headers, body, tolerance=self.tolerance)
                valid.append(secret)
            except WebhookVerificationError:
                pass
        lower = {k.lower(): v for k, v in headers.items()}
        webhook_id = lower.get("webhook-id", "")
        with self._lock:
            seen = sum(1 for r in self.requests if r.webhook_id == webhook_id)
            if not valid:
                code = 401
            elif seen < self.fail_first:
                code = self.fail_code
            else:
                code = 200
            duplicate = code == 200 and webhook_id in self.accepted_ids()
            self.requests.append(Received(at, webhook_id, headers, body, valid, code, duplicate))
        return code

    def accepted_ids(self) -> Counter:
        return Counter(r.webhook_id for r in self.requests if r.answered == 200)

    def accepted(self) -> list[Received]:
        """First acceptance of each webhook-id: what a deduplicating receiver processes."""
        with self._lock:
            return [r for r in self.requests if r.answered == 200 and not r.duplicate]

    def wait_for(self, n: int, timeout: float = 60) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.accepted()
            if len(got) >= n:
                return got
            time.sleep(0.05)
        raise AssertionError(f"receiver accepted {len(self.accepted())} of {n} events in {timeout} s")

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
