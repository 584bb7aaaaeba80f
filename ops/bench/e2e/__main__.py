from ops.bench.e2e.cli import main

main()
