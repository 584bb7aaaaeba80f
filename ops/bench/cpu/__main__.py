from ops.bench.cpu.cli import cli

cli(prog_name="python -m ops.bench.cpu")
