"""Clients that hold connections without using them (slowloris), against the API as `synth api`
serves it (api/server.py) over real sockets: a request's headers have a deadline, the slowest
connections make room past the cap, and accept errors are logged once a minute."""

from __future__ import annotations

import http.client
import json
import logging
import select
import socket
import subprocess
import sys
import textwrap
import time

import httpx
import pytest

from synth_testkit.ports import free_port
from tests.api.conftest import serve
from tests.conftest import REPO
from tests.waiting import eventually

PARTIAL = b"GET /healthz HTTP/1.1\r\nHost: synth\r\n"  # headers begun, never ended


def connect(server, first: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(first)
    return sock


def closed(sock: socket.socket) -> bool:
    """Whether the server has closed ``sock`` (it reads as end of file), without waiting."""
    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True


def seconds_until_closed(sock: socket.socket, trickle: bytes = b"") -> float:
    """Sends ``trickle`` every 0.2 s (a client that keeps its headers coming) until the server
    closes the connection; the seconds that took."""
    started = time.monotonic()

    def gone() -> bool:
        try:
            sock.sendall(trickle)
        except (BrokenPipeError, ConnectionResetError):
            return True
        return closed(sock)

    eventually(gone, 30, "the server to close the connection", interval=0.2)
    return time.monotonic() - started


def answer(sock: socket.socket, request: bytes) -> http.client.HTTPResponse:
    sock.sendall(request)
    response = http.client.HTTPResponse(sock)
    response.begin()
    response.body = response.read()
    return response


@pytest.fixture
def limited(api_settings, redis_url):
    """serve(**overrides): the API with those settings."""

    def start(**overrides):
        return serve(api_settings.with_overrides(**overrides), redis_url)

    return start


def test_a_request_whose_headers_do_not_arrive_in_time_is_closed(limited):
    with limited(api_header_timeout=1.0, api_keep_alive_timeout=1) as server:
        assert seconds_until_closed(connect(server)) >= 0.9
        # Headers that keep coming, a line at a time, do not move the deadline.
        assert seconds_until_closed(connect(server, PARTIAL), trickle=b"X-Slow: 1\r\n") >= 0.9
        # On a kept-alive connection, the deadline runs again from each response.
        kept_alive = connect(server)
        assert answer(kept_alive, b"GET /healthz HTTP/1.1\r\nHost: synth\r\n\r\n").status == 200
        kept_alive.sendall(PARTIAL)
        assert seconds_until_closed(kept_alive, trickle=b"X-Slow: 1\r\n") >= 0.9
        # A request sent at once is answered, on a connection that idles between requests too.
        with httpx.Client(base_url=server.url, timeout=10) as client:
            for _ in range(3):
                assert client.get("/healthz").status_code == 200
                time.sleep(0.5)


def test_real_requests_are_answered_while_many_slow_connections_are_open(limited):
    with limited(api_header_timeout=60.0) as server:
        slow = [connect(server, PARTIAL) for _ in range(300)]
        with httpx.Client(base_url=server.url, timeout=10) as client:
            for _ in range(20):
                assert client.get("/healthz").status_code == 200
        assert not any(closed(s) for s in slow)  # under the cap, the slow ones are waited for
        for s in slow:
            s.close()


def test_past_the_cap_the_connections_slowest_to_send_headers_make_room(limited):
    with limited(api_header_timeout=60.0, api_max_connections=20) as server:
        slow = [connect(server, PARTIAL) for _ in range(60)]
        for _ in range(20):
            with connect(server) as sock:
                assert answer(sock, b"GET /healthz HTTP/1.1\r\nHost: synth\r\n\r\n").status == 200
        eventually(lambda: sum(not closed(s) for s in slow) <= 20, 10, "the oldest slow connections to be closed")
        assert not closed(slow[-1])  # the newest slow connection was not the one to go
        for s in slow:
            s.close()


def test_past_the_cap_with_every_connection_mid_request_a_new_one_gets_503(limited, new_key):
    key = new_key()
    with limited(api_header_timeout=60.0, api_max_connections=3) as server:
        # Requests whose headers arrived and whose body the route is waiting for.
        busy = [
            connect(
                server,
                (
                    f"POST /v1/jobs HTTP/1.1\r\nHost: synth\r\nAuthorization: Bearer {key}\r\n"
                    "Content-Type: application/json\r\nContent-Length: 40\r\n\r\n"
                ).encode(),
            )
            for _ in range(3)
        ]
        time.sleep(1.0)  # for the server to have read their headers (nothing to observe from here)
        with connect(server) as sock:
            refused = answer(sock, b"GET /healthz HTTP/1.1\r\nHost: synth\r\n\r\n")
        assert refused.status == 503 and refused.getheader("Retry-After") == "1"
        assert "connection limit" in json.loads(refused.body)["detail"]
        busy.pop().close()

        def answered() -> bool:
            with connect(server) as sock:
                try:
                    return answer(sock, b"GET /healthz HTTP/1.1\r\nHost: synth\r\n\r\n").status == 200
                except (ConnectionResetError, http.client.RemoteDisconnected):
                    return False

        eventually(answered, 10, "a connection to be answered once one closed", interval=0.1)
        for s in busy:
            s.close()


ACCEPTING = textwrap.dedent("""
    import resource, sys
    from api.server import server
    from pipeline.settings import Settings

    async def app(scope, receive, send):
        pass

    resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    httpd = server(app, Settings(api_header_timeout=60), host="127.0.0.1", port=int(sys.argv[1]),
                   lifespan="off", log_level="info")
    httpd.run()
""")


def test_accept_errors_are_logged_once_a_minute_not_at_each_retry(tmp_path):
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", ACCEPTING, str(port)], cwd=REPO, stdout=out, stderr=out)
    clients: list[socket.socket] = []
    try:
        eventually(lambda: "Uvicorn running" in log.read_text(), 30, "the server to start", interval=0.1)
        clients = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(150)]
        # asyncio retries the accept every second; give it several retries.
        eventually(lambda: "out of system resource" in log.read_text(), 10, "an accept error", interval=0.1)
        time.sleep(3.5)
        assert proc.poll() is None, log.read_text()
    finally:
        for c in clients:
            c.close()
        proc.terminate()
        proc.wait(timeout=30)
    text = log.read_text()
    assert text.count("out of system resource") == 1, text
    assert "Too many open files (1 times since this was last logged)" in text and "Traceback" not in text


def test_a_token_in_a_query_string_is_kept_out_of_the_access_log(limited):
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Collect()
    with limited(dashboard_token="op-secret") as server:
        access = logging.getLogger("uvicorn.access")
        access.addHandler(handler)
        access.setLevel(logging.INFO)
        try:
            assert httpx.get(f"{server.url}/dashboard/data.json?token=op-secret&x=1").status_code == 400
            assert httpx.get(f"{server.url}/healthz?api_key=sk_synth_abc").status_code == 200
            eventually(lambda: len(lines) >= 2, 10, "the access lines")
        finally:
            access.removeHandler(handler)
    assert "/dashboard/data.json?token=***&x=1" in lines[0] and "/healthz?api_key=***" in lines[1]
    assert not [line for line in lines if "op-secret" in line or "sk_synth_abc" in line]
