"""python -m ops.bench.orpheus: the Orpheus engine alone (cli.py), with its models (tiny or
Orpheus-3B shapes), runs, streams, scenarios, profile and report."""
