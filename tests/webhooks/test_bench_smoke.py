"""python -m ops.bench.webhooks on two events, so the measurement entry point cannot rot."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytest.importorskip("piper", reason="the benchmark renders with synth[piper]")


@pytest.mark.timeout(180)
def test_bench_webhooks_measures_delays(tmp_path, redis_url):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTH_")}  # a temporary SQLite db
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "ops.bench.webhooks", "--events", "2", "--redis-url", redis_url, "--json", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["unverified_requests"] == 0
    for scenario in ("idle", "busy"):
        r = report[scenario]
        assert r["events"] == 2 and 0 < r["emitted_to_received_s"]["p50"] <= r["emitted_to_received_s"]["max"]
