"""Run ``ops/bench_orpheus.py`` with every Triton JIT compile of the process logged: when it began
(seconds since start), how long it took, on which thread, which kernel and specialization. The
bench's printed lines are logged in between, so compiles after the engine's boot (a kernel variant
first met while serving, which stalls the loop) stand out. Point ``TRITON_CACHE_DIR`` at an empty
folder to see a cold machine; with a warm cache each compile is a load of a few ms.

    TRITON_CACHE_DIR=$(mktemp -d) python3 -m ops.orpheus_bench.trace_compiles compiles.txt \\
        --model random-3b --quant none/kv8 --approaches w2 --w2-counts 128     # on the GPU
"""

from __future__ import annotations

import builtins
import runpy
import sys
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench_orpheus.py"


def main(argv: list[str]) -> None:
    from triton import knobs

    if not argv:
        raise SystemExit(__doc__)
    started, begun = time.monotonic(), {}
    log = open(argv[0], "w")

    def write(line: str) -> None:
        log.write(line + "\n")
        log.flush()

    def before(**kw):
        begun[(threading.get_ident(), kw.get("repr"))] = time.monotonic()
        return False                    # True would skip the compile

    def after(**kw):
        now = time.monotonic()
        t0 = begun.pop((threading.get_ident(), kw.get("repr")), now)
        write(f"{t0 - started:9.3f} s {1000 * (now - t0):8.1f} ms  "
              f"{threading.current_thread().name:<16} {str(kw.get('repr'))[:160]}")

    knobs.runtime.jit_cache_hook = before
    knobs.runtime.jit_post_compile_hook = after
    plain_print = builtins.print

    def print_marked(*args, **kw):
        write(f"{time.monotonic() - started:9.3f} s  PRINT {' '.join(map(str, args))[:100]}")
        return plain_print(*args, **kw)

    builtins.print = print_marked
    sys.argv = [str(BENCH), *argv[1:]]
    runpy.run_path(str(BENCH), run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
