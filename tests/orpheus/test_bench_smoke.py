"""The benchmark harness runs end to end on the tiny model on the CPU, so it cannot rot."""

from __future__ import annotations

import json

import pytest


def bench(tiny_dir, tmp_path, lines: str, *args: str) -> dict:
    """python -m ops.bench.orpheus on the tiny model on the CPU over a corpus of ``lines``: its JSON."""
    from ops.bench.orpheus.cli import main

    corpus = tmp_path / "bench.txt"
    corpus.write_text(lines)
    out = tmp_path / "bench.json"
    rc = main(
        [
            "--model",
            str(tiny_dir),
            "--device",
            "cpu",
            "--dtype",
            "float32",
            "--corpus",
            str(corpus),
            "--lines",
            "2",
            "--subset",
            "1",
            "--max-budget",
            "28",
            "--rows",
            "4",
            "--context",
            "512",
            "--json",
            str(out),
            *args,
        ]
    )
    assert rc == 0
    return json.loads(out.read_text())


def scenario(tmp_path):
    """A scenario file of three scheduler configs: the engine's defaults; a batch step every step,
    3 realtime rows, a 0.5 ms switch interval, no starting-only steps, the batch preempted; and
    starting-only steps every 2nd, the batch paused, a one-frame lookahead, no low-lead rule."""
    path = tmp_path / "scenario.toml"
    path.write_text(
        "[[config]]\n\n"
        "[[config]]\nbatch_every = 1\nbatch_every_starting = 1\nrealtime_max_rows = 3\n"
        "switch_interval_ms = 0.5\nplaying_every = 1\npause_batch = false\n\n"
        "[[config]]\nbatch_every = 2\nbatch_every_starting = 4\nplaying_every = 2\n"
        "pause_batch = true\nfirst_lookahead = 1\nlow_lead_ms = 0\n"
    )
    return path


@pytest.mark.slow
def test_bench_runs_every_approach_on_the_tiny_model(tiny_dir, tmp_path):
    data = bench(
        tiny_dir,
        tmp_path,
        "Hello there.\nA second line of the corpus.\nThird.\nFour is here.\n",
        "--streams",
        "2",
        "--spread",
        "0.1",
        "--stream-counts",
        "1",
        "--single-runs",
        "1",
        "--generate1-jobs",
        "1",
        "--scenario",
        str(scenario(tmp_path)),
        "--lookaheads",
        "2,1",
        "--collect-at",
        "0.2",
        "--quant",
        "none",
        "--max-batch",
        "4",
        "--markdown",
        str(tmp_path / "bench.md"),
    )
    approaches = {r["approach"] for r in data["rows"]}
    assert approaches == {
        "fast batch",
        "fast subset",
        "reference loop subset",
        "generate() static subset",
        "generate() 1-at-a-time",
    }
    for r in data["rows"]:
        assert r["tok_s"] > 0 and r["x_real_time"] > 0
    mode = data["meta"]["modes"]["none"]
    assert mode["logits_vs_transformers"]["rel_l2_max"] < 1e-5  # fp32: same function
    assert mode["streams"]["config"]["pause_batch"]  # the engine's default
    streams = mode["streams"]["1"]
    assert streams["ok"] == streams["streams"] == 1 and streams["errors"] == []
    assert set(streams["first_chunk_ms"]) == {"queued", "prefill", "decode", "codec"}
    assert set(streams["gc"]) == {"gen0", "gen1", "gen2"}  # a short run may collect nothing
    assert set(streams["gc"]["gen2"]) == {"count", "max_ms", "total_ms"}
    stalls = streams["stalls"]
    assert set(stalls) == {
        "slow_steps",
        "slowest_steps",
        "codec_realtime_slow_rounds",
        "codec_batch_slow_rounds",
        "allocator",
        "underrun_at_ms",
        "forced_collection",
    }
    forced = stalls["forced_collection"]  # a full collection, 0.2 s in
    assert forced["at_ms"] >= 200 and forced["took_ms"] > 0 and forced["frozen_objects"] == 0
    assert len(stalls["slowest_steps"]) == min(12, stalls["slow_steps"])
    assert all(len(s) == 6 and s[0] >= 0 for s in stalls["slowest_steps"])
    assert stalls["allocator"] == {}  # no CUDA: no caching allocator
    assert streams["prefill_steps"] > 0
    assert streams["prefill_device_ms_per_prefill_step"] == 0  # no CUDA
    host = streams["runner_host_ms_per_step"]
    assert set(host) == {"moves", "prefill", "begin", "decode", "copies"}
    assert host["decode"] > 0 and 0 < host["begin"] <= host["prefill"]
    assert streams["wall_ms_per_step"] > 0
    assert 0 <= streams["wait_share"] < 1  # CPU: launch does the work
    # every step full, so no realtime-only steps; batch rows over the cap preempted (pause_batch false)
    plain = mode["streams_every1_starting1_max3_switch0.5ms_preempting"]
    assert plain["config"] == {
        "batch_every": 1,
        "batch_every_starting": 1,
        "realtime_max_rows": 3,
        "switch_interval_ms": 0.5,
        "playing_every": 1,
        "pause_batch": False,
        "first_lookahead": 2,
        "low_lead_ms": 300,
    }
    assert plain["1"]["ok"] == 1 and plain["1"]["realtime_only_steps"] == 0
    steady = next(v for k, v in mode.items() if k.endswith("_steady2_paused_lookahead1_lead0ms"))
    assert steady["config"]["playing_every"] == 2 and steady["config"]["pause_batch"]
    assert steady["config"]["first_lookahead"] == 1 and steady["config"]["low_lead_ms"] == 0
    assert steady["1"]["ok"] == 1
    assert "starting_only_steps" in steady["1"]
    assert len(mode["single_stream"]["ttfb_s"]) == 1
    assert len(mode["single_stream_lookahead1"]["ttfb_s"]) == 1
    assert data["meta"]["device"] and data["meta"]["commit"]


def test_bench_labels_the_fp8_kv_cache_runs(tiny_dir, tmp_path):
    data = bench(
        tiny_dir,
        tmp_path,
        "Hello there.\nA second line of the corpus.\n",
        "--approaches",
        "logits,fast",
        "--quant",
        "none,none/kv8",
    )
    assert {(r["approach"], r["quant"]) for r in data["rows"]} == {
        ("fast batch", "none"),
        ("fast subset", "none"),
        ("fast batch", "none/kv8"),
        ("fast subset", "none/kv8"),
    }
    plain, kv8 = data["meta"]["modes"]["none"], data["meta"]["modes"]["none/kv8"]
    assert plain["fast_info"]["kv_dtype"] == "float32"
    assert kv8["kv_dtype"] == "fp8" and kv8["fast_info"]["kv_dtype"] == "float8_e4m3fn"
    # the fp8 cache's logits against transformers: quantization error, no more (tiny model)
    assert 0 < kv8["logits_vs_transformers"]["rel_l2_max"] < 0.04


def test_the_contention_harness_runs_the_loop_with_its_threads():
    """python -m ops.bench.kernels contention: the real loop, codec thread and callers' threads
    over a runner and a codec that wait out their device time; the device is busy, tokens flow."""
    from ops.bench.kernels.contention import run

    for callers in (False, True):
        r = run(streams=4, rows=16, seconds=0.5, callers=callers)
        assert r["steps"] > 10 and r["tok_s"] > 0 and r["device_idle"] < 0.5
        assert r["launch_ms_realtime_only"] > 0 and r["launch_ms_full"] > 0


def test_each_command_runs_its_approaches_and_none_runs_them_all():
    from ops.bench.orpheus.cli import COMMANDS, DEFAULT_APPROACHES, parse

    assert parse([]).approaches == DEFAULT_APPROACHES
    for command, approaches in COMMANDS.items():
        assert parse([command, "--lines", "3"]).approaches == approaches
    assert parse(["streams", "--approaches", "single"]).approaches == "single"


def test_the_shipped_scenarios_read_back():
    from ops.bench import SCENARIOS
    from ops.bench.orpheus.scenarios import StreamsConfig, load_scenarios

    files = sorted(SCENARIOS.glob("*.toml"))
    assert files
    for path in files:
        assert all(isinstance(c, StreamsConfig) for c in load_scenarios([path]))
    assert load_scenarios([]) == [StreamsConfig()]


def test_every_kernel_bench_name_runs_a_module_with_a_main():
    import importlib

    from ops.bench.kernels.__main__ import BENCHES

    for name in BENCHES:
        assert callable(importlib.import_module(f"ops.bench.kernels.{name.replace('-', '_')}").main)
