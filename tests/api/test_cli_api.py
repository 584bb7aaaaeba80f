"""`synth keys` and `synth api` as a user runs them: subprocesses with their own environment."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from synth_testkit.ports import free_port
from tests.cli_helpers import start_synth, synth, synth_env
from tests.waiting import eventually


@pytest.mark.slow
def test_keys_and_api_server_from_the_cli(database_url, redis_url, tmp_path):
    env = synth_env(SYNTH_DATABASE_URL=database_url, SYNTH_REDIS_URL=redis_url, SYNTH_DATA_DIR=str(tmp_path))
    made = synth("keys", "create", "--name", "ci", env=env)
    assert made.returncode == 0, made.stderr
    key = made.stdout.decode().strip()
    assert key.startswith("sk_synth_") and len(key) > 40 and "not shown again" in made.stderr.decode()
    listed = [json.loads(line) for line in synth("keys", "list", "--json", env=env).stdout.decode().splitlines()]
    assert [(k["name"], k["revoked_at"]) for k in listed] == [("ci", None)]
    assert key.startswith(listed[0]["prefix"]) and key not in json.dumps(listed)  # only a prefix is shown

    port = free_port()
    log = tmp_path / "api.log"
    # On every interface with no operator token: it says that /dashboard and /metrics stay closed.
    server = start_synth(
        "api", "--host", "0.0.0.0", "--port", str(port), log=log, env={**env, "SYNTH_API_HEADER_TIMEOUT": "1"}
    )
    try:
        url = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            assert server.poll() is None, f"synth api exited with {server.returncode}"
            return False

        try:
            eventually(healthy, 60, "synth api to answer /healthz", interval=0.2)
        except AssertionError as failed:
            raise AssertionError(f"{failed}; its log:\n{log.read_text()}") from None
        spec = httpx.get(f"{url}/openapi.json").json()
        assert "/v1/batches" in spec["paths"] and "/v1/audio/speech" in spec["paths"]
        assert httpx.get(f"{url}/docs").status_code == 200
        auth = {"Authorization": f"Bearer {key}"}
        assert httpx.get(f"{url}/v1/voices", headers=auth).json()["voices"] == ["joe"]
        revoked = synth("keys", "revoke", listed[0]["id"], env=env)
        assert revoked.returncode == 0, revoked.stderr
        assert httpx.get(f"{url}/v1/voices", headers=auth).status_code == 401
        assert httpx.get(f"{url}/metrics").status_code == 200  # loopback
        assert httpx.get(f"{url}/dashboard/data.json?token=leaked-secret").status_code == 400
        with socket.create_connection(("127.0.0.1", port), timeout=15) as half_sent:
            half_sent.sendall(b"GET /healthz HTTP/1.1\r\nHost: synth\r\n")
            assert half_sent.recv(1024) == b""  # closed by the server after SYNTH_API_HEADER_TIMEOUT
    finally:
        server.terminate()
        server.wait(timeout=30)
    text = log.read_text()
    assert (
        "warning: /dashboard and /metrics answer loopback clients only: set SYNTH_DASHBOARD_TOKEN" in text
        and "GET /dashboard/data.json?token=*** HTTP/1.1" in text
        and "leaked-secret" not in text
    ), text
    again = synth("keys", "revoke", listed[0]["id"], env=env)
    assert again.returncode == 2 and "no active key" in again.stderr.decode()
