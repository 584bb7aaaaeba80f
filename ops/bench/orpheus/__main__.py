from ops.bench.orpheus.cli import main

raise SystemExit(main())
