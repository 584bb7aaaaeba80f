"""What a job records about where it ran."""

from __future__ import annotations

import platform
import socket
from functools import cache


@cache
def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


@cache
def hostname() -> str:
    return socket.gethostname()
