"""The fast engine of one quantization mode, booted again for a run under other scheduler settings.

The engine takes its settings when it is built (``OrpheusConfig.realtime`` and its ``scheduling``)
and keeps them: a run of streams under a scenario's config (scenarios.py), or of a single stream
at another first-chunk lookahead, closes the engine in hand and boots one so configured, on the
same rows, warmed as the first was. Runs under the settings in hand reuse the engine.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from ops.bench.orpheus.scenarios import StreamsConfig
from pipeline.engines.orpheus.config import RealtimeConfig
from pipeline.engines.orpheus.engine import PAUSE_BATCH, OrpheusEngine
from pipeline.engines.orpheus.serving.scheduler import SchedulerConfig


@dataclass(frozen=True)
class Tuning:
    """What a run sets: the engine's realtime config, and whether the batch rows over the realtime
    cap pause (the engine's way) or are preempted."""

    realtime: RealtimeConfig = RealtimeConfig()
    pause_batch: bool = PAUSE_BATCH

    def scheduling(self, config: SchedulerConfig) -> SchedulerConfig:
        """The engine's ``scheduling``: its scheduler's config with this ``pause_batch``."""
        return replace(config, pause_batch=self.pause_batch)

    def under(self, c: StreamsConfig) -> Tuning:
        """These settings with a scenario config's over them (its 0 or absent keys: these)."""
        rt = self.realtime
        return Tuning(
            replace(
                rt,
                batch_every=c.batch_every or rt.batch_every,
                batch_every_starting=c.batch_every_starting or rt.batch_every_starting,
                max_rows=c.realtime_max_rows or rt.max_rows,
                playing_every=c.playing_every or rt.playing_every,
                first_lookahead=c.first_lookahead or rt.first_lookahead,
                low_lead_ms=rt.low_lead_ms if c.low_lead_ms is None else c.low_lead_ms,
            ),
            self.pause_batch if c.pause_batch is None else c.pause_batch,
        )


class FastEngine:
    """``boot(tuning=, max_batch=)`` builds an engine (rows 0: as many as the memory holds; the
    first boot's time is ``boot_s``), ``warm`` runs it once before it is measured. Read ``engine`` where
    it is used, and hold it nowhere else: ``use`` must be able to free the one it replaces."""

    def __init__(self, boot: Callable[..., OrpheusEngine], warm: Callable[[OrpheusEngine], None], tuning: Tuning):
        self._boot, self._warm = boot, warm
        self.base = self.tuning = tuning
        started = time.perf_counter()
        self.engine: OrpheusEngine | None = boot(tuning=tuning, max_batch=0)
        self.boot_s = time.perf_counter() - started
        self.rows = self.engine.info.max_batch
        self.base_scheduler = self.engine.loop.scheduler.config  # the engine's own settings
        warm(self.engine)

    def use(self, tuning: Tuning) -> None:
        """Make ``engine`` one built with ``tuning``."""
        if tuning == self.tuning:
            return
        self.close()
        # The engine freezes what it built out of the garbage collector's reach (gcfreeze.py):
        # cycles of the engine just closed are collected, and its device memory freed, only
        # once that is undone.
        gc.unfreeze()
        gc.collect()
        self.engine = self._boot(tuning=tuning, max_batch=self.rows)
        self.tuning = tuning
        self._warm(self.engine)

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None
