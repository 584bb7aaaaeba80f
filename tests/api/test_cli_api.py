"""`synth keys` and `synth api` as a user runs them: subprocesses with their own environment."""

from __future__ import annotations

import json
import time

import httpx

from tests.cli_helpers import start_synth, synth, synth_env
from tests.conftest import free_port


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
    server = start_synth("api", "--port", str(port), env=env, log=tmp_path / "api.log")
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and server.poll() is None, (tmp_path / "api.log").read_text()
            time.sleep(0.2)
        spec = httpx.get(f"{url}/openapi.json").json()
        assert "/v1/batches" in spec["paths"] and "/v1/audio/speech" in spec["paths"]
        assert httpx.get(f"{url}/docs").status_code == 200
        auth = {"Authorization": f"Bearer {key}"}
        assert httpx.get(f"{url}/v1/voices", headers=auth).json()["voices"] == ["joe"]
        revoked = synth("keys", "revoke", listed[0]["id"], env=env)
        assert revoked.returncode == 0, revoked.stderr
        assert httpx.get(f"{url}/v1/voices", headers=auth).status_code == 401
    finally:
        server.terminate()
        server.wait(timeout=30)
    again = synth("keys", "revoke", listed[0]["id"], env=env)
    assert again.returncode == 2 and "no active key" in again.stderr.decode()
