"""The CPU benchmark entry point on a tiny slice, against a real Redis and a real worker, so it
cannot rot. Redis comes from tests/conftest.py's ``redis_url`` (SYNTH_TEST_REDIS_URL, else an embedded
redis-server; flushed around each test); the database is a temporary SQLite file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED_CORPUS = REPO.parent / "shared" / "corpus" / "bench.txt"
# The fixed benchmark corpus where the checkout has shared/ beside it (CI does), else the example.
CORPUS = SHARED_CORPUS if SHARED_CORPUS.is_file() else REPO / "examples" / "corpus.txt"

pytest.importorskip("piper", reason="the CPU benchmark needs synth[piper]")


def _bench(tmp_path: Path, redis_url: str, *args: str) -> dict:
    out = tmp_path / "result.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTH_")}  # a temporary SQLite db
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ops.bench.cpu",
            *args,
            "--corpus",
            str(CORPUS),
            "--repeat",
            "1",
            "--redis-url",
            redis_url,
            "--json",
            str(out),
            "--markdown",
            str(tmp_path / "result.md"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "|" in proc.stdout  # the table went to stdout
    return json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_pipeline_on_six_lines(tmp_path: Path, redis_url: str) -> None:
    report = _bench(tmp_path, redis_url, "pipeline", "--lines", "6")["pipeline"]
    bare, full = report["results"]
    assert bare["path"] == "bare engine" and full["path"] == "full path (wav)"
    for r in (bare, full):
        assert r["jobs"] == sum(1 for line in CORPUS.read_text().splitlines()[:6] if line.strip())
        assert r["audio_s"] > 1 and r["wall_s"] > 0 and r["jobs_per_s"] > 0 and r["x_real_time"] > 0
        assert 0 < r["ttfb_p50_s"] <= r["ttfb_p95_s"]
    assert full["failed"] == 0
    assert full["overhead_pct"] is not None
    assert abs(full["audio_s"] - bare["audio_s"]) / bare["audio_s"] < 0.05  # same texts, same audio
    assert report["worker_boot_s"] > 0
    assert "bare engine" in (tmp_path / "result.md").read_text()


@pytest.mark.timeout(60)
def test_enqueue_counts_every_message(tmp_path: Path, redis_url: str) -> None:
    report = _bench(tmp_path, redis_url, "enqueue", "--lines", "2000")["enqueue"]
    (r,) = report["results"]
    assert r["database"] == "sqlite" and r["lines"] == 2000
    assert r["messages"] >= 2000 / 8 and r["messages_in_redis"] == r["messages"]
    assert r["jobs_queued"] == 2000
    assert r["parse_s"] > 0 and r["insert_s"] > 0 and r["enqueue_s"] > 0
