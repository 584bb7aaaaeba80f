"""synth's benchmarks, each run as ``python -m ops.bench.<name>`` from the repository root:
orpheus, e2e, kernels, cpu, api, webhooks, scale, chaos and documents. Figures they measured are in
docs/performance.md, each with the command that made it."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The fixed benchmark corpus, where the checkout has shared/ beside it.
SHARED_CORPUS = REPO.parent / "shared" / "corpus" / "bench.txt"
SCENARIOS = Path(__file__).resolve().parent / "scenarios"


def git_commit() -> str:
    """The checkout's short commit, or "unknown" outside git."""
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
            ).stdout.strip()
            or "unknown"
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
