"""python -m ops.bench.e2e: synth measured through its own processes (cli.py), with the client side
of its realtime streams (streams.py)."""
