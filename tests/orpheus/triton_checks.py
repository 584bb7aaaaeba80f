"""The Triton kernels' checks (ops/orpheus_bench/check_*.py) under Triton's interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def interpreted(check: str, *args: str, timeout: int = 900) -> str:
    """``python -m ops.orpheus_bench.<check> --device cpu *args`` under Triton's interpreter (the
    kernels on the CPU); its output, after asserting that it passed."""
    pytest.importorskip("triton")
    done = subprocess.run([sys.executable, "-m", f"ops.orpheus_bench.{check}", "--device", "cpu",
                           *args], cwd=Path(__file__).resolve().parents[2],
                          env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def interpreted_code(code: str, timeout: int = 900) -> str:
    """``python -c code`` under Triton's interpreter; its output, after asserting that it exited
    with 0."""
    pytest.importorskip("triton")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2],
                          env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
