"""python -m ops.bench.cpu: the CPU pipeline benchmark (cli.py) and its workload, services, worker
process, runs and report."""
