"""How the kernel tests run: this folder's tests in a pytest under Triton's interpreter (the CPU)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


def run_in_the_interpreter(*modules: str, timeout: int = 600) -> None:
    """Runs the tests of ``tests/orpheus/kernels/<module>`` for each of ``modules`` in a pytest of
    their own started with ``TRITON_INTERPRET=1``, and fails with its report unless all of them
    passed or skipped. Where there is a GPU they run in this process, on it, and this is skipped.
    (Not named ``test_*``: pytest would collect it from the modules that import it.)"""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    if torch.cuda.is_available():
        pytest.skip("the kernel tests run on the GPU in this process")
    assert modules, "with no modules the pytest would run the whole suite"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *(f"tests/orpheus/kernels/{module}" for module in modules),
        ],
        cwd=REPO,
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout + done.stderr
