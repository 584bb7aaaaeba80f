"""A render's state: the ``Renderer`` (the engine, the store, the database and the settings a
worker renders with), a call's ``Outcome``, and each job's ``JobState`` while the engine renders
it. Apart from render.py, so job_record.py can use them without importing it."""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from sqlalchemy.orm import Session, sessionmaker

from pipeline.db.models import Job
from pipeline.engines.base import Engine
from pipeline.errors import RetryableError, StorageFullError
from pipeline.lexicon.store import Versions
from pipeline.live import LiveAudio
from pipeline.storage import ObjectStore
from pipeline.verify.jobs import LaterChecks, Verifier
from pipeline.verify.retakes import Retakes


class FairGate:
    """A semaphore that lets threads in in the order they came. threading.Semaphore does not: a
    thread it wakes must win the permit back from any thread that asks at that moment, and loses
    its place if it does not. Under a GPU worker's hundred task threads, the jobs of one message
    waited 100 s for the gate to store audio the engine had finished in 20 s, and a book's
    chapters ended in the render's last seconds instead of one after another. Here a release
    hands its permit to the oldest waiter."""

    def __init__(self, permits: int) -> None:
        if permits < 1:
            raise ValueError(f"a gate needs at least one permit, not {permits}")
        self._lock = threading.Lock()
        self._free = permits
        self._waiting: deque[threading.Lock] = deque()

    def acquire(self) -> None:
        with self._lock:
            if self._free and not self._waiting:
                self._free -= 1
                return
            turn = threading.Lock()
            turn.acquire()
            self._waiting.append(turn)
        try:
            turn.acquire()  # released by the release() that hands this thread its permit
        except BaseException:  # interrupted while waiting: leave the line, or pass on the permit
            with self._lock:
                handed = turn not in self._waiting
                if not handed:
                    self._waiting.remove(turn)
            if handed:
                self.release()
            raise

    def release(self) -> None:
        with self._lock:
            if self._waiting:
                self._waiting.popleft().release()
            else:
                self._free += 1

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def __enter__(self) -> FairGate:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass
class Renderer:
    engine: Engine
    store: ObjectStore
    sessions: sessionmaker[Session]
    max_chunk_chars: int = 400
    crossfade_ms: int = 30
    live: LiveAudio | None = None  # realtime jobs' live streams (pipeline/live.py)
    worker_host: str | None = None  # recorded per job; None: the host name
    # Batch jobs' host work (claim, split, encode, store, record) runs this many threads at a time.
    # A GPU worker has a task thread per message in hand, and the engine's loop thread shares the
    # GIL with all of them: a hundred threads claiming and encoding at once keep the loop from
    # launching its next step. Threads waiting here sleep instead of competing. Realtime jobs
    # never wait here. First come, first served (FairGate).
    batch_gate: FairGate = field(default_factory=lambda: FairGate(2))
    read_emoji: bool = False  # the text front end reads emoji out instead of dropping them
    # The last write the store refused as full or unwritable (StorageFullError), until one succeeds:
    # the heartbeat shows it, and jobs are not rendered while a probe write still fails.
    storage_fault: StorageFullError | None = None
    # Checks jobs' audio against their text (SYNTH_VERIFY): inline, or later on the verify queue.
    verifier: Verifier | LaterChecks | None = None
    retakes: Retakes | None = None  # renders a bad job again (SYNTH_RERENDER_BUDGET)
    lexicons: Versions = field(default_factory=Versions)  # lexicon versions, compiled once each
    reuse: str = "off"  # key, shared or off: pipeline/reuse.py (SYNTH_REUSE)
    meter_every_job: bool = True  # False: only levelled jobs are metered (SYNTH_LOUDNESS_METER)
    # A job's piece the model left silent (SilentRenderError) is rendered again with another seed
    # this many times before the job fails (SYNTH_RERENDER_BUDGET); not a job with a live stream,
    # which its writer has ended on the error.
    silent_retries: int = 1


@dataclass
class Outcome:
    done: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    retry: list[str] = field(default_factory=list)  # requeued: the caller schedules them again
    retry_errors: dict[str, RetryableError] = field(default_factory=dict)  # why, per requeued job
    skipped: list[str] = field(default_factory=list)  # already finished, cancelled or unknown
    closed: list[str] = field(default_factory=list)  # batches closed with their last job's result


@dataclass
class JobState:
    job: Job
    pieces: list[list[np.ndarray]]
    open_pieces: int
    admitted: float  # monotonic time the job went to the engine
    admitted_wall: datetime
    batch_size: int  # jobs handed to the engine together
    first_audio: float | None = None  # monotonic time of its first audio
    live: bool = False  # its live stream is written beside the engine's output
    stats: dict = field(default_factory=dict)  # the engine's counters, summed over pieces
    gate: contextlib.AbstractContextManager = field(default_factory=contextlib.nullcontext)
    pauses: list[float] | None = None  # seconds of silence around the pieces (audio.join)
    text_notes: dict = field(default_factory=dict)  # what the text front end changed
    lexicon: dict | None = None  # {"id", "version"} of the lexicon it rendered with
    identity: tuple[str, str] | None = None  # (scope, identity) to remember once stored (pipeline/reuse.py)
