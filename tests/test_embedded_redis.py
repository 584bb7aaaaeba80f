"""The embedded redis-server stops with the command that started it, however that command ends."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest

from tests.cli_helpers import start_synth, synth_env
from tests.conftest import free_port
from tests.waiting import eventually
from worker.embedded import EmbeddedRedis, socket_path


def redis_servers_of(data_dir: Path) -> list[int]:
    """Pids of the redis-servers whose command line names ``data_dir``'s socket (redis-server
    rewrites its command line to its title, ``redis-server unixsocket:<path>``)."""
    sock = str(socket_path(data_dir)).encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        if b"redis-server" in cmdline and sock in cmdline:
            pids.append(int(proc.name))
    return pids


def embedded_env(data_dir: Path) -> dict[str, str]:
    return synth_env(SYNTH_DATA_DIR=str(data_dir), SYNTH_ENGINE_THREADS="1")


pytestmark = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_the_embedded_redis_of_synth_api_stops_with_it(tmp_path, stop):
    data_dir = tmp_path / "data"
    port = free_port()
    log = tmp_path / "api.log"
    server = start_synth("api", "--port", str(port), env=embedded_env(data_dir), log=log)
    try:
        def healthy() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
            except httpx.TransportError:
                assert server.poll() is None, f"synth api exited: {log.read_text()}"
                return False
        eventually(healthy, 90, "synth api to answer /healthz", interval=0.2)
        assert len(redis_servers_of(data_dir)) == 1
    finally:
        os.kill(server.pid, stop)
        server.wait(timeout=60)
    eventually(lambda: not redis_servers_of(data_dir), 30,
               f"the embedded redis-server to stop after {stop.name} to synth api")


@pytest.mark.slow
def test_the_embedded_redis_of_a_killed_synth_worker_stops_with_it(tmp_path):
    data_dir = tmp_path / "data"
    log = tmp_path / "worker.log"
    worker = start_synth("worker", env=embedded_env(data_dir), log=log)
    try:
        eventually(lambda: "ready" in log.read_text() or worker.poll() is not None, 120, "the worker to start")
        assert worker.poll() is None, log.read_text()
        assert len(redis_servers_of(data_dir)) == 1
    finally:
        os.kill(worker.pid, signal.SIGKILL)  # no handler runs: only the kernel can stop the server
        worker.wait(timeout=30)
    eventually(lambda: not redis_servers_of(data_dir), 30, "the embedded redis-server to stop after kill -9")


def test_an_embedded_redis_stops_at_the_end_of_its_block_and_a_joiner_leaves_it_running(tmp_path):
    with EmbeddedRedis(tmp_path) as owner:
        assert len(redis_servers_of(tmp_path)) == 1
        with EmbeddedRedis(tmp_path) as joiner:  # a second command on the same data folder
            assert joiner.process is None and joiner.url == owner.url
        assert len(redis_servers_of(tmp_path)) == 1
    assert not redis_servers_of(tmp_path)
