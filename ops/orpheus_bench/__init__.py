"""Helpers for ops/bench_orpheus.py: models (tiny or Orpheus-3B shapes), runs, report."""
