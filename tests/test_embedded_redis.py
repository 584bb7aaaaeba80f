"""The embedded redis-server stops with the command that started it, however that command ends."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest

from synth_testkit.ports import free_port
from tests.cli_helpers import start_synth, synth_env
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
    eventually(
        lambda: not redis_servers_of(data_dir), 30, f"the embedded redis-server to stop after {stop.name} to synth api"
    )


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


def children_of(pid: int) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:  # the field after the state: the parent's pid
            found.append(int(proc.name))
    return found


def alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_synth_submit_stopped_by_sigterm_leaves_neither_its_redis_nor_its_worker(tmp_path):
    data_dir = tmp_path / "data"
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"Line {n} is read aloud, slowly and with care, to the very end.\n" for n in range(40)))
    submit = start_synth("submit", str(corpus), env=embedded_env(data_dir), log=tmp_path / "submit.log")
    try:

        def started() -> list[int]:
            assert submit.poll() is None, (tmp_path / "submit.log").read_text()
            workers = [pid for pid in children_of(submit.pid) if pid not in redis_servers_of(data_dir)]
            return workers if workers and redis_servers_of(data_dir) else []

        worker_pids = eventually(started, 60, "synth submit to start its Redis and its worker")
    finally:
        os.kill(submit.pid, signal.SIGTERM)
        submit.wait(timeout=60)
    eventually(lambda: not redis_servers_of(data_dir), 30, "the embedded redis-server to stop with synth submit")
    eventually(lambda: not any(alive(pid) for pid in worker_pids), 60, "the embedded worker to stop with it")


def test_an_embedded_redis_stops_at_the_end_of_its_block_and_a_joiner_leaves_it_running(tmp_path):
    with EmbeddedRedis(tmp_path) as owner:
        assert len(redis_servers_of(tmp_path)) == 1
        with EmbeddedRedis(tmp_path) as joiner:  # a second command on the same data folder
            assert joiner.process is None and joiner.url == owner.url
        assert len(redis_servers_of(tmp_path)) == 1
    assert not redis_servers_of(tmp_path)
