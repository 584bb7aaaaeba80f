"""Every live stream an API process serves, read over one Redis connection.

A reader per stream (an XREAD BLOCK each) holds a Redis connection per listener: hundreds of live
streams exhaust any pool, and each blocked read wakes on its own. The hub runs one loop with one
XREAD BLOCK over the keys of every stream being listened to, and hands each entry to its
listeners' queues. A new listener wakes the blocked read by appending to the hub's own wake stream,
which the read includes: an append that lands before the read starts is still seen, so no wake-up
is lost. Listeners are bounded (``max_streams``): past that the API answers 503 with Retry-After
rather than degrading every stream. Each owner (an API key) holds at most ``max_per_owner`` of
them, so one key cannot take every slot from the others: past that its new streams get 429. Both
are counted here, in the process, so the check costs the realtime path no round trip. A listener
that is closed, or not read for ``STALE_S``, is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, cast

import redis
import redis.asyncio as aioredis
from redis.typing import KeyT, StreamIdT

log = logging.getLogger(__name__)

BLOCK_MS = 1000  # the loop's longest wait; a new listener wakes it at once
READ_COUNT = 256  # entries per stream per read
STALE_S = 60.0  # a listener nobody reads for this long (a client gone unnoticed) is dropped
RETRY_S = 0.5  # pause before reading again after Redis failed
_WAKE_MAXLEN = 16


class LiveCapacityError(Exception):
    """The API serves ``max_streams`` live streams already."""


class OwnerLimitError(Exception):
    """This owner (an API key) holds ``max_per_owner`` live streams already."""


class LiveHubError(Exception):
    """Redis failed under a listener; the message says how."""


def _id(entry_id: bytes | str) -> tuple[int, int]:
    ms, _, seq = (entry_id.decode() if isinstance(entry_id, bytes) else entry_id).partition("-")
    return int(ms), int(seq or 0)


@dataclass(eq=False)
class Listener:
    """One reader of one stream: entries arrive in ``queue`` in order, from after ``last``."""

    key: str
    owner: str | None = None  # the API key listening, counted against its own cap
    last: bytes = b"0"
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    read_at: float = field(default_factory=time.monotonic)
    waiting: bool = False
    cut: Exception | None = None  # ends the stream at the next read, ahead of what is queued

    async def get(self, timeout: float):
        """The next entry ``(id, fields)``, or None after ``timeout`` seconds without one."""
        if self.cut is not None:
            raise self.cut
        self.waiting = True
        try:
            item = await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None
        finally:
            self.waiting = False
            self.read_at = time.monotonic()
        if isinstance(item, Exception):
            raise item
        return item


class LiveHub:
    def __init__(self, url: str, max_streams: int, max_per_owner: int | None = None) -> None:
        self.max_streams = max_streams
        self.max_per_owner = min(max_streams, max_per_owner or max_streams)
        self._reader = aioredis.Redis.from_url(url, single_connection_client=True)
        self._writer = aioredis.Redis(
            connection_pool=aioredis.BlockingConnectionPool.from_url(url, max_connections=4, timeout=10)
        )
        self._wake_key = f"synth:api:wake:{uuid.uuid4().hex}"
        self._wake_last = b"0"
        self._listeners: dict[str, set[Listener]] = {}
        self._cursor: dict[str, bytes] = {}  # the next XREAD's id per key, kept as entries come
        self._count = 0
        self._owners: dict[str, int] = {}  # open listeners per owner
        self._swept = time.monotonic()
        self._task: asyncio.Task | None = None
        self._idle = asyncio.Event()

    @property
    def streams(self) -> int:
        return self._count

    def has_room(self) -> bool:
        return self._count < self.max_streams

    def owner_limit(self, quota: int | None = None) -> int:
        """An owner's share: ``max_per_owner``, or the owner's own quota when that is lower."""
        return self.max_per_owner if quota is None else min(self.max_per_owner, quota)

    def owner_has_room(self, owner: str, quota: int | None = None) -> bool:
        return self._owners.get(owner, 0) < self.owner_limit(quota)

    def owners(self) -> list[str]:
        """The owners with a listener open."""
        return list(self._owners)

    def end_owner(self, owner: str, error: Exception) -> int:
        """End every listener of ``owner``: its reader raises ``error`` at its next read, before
        any audio still queued for it. Returns how many were ended."""
        ended = 0
        for listeners in self._listeners.values():
            for listener in listeners:
                if listener.owner == owner and listener.cut is None:
                    listener.cut = error
                    listener.queue.put_nowait(error)  # wakes a reader that waits
                    ended += 1
        return ended

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="synth-live-hub")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - shutting down either way
                pass
        try:
            await self._writer.delete(self._wake_key)
        except redis.RedisError:
            pass
        await self._reader.aclose()
        await self._writer.aclose()

    async def listen(self, key: str, owner: str | None = None, quota: int | None = None) -> Listener:
        """A listener of ``key`` from its first entry; LiveCapacityError when full, OwnerLimitError
        when ``owner`` holds its share already (``quota``: the owner's own limit, if lower)."""
        if not self.has_room():
            raise LiveCapacityError(f"this API process serves {self.max_streams} live streams already")
        if owner is not None and not self.owner_has_room(owner, quota):
            raise OwnerLimitError(f"this API key has {self.owner_limit(quota)} live streams open already")
        listener = Listener(key, owner)
        self._listeners.setdefault(key, set()).add(listener)
        self._cursor[key] = b"0"  # a key already read re-reads from its start for the newcomer
        self._count += 1
        if owner is not None:
            self._owners[owner] = self._owners.get(owner, 0) + 1
        await self._wake()
        return listener

    def close_listener(self, listener: Listener) -> None:
        listeners = self._listeners.get(listener.key)
        if listeners is None or listener not in listeners:
            return
        listeners.discard(listener)
        self._count -= 1
        if listener.owner is not None:
            left = self._owners[listener.owner] - 1
            if left:
                self._owners[listener.owner] = left
            else:
                del self._owners[listener.owner]
        if not listeners:
            del self._listeners[listener.key]
            del self._cursor[listener.key]

    async def _wake(self) -> None:
        self._idle.set()
        try:
            pipe = self._writer.pipeline(transaction=False)
            pipe.xadd(self._wake_key, {"w": 1}, maxlen=_WAKE_MAXLEN, approximate=True)
            pipe.expire(self._wake_key, 3600)
            await pipe.execute()
        except redis.RedisError as e:  # the read loop notices within BLOCK_MS anyway
            log.warning("live hub wake-up not sent: %s", e)

    # The read loop ---------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            if not self._listeners:
                self._idle.clear()
                await self._idle.wait()
                continue
            if time.monotonic() - self._swept > 1.0:
                self._drop_stale()
            streams: dict[KeyT, StreamIdT] = {key: at for key, at in self._cursor.items()}
            streams[self._wake_key] = self._wake_last
            try:
                reply = await self._reader.xread(streams, count=READ_COUNT, block=BLOCK_MS)
            except (redis.RedisError, OSError) as e:
                self._fail_all(LiveHubError(f"live audio unavailable: {e}"))
                await asyncio.sleep(RETRY_S)
                continue
            # the client speaks RESP2: [[key, entries], ...], or None where the block time passed
            for key, entries in cast("list[list[Any]] | None", reply) or ():
                self._dispatch(key.decode() if isinstance(key, bytes) else key, entries)

    def _dispatch(self, key: str, entries) -> None:
        if key == self._wake_key:
            self._wake_last = entries[-1][0]
            return
        listeners = self._listeners.get(key)
        if not listeners:
            return
        self._cursor[key] = entries[-1][0]
        if len(listeners) == 1:  # the usual case: one client per stream, entries in order
            (listener,) = listeners
            for entry in entries:
                listener.queue.put_nowait(entry)
            listener.last = entries[-1][0]
            return
        for listener in listeners:  # a late joiner re-reads from the start: skip what each has seen
            last = _id(listener.last)
            for entry_id, fields in entries:
                if _id(entry_id) > last:
                    listener.queue.put_nowait((entry_id, fields))
            listener.last = entries[-1][0]

    def _fail_all(self, error: Exception) -> None:
        for listeners in self._listeners.values():
            for listener in listeners:
                listener.queue.put_nowait(error)

    def _drop_stale(self) -> None:
        self._swept = time.monotonic()
        cutoff = self._swept - STALE_S
        for listeners in list(self._listeners.values()):
            for listener in [x for x in listeners if x.read_at < cutoff and not x.waiting]:
                log.info("live listener of %s unread for %.0f s: dropped", listener.key, STALE_S)
                self.close_listener(listener)
