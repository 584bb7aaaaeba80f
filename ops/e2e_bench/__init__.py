"""The end-to-end benchmark's client side (ops/bench_e2e.py)."""
