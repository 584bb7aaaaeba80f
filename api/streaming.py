"""Live audio over HTTP: read a job's Redis stream (pipeline/live.py) from its first entry, so a late
joiner gets everything already produced, then block for the rest; encode as it arrives (streamed WAV
with an open-ended header, raw PCM, or mp3/opus/aac/flac through an ffmpeg pipe).

A stream that breaks (the job failed mid-way, the live copy expired, ffmpeg died) raises, so the HTTP
response is cut off without its final chunk: the client sees an incomplete transfer, never a short
file that looks whole."""

from __future__ import annotations

import asyncio
import io
import struct
import time
import wave
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import redis.asyncio as aioredis

from api.livehub import LiveHub, Listener
from pipeline.audio import ffmpeg_exe
from pipeline.live import END, PCM, START, alive_key, stream_key

STREAM_FORMATS = ("wav", "pcm")
SPEECH_FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
CONTENT_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
OPENAI_PCM_RATE = 24_000  # OpenAI's `pcm` is 24 kHz 16-bit mono
IDLE_S = 120.0  # longest silence between two chunks of a running job
_POLL_S = 1.0  # a quiet stream is checked this often
_FFMPEG_ARGS = {
    "mp3": ["-c:a", "libmp3lame", "-b:a", "64k", "-f", "mp3"],
    "opus": ["-ar", "48000", "-c:a", "libopus", "-b:a", "32k", "-f", "ogg"],
    "aac": ["-c:a", "aac", "-b:a", "64k", "-f", "adts"],
    "flac": ["-c:a", "flac", "-f", "flac"],
    "wav": ["-f", "wav"],
}


class LiveStreamError(Exception):
    """The live audio cannot be completed; the message says why."""


class LiveStartTimeout(LiveStreamError):
    """No worker started the job in time (it stays queued)."""


class KeyRevokedError(LiveStreamError):
    """The API key that opened the stream was revoked (api/revocation.py)."""


class WorkerLostError(LiveStreamError):
    """The worker publishing the stream is gone (killed, or cut off from Redis) mid-stream."""


@dataclass
class LiveStream:
    sample_rate: int
    pcm: AsyncIterator[bytes]  # little-endian int16 mono


async def open_live(
    hub: LiveHub,
    client: aioredis.Redis,
    job_id: str,
    job_finished: Callable[[], Awaitable[bool]],
    wait_s: float,
    owner: str | None = None,
    quota: int | None = None,
) -> LiveStream | None:
    """Wait for the job's live audio to start. None when the job finished without one (a batch job,
    or its live copy expired): the caller falls back to the stored file. LiveStreamError when the
    job failed before its first audio, or did not start within ``wait_s``; LiveCapacityError when
    the API serves as many streams as it may, OwnerLimitError when ``owner`` (the API key) holds
    its share (``quota``: the owner's own limit, if lower)."""
    listener = await hub.listen(stream_key(job_id), owner, quota)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            entry = await listener.get(_POLL_S)
            if entry is not None:
                fields = entry[1]
                if fields[b"kind"] == START:
                    owner = fields.get(b"owner", b"").decode()
                    return LiveStream(int(fields[b"rate"]), _pcm(hub, client, listener, owner))
                if fields[b"kind"] == END and fields.get(b"error"):
                    raise LiveStreamError(fields[b"error"].decode(errors="replace"))
                continue
            if await job_finished():
                hub.close_listener(listener)
                return None
            if time.monotonic() > deadline:
                raise LiveStartTimeout(
                    f"no worker started job {job_id} within {wait_s:g} s; it stays queued: "
                    f"GET /v1/jobs/{job_id}/stream later"
                )
    except BaseException:
        hub.close_listener(listener)
        raise


async def _pcm(hub: LiveHub, client: aioredis.Redis, listener: Listener, owner: str) -> AsyncIterator[bytes]:
    """The stream's PCM from its first chunk. A quiet stream is checked: expired, or its worker
    gone (its alive key lapsed), it is cut rather than left hanging."""
    idle_since = time.monotonic()
    try:
        while True:
            entry = await listener.get(_POLL_S)
            if entry is None:
                await _check_quiet(client, listener.key, owner, time.monotonic() - idle_since)
                continue
            idle_since = time.monotonic()
            kind, fields = entry[1][b"kind"], entry[1]
            if kind == PCM:
                yield fields[b"data"]
            elif kind == END:
                if fields.get(b"error"):
                    raise LiveStreamError(fields[b"error"].decode(errors="replace"))
                return
            elif kind == START:
                raise LiveStreamError("the job was restarted by a retry; request the stream again")
    finally:
        hub.close_listener(listener)


async def _check_quiet(client: aioredis.Redis, key: str, owner: str, quiet_s: float) -> None:
    pipe = client.pipeline(transaction=False)
    pipe.exists(key)
    pipe.exists(alive_key(owner) if owner else key)
    exists, alive = await pipe.execute()
    if not exists:
        raise LiveStreamError("the live audio expired before it ended")
    if not alive:
        raise WorkerLostError(f"the worker rendering this job stopped ({quiet_s:.1f} s without audio)")
    if quiet_s > IDLE_S:
        raise LiveStreamError(f"no audio for {IDLE_S:.0f} s")


def wav_header(sample_rate: int) -> bytes:
    """A PCM16 mono WAV header whose sizes say "unknown" (0xFFFFFFFF), as streaming servers send."""
    unknown = 0xFFFFFFFF
    return (
        b"RIFF"
        + struct.pack("<I", unknown)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
        + b"data"
        + struct.pack("<I", unknown)
    )


def wav_pcm(data: bytes) -> tuple[int, bytes]:
    """(sample rate, PCM16 frames) of a stored mono 16-bit WAV file."""
    with wave.open(io.BytesIO(data)) as w:
        return w.getframerate(), w.readframes(w.getnframes())


async def once(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def encode(
    pcm: AsyncIterator[bytes], sample_rate: int, fmt: str, speed: float = 1.0, pcm_rate: int | None = None
) -> AsyncIterator[bytes]:
    """PCM16 chunks -> ``fmt`` chunks, as they come. ``pcm_rate``: resample raw PCM to this rate
    (OpenAI's 24 kHz); None keeps the engine's."""
    pcm_rate = pcm_rate or sample_rate
    if speed == 1.0 and fmt == "wav":
        yield wav_header(sample_rate)
        async for chunk in pcm:
            yield chunk
        return
    if speed == 1.0 and fmt == "pcm" and sample_rate == pcm_rate:
        async for chunk in pcm:
            yield chunk
        return
    out = ["-ar", str(pcm_rate), "-f", "s16le"] if fmt == "pcm" else _FFMPEG_ARGS[fmt]
    async for chunk in _ffmpeg(pcm, sample_rate, [*_tempo(speed), *out]):
        yield chunk


def _tempo(speed: float) -> list[str]:
    if speed == 1.0:
        return []
    steps = []
    while speed > 2.0:
        steps.append(2.0)
        speed /= 2.0
    while speed < 0.5:
        steps.append(0.5)
        speed /= 0.5
    steps.append(speed)
    return ["-filter:a", ",".join(f"atempo={s:.6f}" for s in steps)]


async def _ffmpeg(pcm: AsyncIterator[bytes], sample_rate: int, out_args: list[str]) -> AsyncIterator[bytes]:
    proc = await asyncio.create_subprocess_exec(
        ffmpeg_exe(),
        "-hide_banner",
        "-loglevel",
        "error",
        "-f",
        "s16le",
        "-ar",
        str(sample_rate),
        "-ac",
        "1",
        "-i",
        "pipe:0",
        *out_args,
        "-flush_packets",
        "1",
        "pipe:1",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdin, stdout, stderr = proc.stdin, proc.stdout, proc.stderr
    assert stdin is not None and stdout is not None and stderr is not None  # all three are pipes

    async def feed() -> None:
        try:
            async for chunk in pcm:
                stdin.write(chunk)
                await stdin.drain()
        except BaseException:
            proc.kill()  # no finished-looking file from a broken stream
            raise
        finally:
            stdin.close()

    feeder = asyncio.create_task(feed())
    try:
        while chunk := await stdout.read(16384):
            yield chunk
        await feeder
        if await proc.wait() != 0:
            err = (await stderr.read()).decode(errors="replace").strip()
            raise LiveStreamError(f"ffmpeg failed: {err[:300]}")
    finally:
        if not feeder.done():
            feeder.cancel()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
