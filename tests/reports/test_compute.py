"""Report numbers against a database (SQLite and PostgreSQL) holding known jobs: every expected value
below is worked out by hand from tests/reports/known_fleet.py."""

from __future__ import annotations

import pytest

from pipeline.db.models import JobMetrics
from pipeline.reports.compute import compute_report
from pipeline.reports.stats import busy_seconds, reason
from tests.reports.known_fleet import EPYC, H100, PRICES, T0, UNTIL, at, fill


@pytest.fixture
def report(sessions):
    with sessions() as s:
        fill(s)
    with sessions() as s:
        return compute_report(s, T0, UNTIL, gpu_prices=PRICES)


def rows(report, dim):
    return {r.key: r for r in report.throughput[dim]}


def test_counts_characters_audio_and_failures(report):
    assert report.jobs_by_state == {"pending": 0, "queued": 1, "running": 0, "done": 5, "failed": 4, "cancelled": 0}
    assert report.batches_by_state == {"open": 1, "finished": 1}
    assert report.jobs_done == 5 and report.jobs_failed == 4
    assert report.characters == 100 + 50 + 30 + 20 + 10
    assert report.audio_s == pytest.approx(4100)
    assert report.audio_hours == pytest.approx(4100 / 3600)
    assert report.failures_by_reason == {
        "nothing speakable in line": 2,
        "retries exhausted": 1,
        "internal error: KeyError": 1,
    }


def test_throughput_uses_the_union_of_busy_intervals_per_worker(report):
    workers = rows(report, "worker_host")
    gpu0 = workers["hostA/gpu0"]  # j1 [1h, 1h+100s] and j2 [1h+50s, 1h+200s] overlap: 200 s, + j3 100 s
    assert gpu0.busy_s == pytest.approx(300) and gpu0.audio_s == pytest.approx(1800)
    assert gpu0.x_realtime == pytest.approx(6.0) and gpu0.audio_s_per_gpu_hour == pytest.approx(21600)
    assert gpu0.utilization == pytest.approx(300 / 86400) and gpu0.jobs == 3
    assert gpu0.cost == pytest.approx(3.6 * 300 / 3600)
    assert workers["hostA/gpu1"].x_realtime == pytest.approx(5.0)
    assert workers["hostB/cpu"].x_realtime == pytest.approx(0.5) and workers["hostB/cpu"].cost is None

    devices = rows(report, "device_type")
    assert devices[H100].busy_s == pytest.approx(700) and devices[H100].workers == 2
    assert devices[H100].cost == pytest.approx(0.7)  # 700 s at 3.6 / h
    assert devices[H100].cost_per_audio_hour == pytest.approx(0.7 / (3800 / 3600))
    assert devices[EPYC].cost is None and report.unpriced_device_types == [EPYC]
    assert rows(report, "quantization")["int8"].audio_s == pytest.approx(2000)
    assert rows(report, "quantization")["none"].busy_s == pytest.approx(300 + 600)
    assert rows(report, "engine")["piper"].jobs == 1
    assert rows(report, "model")["orpheus-3b"].x_realtime == pytest.approx(3800 / 700)
    overall = report.overall
    assert overall.busy_s == pytest.approx(1300) and overall.x_realtime == pytest.approx(4100 / 1300)
    assert overall.cost is None  # the CPU has no price: no total pretending otherwise


def test_latency_percentiles_per_priority(report):
    batch = report.ttfb["batch"]  # 1, 2, 3, 4: nearest rank
    assert (batch.n, batch.p50, batch.p95, batch.p99, batch.mean) == (4, 2.0, 4.0, 4.0, 2.5)
    assert report.ttfb["realtime"].p50 == 0.5 and report.ttfb["all"].n == 5
    assert report.queue_wait["batch"].p50 == 20 and report.queue_wait["realtime"].p99 == pytest.approx(0.1)
    assert report.rtf["batch"].p50 == pytest.approx(0.2)  # rtf 0.1, 0.3, 0.333, 0.2 -> sorted 2nd


def test_batching_waste(report):
    b = report.batching
    assert b.mean_batch_size == pytest.approx(7 / 5) and b.sizes == {1: 3, 2: 2}
    assert b.slot_fill == pytest.approx(0.5)  # 2 of 4 slots
    assert b.padding_fraction == pytest.approx(200 / 2000)  # padded / (tokens + padded)
    assert b.idle_slot_fraction == pytest.approx(0.25)
    assert b.jobs_with_extra == 2


def test_change_against_the_previous_day(report):
    assert report.previous["jobs_done"] == 1 and report.previous["x_realtime"] == pytest.approx(6.0)
    assert report.changes["jobs_done"] == pytest.approx(4.0)
    assert report.changes["x_realtime"] == pytest.approx((4100 / 1300 - 6) / 6)
    assert report.changes["audio_hours"] == pytest.approx((4100 - 600) / 600)


def test_series_bins_audio_by_hour(report):
    s = report.series
    assert s.bin_s == 3600 and len(s.audio_s) == 24 and s.starts[1] == at(1)
    assert s.audio_s[1] == pytest.approx(1500) and s.audio_s[3] == pytest.approx(2000)
    assert sum(s.audio_s) == pytest.approx(4100) and s.ttfb_s == [0.5, 1.0, 2.0, 3.0, 4.0]


def test_busy_seconds_and_reasons():
    assert busy_seconds([(at(0), at(0, 10)), (at(0, 5), at(0, 20)), (at(0, 30), at(0, 40))]) == 30
    assert busy_seconds([]) == 0
    assert (
        reason("storage s3://b/batches/0123abcd9f/x.wav failed after 3 tries")
        == "storage s3://b/batches/<id>/x.wav failed after N tries"
    )
    assert reason(None).startswith("unknown")


def test_verdicts_give_the_share_verified_clean_and_the_worst_jobs(sessions):
    """j1-j3 checked (clean, suspect, bad), j4-j5 not: 1 of 3 clean, the bad one listed first."""
    from pipeline.reports.render_html import render_html
    from pipeline.reports.render_md import render_md

    checks = {
        "j1": ("clean", [], 0.05),
        "j2": ("suspect", ["words not heard: character error rate 0.62"], 0.62),
        "j3": ("bad", ["no speech: the audio is silent"], 1.0),
    }
    with sessions() as session:
        fill(session)
        for name, (verdict, reasons, cer) in checks.items():
            metrics = session.get(JobMetrics, name.ljust(8, "x"))
            metrics.verdict = verdict
            metrics.extra = {**(metrics.extra or {}), "verify": {"reasons": reasons, "scores": {"cer": cer}}}
        session.commit()
        report = compute_report(session, T0, UNTIL, gpu_prices=PRICES)
    v = report.verification
    assert v.checked == 3 and v.verdicts == {"clean": 1, "suspect": 1, "bad": 1}
    assert v.clean_share == pytest.approx(1 / 3)
    assert [j["client_id"] for j in v.worst] == ["j3", "j2"]
    assert "33.3 % verified clean" in render_md(report) and "no speech: the audio is silent" in render_md(report)
    assert "verified clean" in render_html(report, with_plots=False)
    assert report.to_dict()["verification"]["worst"][0]["verdict"] == "bad"
