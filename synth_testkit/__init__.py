"""What the tests and the benchmarks both use to stand services up and watch them: a webhook
receiver, faults to inject (a TCP proxy that cuts a service off, a redis-server that can be killed),
and a free loopback port. It lives apart from both so that tests/ imports nothing from ops/ and
ops/ nothing from tests/; it is not product code and not in the wheel (pyproject.toml's
packages.find lists only the product packages). The repository root on sys.path makes it
importable: pytest's ``pythonpath`` and ``python -m ops...`` run from the root."""
