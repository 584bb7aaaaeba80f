"""Realtime streams as a user's app sees them: the official OpenAI Python client (async) against
`synth api`, raw PCM, each chunk's arrival time recorded at the client.

A stream "runs dry" (an underrun) when a chunk arrives after the audio before it has finished
playing, with playback starting at the first byte and pausing through each gap. That is the
strict count; a player that buffers starts playing a fixed time after the first byte (its buffer:
100 and 200 ms are counted too), and runs dry only when a chunk comes later than that delay allows.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import httpx

PCM_BYTES_PER_S = 24_000 * 2  # OpenAI's pcm: 24 kHz, 16-bit mono
PLAYER_BUFFERS_MS = (100, 200)  # the players' buffers dry streams are counted for, beside strict


@dataclass
class Stream:
    index: int
    sent: float = 0.0
    arrivals: list[tuple[float, int]] = field(default_factory=list)
    error: str | None = None
    job_id: str | None = None
    wall_offset: float = 0.0  # time.time() less time.perf_counter() in the client's process

    def wall(self, t: float) -> float:
        """A perf_counter time of this stream's as Unix time, to set beside the server's clocks."""
        return t + self.wall_offset

    @property
    def ttfb_s(self) -> float | None:
        return self.arrivals[0][0] - self.sent if self.arrivals else None

    @property
    def audio_s(self) -> float:
        return sum(n for _, n in self.arrivals) / PCM_BYTES_PER_S

    @property
    def rtf(self) -> float | None:
        audio = self.audio_s
        return (self.arrivals[-1][0] - self.sent) / audio if audio else None

    def underruns(self, buffer_s: float = 0.0) -> tuple[int, float]:
        """(times the player ran dry, seconds of silence it waited in all), for a player that
        starts playing ``buffer_s`` after the first byte and, once dry, resumes as the next chunk
        arrives."""
        if not self.arrivals:
            return 0, 0.0
        start = self.arrivals[0][0]
        played_until = start + buffer_s
        count, stalled = 0, 0.0
        for t, n in self.arrivals:
            if t > played_until + 1e-4 and t != start:
                count += 1
                stalled += t - played_until
                played_until = t
            played_until += n / PCM_BYTES_PER_S
        return count, stalled


async def _one(client, stream: Stream, text: str, at: float, voice: str) -> None:
    await asyncio.sleep(max(0.0, at - time.monotonic()))
    stream.wall_offset = time.time() - time.perf_counter()
    stream.sent = time.perf_counter()
    try:
        async with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice=voice, input=text, response_format="pcm"
        ) as response:
            stream.job_id = response.headers.get("x-job-id")
            async for chunk in response.iter_bytes():
                if chunk:
                    stream.arrivals.append((time.perf_counter(), len(chunk)))
    except Exception as e:  # noqa: BLE001 - every failure is a figure of the run
        stream.error = f"{type(e).__name__}: {e}"[:300]


async def _streams(base_url: str, key: str, jobs: list[tuple[int, str, float]], voice: str) -> list[Stream]:
    """One client: stream ``index`` sends ``text`` at monotonic time ``at``."""
    import httpx
    from openai import AsyncOpenAI

    limits = httpx.Limits(max_connections=len(jobs) + 8, max_keepalive_connections=len(jobs) + 8)
    async with AsyncOpenAI(
        base_url=base_url,
        api_key=key,
        max_retries=0,
        timeout=300,
        http_client=httpx.AsyncClient(limits=limits, timeout=300),
    ) as client:
        streams = [Stream(i) for i, _, _ in jobs]
        await asyncio.gather(*[_one(client, s, text, at, voice) for s, (_, text, at) in zip(streams, jobs)])
    return streams


def _client_process(base_url: str, key: str, jobs: list[tuple[int, str, float]], voice: str):
    """A client process's streams, and the CPU seconds it spent on them over its wall seconds."""
    cpu, wall = time.process_time(), time.monotonic()
    streams = asyncio.run(_streams(base_url, key, jobs, voice))
    start = min((at for _, _, at in jobs), default=wall)
    return streams, (time.process_time() - cpu) / max(1e-9, time.monotonic() - start)


def _ready() -> None:
    from openai.resources.audio import speech

    assert speech.AsyncSpeech  # the client's imports are paid before the clock starts


async def run_streams(base_url: str, key: str, texts: list[str], spread_s: float, voice: str = "alloy") -> list[Stream]:
    """``len(texts)`` streams arriving evenly over ``spread_s`` seconds, all on one client."""
    start, step = time.monotonic(), spread_s / max(1, len(texts))
    return await _streams(base_url, key, [(i, t, start + i * step) for i, t in enumerate(texts)], voice)


def run_streams_in_processes(
    base_url: str | list[str], key: str, texts: list[str], spread_s: float, per_process: int = 32, voice: str = "alloy"
) -> tuple[list[Stream], list[float]]:
    """As ``run_streams``, the streams dealt over client processes of at most ``per_process``
    streams each, as the many apps of a real deployment would send them: one Python process
    reading hundreds of streams would be the bottleneck it measures. Also returns each client
    process's CPU share (CPU seconds over wall seconds), to show it was not. With several base
    URLs (API processes), the client processes take them in turn, as a load balancer would."""
    urls = [base_url] if isinstance(base_url, str) else base_url
    procs = max(1, math.ceil(len(texts) / per_process))
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(procs, mp_context=ctx) as pool:
        for f in [pool.submit(_ready) for _ in range(procs)]:
            f.result()
        start, step = time.monotonic() + 1.0, spread_s / max(1, len(texts))
        jobs = [(i, t, start + i * step) for i, t in enumerate(texts)]
        futures = [pool.submit(_client_process, urls[p % len(urls)], key, jobs[p::procs], voice) for p in range(procs)]
        results = [f.result() for f in futures]
    streams = sorted((s for got, _ in results for s in got), key=lambda s: s.index)
    return streams, [round(share, 3) for _, share in results]


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def summarize(streams: list[Stream]) -> dict:
    ttfb = [s.ttfb_s for s in streams if s.ttfb_s is not None and not s.error]
    rtf = [s.rtf for s in streams if s.rtf is not None and not s.error]
    dry = [s.underruns() for s in streams if not s.error]
    buffered = {ms: [s.underruns(ms / 1000)[0] for s in streams if not s.error] for ms in PLAYER_BUFFERS_MS}
    return {
        "streams": len(streams),
        "errors": sum(1 for s in streams if s.error),
        "error_examples": sorted({s.error for s in streams if s.error})[:3],
        "ttfb_p50_ms": _ms(percentile(ttfb, 50)),
        "ttfb_p95_ms": _ms(percentile(ttfb, 95)),
        "ttfb_p99_ms": _ms(percentile(ttfb, 99)),
        "ttfb_max_ms": _ms(max(ttfb) if ttfb else None),
        "underruns": sum(n for n, _ in dry),
        "streams_dry": sum(1 for n, _ in dry if n),
        "stall_s": round(sum(s for _, s in dry), 3),
        **{f"streams_dry_{ms}ms": sum(1 for n in counts if n) for ms, counts in buffered.items()},
        "rtf_max": round(max(rtf), 3) if rtf else None,
        "rtf_p50": _r(percentile(rtf, 50)),
        "streams_over_rtf_0.8": sum(1 for r in rtf if r >= 0.8),
        "streams_over_rtf_1": sum(1 for r in rtf if r >= 1.0),
        "audio_s": round(sum(s.audio_s for s in streams), 1),
    }


def _ms(v: float | None) -> float | None:
    return None if v is None else round(1000 * v, 1)


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


SINGLE_TEXT = "Hello! Thanks for calling. How can I help you today?"


def singles(base_url: str, key: str, n: int) -> list[dict]:
    """``n`` requests one after another; the first is the server's first after boot. The client's
    own first-use costs (the OpenAI package imports its resources lazily) are paid before it, as a
    long-running app has paid them: they are not the server's."""
    warm_client(base_url, key)
    out = []
    for _ in range(n):
        s = summarize(asyncio.run(run_streams(base_url, key, [SINGLE_TEXT], 0.0)))
        out.append(
            {
                "ttfb_ms": s["ttfb_p50_ms"],
                "rtf": s["rtf_max"],
                "errors": s["errors"],
                "error_examples": s["error_examples"],
            }
        )
    return out


def warm_client(base_url: str, key: str) -> None:
    from openai import AsyncOpenAI

    async def touch() -> None:
        async with AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0) as client:
            client.audio.speech.with_streaming_response  # noqa: B018 - imports and builds the resource
            # one request through the client's HTTP stack (its first costs 15 ms more than the
            # next), to the health route that the bench and any load balancer poll anyway
            await client.get(base_url.rsplit("/v1", 1)[0] + "/healthz", cast_to=httpx.Response)

    asyncio.run(touch())
