"""An engine in a process of its own, behind the same interface.

A GPU engine's loop launches a decode step every few milliseconds and must not wait between them.
In the worker's process it shares one GIL with everything else the worker does: Celery's threads,
a task thread per batch message, the realtime consumer, the live publisher. When a batch of
messages lands, a hundred threads want the GIL at once and the loop waits its turn; every stream
it serves stalls with it. Hosted, the loop's process holds only the loop, the codec's threads and
one sender, and the worker's threads cost it nothing.

The wire is one duplex pipe. The worker sends ``("run", call, requests)``; the engine process
starts them (``Engine.submit``: the loop takes them without a thread per call) and sends back the
chunks of every call, batched per wake-up: a request's first chunk and then the rest of its audio
with its final chunk. Once the worker has asked for it (``publish_live``), this process writes
realtime jobs' live streams to Redis itself, start to end, chunk by chunk as the codec makes it.
Realtime calls are started by the reading thread itself, so they never queue behind a batch
call's tokenization.

If the engine process dies, every open call ends with a retryable error, later calls fail the same
way, and ``on_lost`` runs (the worker shuts down so its supervisor starts it afresh).
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import os
import queue
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import redis

from pipeline.engines.base import AudioChunk, Engine, SynthesisRequest
from pipeline.errors import EngineError, EngineUnavailableError, RetryableError
from pipeline.live import LiveAudio, LiveStreams, redis_client_url

if TYPE_CHECKING:
    from pipeline.settings import EngineSettings

log = logging.getLogger(__name__)

# Batch calls are tokenized on a few threads of the engine process, away from the pipe's reader.
BATCH_STARTERS = 4


class _Lost:
    """Put into an open call's queue when the engine process is gone."""

    def __init__(self, reason: str):
        self.reason = reason


class HostedEngine(Engine):
    def __init__(
        self,
        settings: EngineSettings,
        load: Callable[[EngineSettings], Engine],
        on_lost: Callable[[], None] | None = None,
    ):
        """``load``: builds the engine in the engine process (registry.load_inline); a function
        of a module, so that the spawned process can import it."""
        self.on_lost = on_lost
        ctx = multiprocessing.get_context("spawn")  # CUDA cannot be forked; spawn starts clean
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=serve,
            args=(load, replace(settings, process="inline"), child, logging.getLogger().getEffectiveLevel()),
            name=f"synth-engine-{settings.engine}",
            daemon=True,
        )
        self._proc.start()
        child.close()
        try:
            kind, payload = self._conn.recv()  # the engine loads and warms up first: minutes, maybe
        except (EOFError, OSError):
            self._proc.join(5)
            raise EngineUnavailableError(
                f"the engine process exited with code {self._proc.exitcode} while loading; its log above says why"
            ) from None
        if kind == "error":
            self._proc.join(10)
            raise EngineUnavailableError(payload)
        self.info = payload
        self._calls: dict[int, queue.SimpleQueue] = {}
        self._ids = itertools.count()
        self._send_lock = threading.Lock()
        self._lost: str | None = None
        self._closing = False
        self._reader = threading.Thread(target=self._read, name="engine-pipe", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def synthesize(self, requests: Sequence[SynthesisRequest]) -> Iterator[AudioChunk]:
        if not requests:
            return
        open_keys = {req.key for req in requests}
        call = next(self._ids)
        inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._calls[call] = inbox
        try:
            try:
                self._send(("run", call, list(requests)))
            except RetryableError as e:
                inbox.put(_Lost(str(e)))
            while open_keys:
                item = inbox.get()
                if isinstance(item, _Lost):  # the chunks sent before the process died came first
                    for key in open_keys:
                        yield AudioChunk(key, np.zeros(0, np.float32), True, RetryableError(item.reason))
                    return
                if item.final:
                    open_keys.discard(item.key)
                yield item
        finally:
            self._calls.pop(call, None)

    def publish_live(self, url: str, ttl: int, owner: str) -> None:
        """The engine process writes realtime requests' live streams to Redis, start, audio as the
        codec makes it, and end: no hop through the pipe, the worker's reader and the job's thread,
        each a wait for a busy GIL. The worker still gets each request's audio whole for the
        stored file."""
        self._send(("live", url, ttl, owner))
        self.publishes_live = True

    def close(self) -> None:
        self._closing = True
        try:
            self._send(("close",))
        except RetryableError:
            pass
        self._proc.join(30)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(5)
        self._conn.close()

    def _send(self, message: tuple) -> None:
        if self._lost is not None:
            raise RetryableError(self._lost)
        try:
            with self._send_lock:
                self._conn.send(message)
        except (OSError, ValueError) as e:  # a broken pipe: the reader reports the exit
            raise RetryableError(f"the engine process is gone ({e})") from e

    def _read(self) -> None:
        try:
            while True:
                for call, chunk in self._conn.recv():
                    inbox = self._calls.get(call)
                    if inbox is not None:
                        inbox.put(chunk)
        except (EOFError, OSError):
            pass
        self._proc.join(5)
        self._lost = f"the engine process exited (code {self._proc.exitcode})"
        for inbox in list(self._calls.values()):
            inbox.put(_Lost(self._lost))
        if not self._closing:
            log.critical("%s: open jobs end with a retryable error", self._lost)
            if self.on_lost is not None:
                self.on_lost()


class _Forward:
    """A call's sink in the engine process: its chunks go to the sender, tagged with the call.

    A request's audio is held here until its final chunk, except for its first chunk (the worker
    times the job's first audio by it): nobody listens to a batch job before it is stored, and a
    loop with hundreds of rows makes thousands of small chunks a second. Sent one by one, each
    would be pickled here, read and woken for in the worker, and the worker's process would spend
    on them the time its realtime streams need. A realtime job's listeners get each chunk from
    Redis at once: this process writes its live stream (``streams``, pipeline/live.py)."""

    __slots__ = ("call", "outbox", "held", "lock", "streams")

    def __init__(self, call: int, outbox: queue.SimpleQueue, streams: LiveStreams | None = None):
        self.call, self.outbox = call, outbox
        self.held: dict = {}  # request key -> its audio since the first chunk
        self.lock = threading.Lock()
        self.streams = streams

    def put(self, chunk: AudioChunk) -> None:
        with self.lock:  # the loop's and the codec's threads both put
            if self.streams is not None:
                self.streams.put(chunk)
            held = self._hold(chunk)
        if held is not None:
            self.outbox.put((self.call, held))

    def _hold(self, chunk: AudioChunk) -> AudioChunk | None:
        parts = self.held.get(chunk.key)
        if parts is None:  # nothing sent for this request yet
            if not chunk.final and chunk.audio.size:
                self.held[chunk.key] = []
            return chunk
        if not chunk.final:
            parts.append(chunk.audio)
            return None
        del self.held[chunk.key]
        if parts and chunk.error is None:
            chunk = replace(chunk, audio=np.concatenate([*parts, chunk.audio]))
        return chunk


def serve(load: Callable[[EngineSettings], Engine], settings: EngineSettings, conn, log_level: int) -> None:
    """The engine process: load, warm up, say ready, then run calls until told to close or the
    worker goes away (the pipe ends)."""
    # The worker decides when to stop: a Ctrl-C or SIGTERM sent to the whole process group must
    # not kill the engine under the jobs the worker is finishing.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=log_level, format=f"[engine {os.getpid()}] %(levelname)s %(name)s: %(message)s")
    try:
        engine = load(settings)
        engine.warmup()
    except Exception as e:
        log.exception("engine failed to load")
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", engine.info))

    outbox: queue.SimpleQueue = queue.SimpleQueue()
    sender = threading.Thread(target=_send_chunks, args=(conn, outbox), name="engine-send", daemon=True)
    sender.start()
    starters = ThreadPoolExecutor(BATCH_STARTERS, thread_name_prefix="engine-start")
    live: LiveAudio | None = None
    try:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break  # the worker is gone
            if message[0] == "close":
                break
            if message[0] == "live":
                _, url, ttl, owner = message
                live = LiveAudio(redis.Redis.from_url(redis_client_url(url)), ttl, owner)
                live.connect()
                continue
            _, call, requests = message
            streams = LiveStreams(live, requests, engine.info.sample_rate) if live is not None else None
            sink = _Forward(call, outbox, streams or None)
            if any(r.realtime for r in requests):
                _start(engine, requests, sink)  # on this thread: behind no batch call's tokenization
            else:
                starters.submit(_start, engine, requests, sink)
    finally:
        starters.shutdown(wait=False, cancel_futures=True)
        engine.close()
        outbox.put(None)
        sender.join(5)


def _start(engine: Engine, requests: list[SynthesisRequest], sink: _Forward) -> None:
    try:
        engine.submit(requests, sink)
    except Exception as e:  # nothing of this call was started: each request ends with the error
        log.exception("engine call failed to start")
        for req in requests:
            sink.put(AudioChunk(req.key, np.zeros(0, np.float32), True, EngineError(f"engine failed: {e}")))


def _send_chunks(conn, outbox: queue.SimpleQueue) -> None:
    """Every chunk ready at a wake-up goes in one message: one pickle and one write, not hundreds."""
    while True:
        item = outbox.get()
        if item is None:
            return
        batch = [item]
        while True:
            try:
                item = outbox.get_nowait()
            except queue.Empty:
                break
            if item is None:
                conn.send(batch)
                return
            batch.append(item)
        try:
            conn.send(batch)
        except (OSError, ValueError):
            return
