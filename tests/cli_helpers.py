"""Running `synth` as a user does: a subprocess with its own environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def synth_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTH_")}
    env.update(overrides)
    return env


def synth(*args: str, env: dict[str, str], input: bytes | None = None, timeout: float = 180):
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args], cwd=REPO, env=env, input=input, capture_output=True, timeout=timeout
    )


def start_synth(*args: str, env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "cli.main", *args],
            cwd=REPO,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
