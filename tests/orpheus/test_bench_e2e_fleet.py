"""The end-to-end bench with two workers behind one API, on the CPU with the tiny checkpoint: the
mode that measures several GPUs, so the script the device runs use cannot rot. Each database
the product runs on; the bench starts its own redis-server, workers, API and clients."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_two_workers_share_the_batch_and_the_streams_and_the_services_are_metered(tiny_dir, database_url, tmp_path):
    out, workdir = tmp_path / "e2e.json", tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTH_")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ops.bench.e2e",
            "--model",
            str(tiny_dir),
            "--cpu",
            "--workers",
            "2",
            "--corpus",
            "examples/corpus.txt",
            "--lines",
            "3",
            "--repeat",
            "2",
            "--streams",
            "2",
            "--batch-lines",
            "2",
            "--singles",
            "0",
            "--engine-bench",
            "",
            "--database-url",
            database_url,
            "--workdir",
            str(workdir),
            "--json",
            str(out),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())

    names = result["workers"]
    assert len(set(names)) == 2 and all(n.endswith(("/cpu0", "/cpu1")) for n in names)
    corpus = (workdir / "batch.txt").read_text().splitlines()
    assert len(corpus) == len(set(corpus)) == 6  # the corpus twice over, no line twice

    batch = result["batch"]
    assert batch["exit"] == 0 and batch["jobs_done"] + batch["jobs_failed"] == 6
    assert set(batch["workers"]) <= set(names)
    assert sum(w["jobs"] for w in batch["workers"].values()) == batch["jobs_done"]
    # the precisions a job recorded: the CPU's ("auto" codec: fp32 off CUDA)
    assert batch["precision"] == {"dtype": "float32", "kv_dtype": "float32", "codec_dtype": "float32"}, batch
    services = batch["services"]
    assert services["redis_ops_per_s"] > 0
    assert {"api", "redis", "worker0", "worker1"} <= set(services["cpu_share"])
    if database_url.startswith("postgresql"):
        assert services["db_transactions_per_s"] > 0
    else:
        assert services["db_transactions_per_s"] is None  # SQLite keeps no count

    streams = result["streams"]["2"]
    assert streams["streams"] == 4 and streams["errors"] == 0  # two a worker
    assert sum(w["streams"] for w in streams["workers"].values()) == 4
    assert set(streams["workers"]) <= set(names)
    assert streams["streams_dry"] >= streams["streams_dry_100ms"] >= streams["streams_dry_200ms"]
    assert streams["services"]["redis_ops_per_s"] > 0 and streams["cpu_share"]["clients"] >= 1
