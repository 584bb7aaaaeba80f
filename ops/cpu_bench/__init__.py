"""Helpers for ops/bench_cpu.py: the workload, services, the worker process, runs, report."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
