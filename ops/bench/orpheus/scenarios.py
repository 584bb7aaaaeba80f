"""Scheduler settings for streams beside batch work, read from scenario files (TOML): one
``[[config]]`` table per setting to run the streams under, each key optional.

    [[config]]                  # the engine's defaults
    [[config]]
    batch_every = 2             # realtime_batch_every (0 or absent: the engine's default)
    batch_every_starting = 8    # realtime_batch_every_starting (0 or absent: the default)
    realtime_max_rows = 0       # 0 or absent: the default
    switch_interval_ms = 0.5    # the GIL switch interval (0 or absent: Python's)
    playing_every = 2            # the scheduler's playing_every (1: no starting-only steps)
    pause_batch = true          # pause the batch rows over the cap (false: preempt them)
    first_lookahead = 1         # the first chunk's lookahead in frames (absent: 2)
    low_lead_ms = 0             # realtime_low_lead_ms (absent: the default; 0: off)
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from pathlib import Path


@dataclass(frozen=True)
class StreamsConfig:
    batch_every: int = 0
    batch_every_starting: int = 0
    realtime_max_rows: int = 0
    switch_interval_ms: float = 0.0
    playing_every: int = 0
    pause_batch: bool | None = None
    first_lookahead: int = 0
    low_lead_ms: int | None = None


def load_scenarios(paths: list[Path]) -> list[StreamsConfig]:
    """Every ``[[config]]`` of the files in order; none given: the engine's defaults alone."""
    known = {f.name for f in fields(StreamsConfig)}
    configs = []
    for path in paths:
        tables = tomllib.loads(path.read_text()).get("config", [])
        if not tables:
            raise SystemExit(f"{path}: no [[config]] table")
        for table in tables:
            if unknown := set(table) - known:
                raise SystemExit(f"{path}: unknown keys {sorted(unknown)} (known: {sorted(known)})")
            configs.append(StreamsConfig(**table))
    return configs or [StreamsConfig()]
