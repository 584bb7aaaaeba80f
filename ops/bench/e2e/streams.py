"""Realtime streams as a user's app sees them: the official OpenAI Python client (async) against
`synth api`, raw PCM, each chunk's arrival time recorded at the client.

A stream "runs dry" (an underrun) when a chunk arrives after the audio before it has finished
playing, with playback starting at the first byte and pausing through each gap.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

PCM_BYTES_PER_S = 24_000 * 2     # OpenAI's pcm: 24 kHz, 16-bit mono


@dataclass
class Stream:
    index: int
    sent: float = 0.0
    arrivals: list[tuple[float, int]] = field(default_factory=list)
    error: str | None = None

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

    def underruns(self) -> tuple[int, float]:
        """(times the player ran dry, seconds of silence it waited in all)."""
        if not self.arrivals:
            return 0, 0.0
        start = self.arrivals[0][0]
        played_until = start
        count, stalled = 0, 0.0
        for t, n in self.arrivals:
            if t > played_until + 1e-4 and t != start:
                count += 1
                stalled += t - played_until
                played_until = t
            played_until += n / PCM_BYTES_PER_S
        return count, stalled


async def _one(client, stream: Stream, text: str, delay: float, voice: str) -> None:
    await asyncio.sleep(delay)
    stream.sent = time.perf_counter()
    try:
        async with client.audio.speech.with_streaming_response.create(
                model="tts-1", voice=voice, input=text, response_format="pcm") as response:
            async for chunk in response.iter_bytes():
                if chunk:
                    stream.arrivals.append((time.perf_counter(), len(chunk)))
    except Exception as e:  # noqa: BLE001 - every failure is a figure of the run
        stream.error = f"{type(e).__name__}: {e}"[:300]


async def run_streams(base_url: str, key: str, texts: list[str], spread_s: float,
                      voice: str = "alloy") -> list[Stream]:
    """``len(texts)`` streams arriving evenly over ``spread_s`` seconds, all on one client."""
    import httpx
    from openai import AsyncOpenAI

    limits = httpx.Limits(max_connections=len(texts) + 8, max_keepalive_connections=len(texts) + 8)
    async with AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=300,
                           http_client=httpx.AsyncClient(limits=limits, timeout=300)) as client:
        streams = [Stream(i) for i in range(len(texts))]
        step = spread_s / max(1, len(texts))
        await asyncio.gather(*[_one(client, s, t, i * step, voice)
                               for i, (s, t) in enumerate(zip(streams, texts))])
    return streams


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def summarize(streams: list[Stream]) -> dict:
    ttfb = [s.ttfb_s for s in streams if s.ttfb_s is not None and not s.error]
    rtf = [s.rtf for s in streams if s.rtf is not None and not s.error]
    dry = [s.underruns() for s in streams if not s.error]
    return {
        "streams": len(streams), "errors": sum(1 for s in streams if s.error),
        "error_examples": sorted({s.error for s in streams if s.error})[:3],
        "ttfb_p50_ms": _ms(percentile(ttfb, 50)), "ttfb_p95_ms": _ms(percentile(ttfb, 95)),
        "ttfb_p99_ms": _ms(percentile(ttfb, 99)), "ttfb_max_ms": _ms(max(ttfb) if ttfb else None),
        "underruns": sum(n for n, _ in dry), "streams_dry": sum(1 for n, _ in dry if n),
        "stall_s": round(sum(s for _, s in dry), 3),
        "rtf_max": round(max(rtf), 3) if rtf else None, "rtf_p50": _r(percentile(rtf, 50)),
        "streams_over_rtf_0.8": sum(1 for r in rtf if r >= 0.8),
        "streams_over_rtf_1": sum(1 for r in rtf if r >= 1.0),
        "audio_s": round(sum(s.audio_s for s in streams), 1),
    }


def _ms(v: float | None) -> float | None:
    return None if v is None else round(1000 * v, 1)


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)
