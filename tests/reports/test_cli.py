"""`synth report` as a user runs it: a subprocess against a database holding known jobs."""

from __future__ import annotations

import json

import pytest

from tests.cli_helpers import synth, synth_env
from tests.reports.known_fleet import PRICES, T0, UNTIL, fill


@pytest.fixture
def env(sessions, database_url, tmp_path):
    with sessions() as s:
        fill(s)
    return synth_env(
        SYNTH_DATABASE_URL=database_url, SYNTH_DATA_DIR=str(tmp_path / "data"), SYNTH_GPU_PRICES=json.dumps(PRICES)
    )


def run_report(env, *args):
    proc = synth("report", "--since", T0.isoformat(), "--until", UNTIL.isoformat(), *args, env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc


def test_json_numbers(env):
    data = json.loads(run_report(env, "--format", "json").stdout)
    assert data["jobs_done"] == 5 and data["characters"] == 210
    workers = {r["key"]: r for r in data["throughput"]["worker_host"]}
    assert workers["hostA/gpu0"]["x_realtime"] == pytest.approx(6.0)
    assert workers["hostA/gpu0"]["cost"] == pytest.approx(0.3)  # 300 busy s at 3.6 per GPU-hour
    assert data["changes"]["jobs_done"] == pytest.approx(4.0)


def test_markdown_to_stdout_and_html_to_a_file(env, tmp_path):
    md = run_report(env).stdout.decode()
    assert md.startswith("# synth throughput report 2026-01-10 00:00 UTC")
    assert "| hostA/gpu0 | 3 | 0.500 | 0.083 | 1 | 6.0 | 21,600 |" in md
    assert "| nothing speakable in line | 2 |" in md and "+400.0 %" in md
    out = tmp_path / "r" / "report.html"
    run_report(env, "--format", "html", "--out", str(out))
    assert out.read_text().count("data:image/png;base64,") == 3


def test_bad_period_is_refused(env):
    proc = synth("report", "--since", "2026-01-02", "--until", "2026-01-01", env=env)
    assert proc.returncode == 2 and b"is not before" in proc.stderr


@pytest.mark.parametrize("option", ["--since", "--until"])
def test_a_period_that_is_not_a_date_or_span_names_its_option_and_the_forms(tmp_path, option):
    env = synth_env(SYNTH_DATA_DIR=str(tmp_path / "data"))
    proc = synth("report", option, "7x", env=env)
    stderr = proc.stderr.decode()
    assert proc.returncode == 2 and f"Invalid value for '{option}': '7x' is neither ISO 8601" in stderr, stderr
    assert "span back from now (24h, 7d, 2w)" in stderr


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_a_period_without_jobs_says_so_where_its_breakdowns_would_be(tmp_path, fmt):
    env = synth_env(SYNTH_DATA_DIR=str(tmp_path / "data"))
    proc = synth("report", "--since", "1d", "--format", fmt, env=env)
    out = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr.decode()
    assert out.count("No jobs finished in the period.") == 5, out  # device, worker, engine, model, quantization
    assert out.count("| audio s / GPU-h |") + out.count("<th>audio s / GPU-h</th>") == 1, out  # the overall table
