"""A job's live copy in Redis as `LiveJob` writes it from the engine's chunks: the stored file's
crossfades, and no audio held back where no crossfade needs it; and as `LiveStreams`, the one
writer of an engine call's streams, starts and ends them."""

from __future__ import annotations

import numpy as np
import redis

from pipeline import audio
from pipeline.engines.base import AudioChunk, LiveSpec, SynthesisRequest
from pipeline.errors import EngineError, RetryableError
from pipeline.live import LiveAudio, LiveJob, LiveStreams, redis_client_url, stream_key
from tests.waiting import eventually

RATE, FADE_MS = 24_000, 30
FADE = RATE * FADE_MS // 1000


def _published(client: redis.Redis, job_id: str) -> np.ndarray:
    entries = client.xrange(stream_key(job_id))
    return np.frombuffer(b"".join(f[b"data"] for _, f in entries if f[b"kind"] == b"pcm"), "<i2")


def _tone(n: int, hz: float) -> np.ndarray:
    return (0.3 * np.sin(2 * np.pi * hz * np.arange(n) / RATE)).astype(np.float32)


def test_a_single_piece_job_publishes_each_chunk_whole_as_it_arrives(redis_url):
    client = redis.Redis.from_url(redis_client_url(redis_url))
    live = LiveAudio(client, ttl=60)
    live.start("one", RATE)
    job = LiveJob(live, "one", pieces=1, fade=FADE)
    first = _tone(4096, 220)
    job.add(0, first, final=False)
    # all of the first chunk reaches the player before the engine makes the next
    eventually(lambda: _published(client, "one").size == first.size, 5, "the first chunk's samples in the stream")
    np.testing.assert_array_equal(_published(client, "one"), audio.to_int16(first))
    second = _tone(2048, 330)
    job.add(0, second, final=True)
    job.close()
    want = audio.to_int16(np.concatenate([first, second]))
    eventually(lambda: _published(client, "one").size == want.size, 5, "the whole job in the stream")
    np.testing.assert_array_equal(_published(client, "one"), want)


def test_pieces_are_joined_with_the_stored_files_crossfade(redis_url):
    client = redis.Redis.from_url(redis_client_url(redis_url))
    live = LiveAudio(client, ttl=60)
    live.start("two", RATE)
    job = LiveJob(live, "two", pieces=2, fade=FADE)
    pieces = [[_tone(3000, 220), _tone(1500, 250)], [_tone(2500, 330), _tone(900, 300)]]
    # the second piece finishes first: it waits for the first, whose tail it fades into
    for index, chunks in reversed(list(enumerate(pieces))):
        for n, chunk in enumerate(chunks):
            job.add(index, chunk, final=n == len(chunks) - 1)
    job.close()
    stored = audio.join([np.concatenate(c) for c in pieces], RATE, FADE_MS)
    want = audio.to_int16(stored)
    eventually(lambda: _published(client, "two").size == want.size, 5, "the whole job in the stream")
    np.testing.assert_allclose(_published(client, "two"), want, atol=1)


def _kinds(client: redis.Redis, job_id: str) -> list[tuple[bytes, bytes]]:
    return [(f[b"kind"], f.get(b"error", b"")) for _, f in client.xrange(stream_key(job_id))]


def test_the_writer_of_a_call_starts_its_live_jobs_streams_and_ends_each_after_its_last_piece(redis_url):
    client = redis.Redis.from_url(redis_client_url(redis_url))
    live = LiveAudio(client, ttl=60)
    spec = LiveSpec("whole", pieces=2, fade=FADE)
    requests = [SynthesisRequest(("whole", i), "Text.", "v", realtime=True, live=spec) for i in range(2)]
    requests.append(SynthesisRequest(("batch", 0), "Text.", "v"))
    streams = LiveStreams(live, requests, RATE)
    assert streams and _kinds(client, "whole") == [(b"start", b"")]
    pieces = [_tone(2000, 220), _tone(1800, 330)]
    for i, piece in enumerate(pieces):
        streams.put(AudioChunk(("batch", 0), _tone(500, 200), final=True))  # not live: not written
        streams.put(AudioChunk(("whole", i), piece, final=True))
    want = audio.to_int16(audio.join(pieces, RATE, FADE_MS))
    eventually(lambda: _kinds(client, "whole")[-1] == (b"end", b""), 5, "the stream's end")
    np.testing.assert_allclose(_published(client, "whole"), want, atol=1)
    assert not client.exists(stream_key("batch"))


def test_an_engine_error_ends_the_stream_with_its_reason_and_a_retryable_one_leaves_it_to_the_retry(redis_url):
    client = redis.Redis.from_url(redis_client_url(redis_url))
    live = LiveAudio(client, ttl=60)
    requests = [
        SynthesisRequest((job_id, 0), "Text.", "v", realtime=True, live=LiveSpec(job_id, 1, FADE))
        for job_id in ("failed", "shed")
    ]
    streams = LiveStreams(live, requests, RATE)
    streams.put(AudioChunk(("failed", 0), _tone(1000, 220), final=False))
    streams.put(AudioChunk(("failed", 0), np.zeros(0, np.float32), True, EngineError("voice 'v' is unknown")))
    streams.put(AudioChunk(("shed", 0), np.zeros(0, np.float32), True, RetryableError("engine full")))
    eventually(lambda: _kinds(client, "failed")[-1][0] == b"end", 5, "the failed job's end")
    assert _kinds(client, "failed") == [(b"start", b""), (b"pcm", b""), (b"end", b"voice 'v' is unknown")]
    # the requeued job's retry starts its stream again; an end now would cut its readers off
    live.end("marker", None)
    eventually(lambda: _kinds(client, "marker"), 5, "the publisher to have written what came before")
    assert _kinds(client, "shed") == [(b"start", b"")]
