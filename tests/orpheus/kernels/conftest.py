"""Where the kernel tests run: on the GPU where there is one (the model's shapes in bf16), else on
the CPU in Triton's interpreter, small and in fp32, when this process was started with
``TRITON_INTERPRET=1`` (test_triton_interpreter.py starts such a pytest for them). Without either
they skip here: Triton decides whether to interpret when a kernel is defined, at import, so one
process cannot run the same kernels both ways."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def device() -> str:
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    if torch.cuda.is_available():
        return "cuda"
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "cpu"
    pytest.skip(
        "Triton has no GPU here and no interpreter in this process (test_triton_interpreter.py runs these under it)"
    )
