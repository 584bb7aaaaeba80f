"""The scaling benchmark's CPU mode on a small corpus (Piper, two `synth worker --cpu` subprocesses and
a one-worker baseline), so the script the GPU measurement uses cannot rot. Redis: the ``redis_url``
fixture; the database: a fresh SQLite file per run, made by the script."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytest.importorskip("piper", reason="the smoke run uses the Piper engine")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_cpu_workers_and_a_baseline(tmp_path, redis_url):
    out = tmp_path / "scale.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTH_")}
    env["SYNTH_ENGINE_THREADS"] = "1"
    env["SYNTH_JOBS_PER_TASK"] = "1"  # eight messages, so both workers get some
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ops.bench.scale",
            "--corpus",
            "examples/corpus.txt",
            "--engine",
            "piper",
            "--cpu",
            "--workers",
            "2",
            "--lines",
            "8",
            "--warm-lines",
            "2",
            "--redis-url",
            redis_url,
            "--json",
            str(out),
            "--markdown",
            str(tmp_path / "scale.md"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    two, one = result["runs"]["2 workers"], result["runs"]["1 worker"]
    assert two["jobs"] == one["jobs"] == 8 and two["failed"] == 0
    assert two["report_matches"] and one["report_matches"]
    names = [w["name"] for w in two["per_worker"]]
    assert len(set(names)) == 2 and all(n.endswith(("/cpu0", "/cpu1")) for n in names)
    assert all(w["jobs"] > 0 for w in two["per_worker"])  # both workers rendered, and each row says so
    assert sum(w["jobs"] for w in two["per_worker"]) == 8
    assert result["speedup"] == pytest.approx(two["x_realtime_wall"] / one["x_realtime_wall"])
    assert "| 2 workers |" in (tmp_path / "scale.md").read_text()
