"""The engine in a process of its own (SYNTH_ENGINE_PROCESS=separate): the same chunks as in the
worker's process, errors that keep their kind, and a process that dies ending every open request
retryable instead of leaving its caller waiting."""

from __future__ import annotations

import os
import signal
import threading

import numpy as np
import pytest
import redis

from pipeline.engines.base import LiveSpec, SynthesisRequest
from pipeline.engines.hosted import HostedEngine
from pipeline.engines.registry import load_engine, separate_process
from pipeline.errors import EngineError, RetryableError
from pipeline.live import LiveAudio, LiveStreams, redis_client_url, stream_key
from tests.waiting import eventually

REQUESTS = [
    SynthesisRequest("a", "Hello there.", "tara", seed=1),
    SynthesisRequest("bad-voice", "Hello.", "nobody"),
    SynthesisRequest("b", "A second, longer line of text.", "leo", seed=2, realtime=True),
]


def collect(chunks):
    audio, finals = {}, {}
    for c in chunks:
        assert c.key not in finals, "a chunk after the final one"
        audio.setdefault(c.key, []).append(c.audio)
        if c.final:
            finals[c.key] = c
    return {k: np.concatenate(v) for k, v in audio.items()}, finals


@pytest.fixture(scope="module")
def hosted(engine_settings):
    engine = load_engine(engine_settings(process="separate"))
    yield engine
    engine.close()


def test_auto_keeps_a_cpu_engine_in_the_worker_process(engine_settings):
    assert not separate_process(engine_settings())
    assert separate_process(engine_settings(process="separate"))
    assert not separate_process(engine_settings(process="inline", device="cuda"))


def test_the_hosted_engine_renders_what_the_inline_one_does(hosted, engine_settings):
    assert isinstance(hosted, HostedEngine) and hosted.pid != os.getpid()
    inline = load_engine(engine_settings())
    try:
        assert hosted.info == inline.info
        want, want_finals = collect(inline.synthesize(REQUESTS))
    finally:
        inline.close()
    got, finals = collect(hosted.synthesize(REQUESTS))
    assert set(finals) == {"a", "b", "bad-voice"}
    assert isinstance(finals["bad-voice"].error, EngineError)
    assert str(finals["bad-voice"].error) == str(want_finals["bad-voice"].error)
    for key in "ab":
        assert finals[key].error is None and finals[key].stats["tokens"] == want_finals[key].stats["tokens"]
        np.testing.assert_allclose(got[key], want[key], atol=1e-5)


def test_calls_from_many_threads_each_get_their_own_chunks(hosted):
    results = {}

    def call(n):
        results[n] = collect(hosted.synthesize([SynthesisRequest(("job", n), f"Line {n}.", "tara", seed=n)]))[1]

    threads = [threading.Thread(target=call, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(results) == list(range(6))
    for n, finals in results.items():
        assert list(finals) == [("job", n)] and finals[("job", n)].error is None


def test_a_dead_engine_process_ends_open_requests_retryable(engine_settings):
    engine = load_engine(engine_settings(process="separate"))
    lost = threading.Event()
    engine.on_lost = lost.set
    try:
        chunks = engine.synthesize(
            [
                SynthesisRequest("long", "A long line of text to speak. " * 6, "tara", seed=3),
                SynthesisRequest("other", "Another line.", "leo", seed=4),
            ]
        )
        next(chunks)  # the call is running in the engine process
        os.kill(engine.pid, signal.SIGKILL)
        _, finals = collect(chunks)
        assert set(finals) == {"long", "other"}
        assert isinstance(finals["long"].error, RetryableError)  # far from its end when killed
        assert lost.wait(10)
        # Later calls do not wait for an engine that is gone either.
        _, later = collect(engine.synthesize([SynthesisRequest("next", "Hello.", "tara")]))
        assert isinstance(later["next"].error, RetryableError) and "exited" in str(later["next"].error)
    finally:
        engine.close()


def test_a_request_comes_back_in_two_chunks_whether_batch_or_realtime(hosted, engine_settings):
    text = "A longer line of text, so that its audio is made in many small chunks. " * 2
    batch = [SynthesisRequest("batch", text, "tara", seed=5)]
    live = [SynthesisRequest("live", text, "leo", seed=6, realtime=True)]
    inline = load_engine(engine_settings())
    try:
        want = {key: list(inline.synthesize(reqs)) for key, reqs in (("batch", batch), ("live", live))}
    finally:
        inline.close()
    assert len(want["batch"]) > 2 and len(want["live"]) > 2  # otherwise nothing here is tested
    got = {"batch": list(hosted.synthesize(batch)), "live": list(hosted.synthesize(live))}
    # The first chunk, to time the job's first audio by, then the rest with the final one: a
    # realtime job's listeners read its chunks from the live stream the engine process writes.
    np.testing.assert_allclose(got["batch"][0].audio, want["batch"][0].audio, atol=1e-5)
    for key in want:
        assert [c.final for c in got[key]] == [False, True]
        assert got[key][-1].stats["tokens"] == want[key][-1].stats["tokens"]
        np.testing.assert_allclose(collect(got[key])[0][key], collect(want[key])[0][key], atol=1e-5)


def _live_pcm(client, job_id: str, timeout_s: float = 60.0) -> np.ndarray:
    """The PCM of a job's live stream, once its end entry is there."""

    def ended():
        entries = client.xrange(stream_key(job_id))
        return entries if entries and entries[-1][1][b"kind"] == b"end" else None

    entries = eventually(ended, timeout_s, f"the live stream of {job_id} to end")
    assert entries[0][1][b"kind"] == b"start" and entries[-1][1][b"error"] == b""
    return np.frombuffer(b"".join(f[b"data"] for _, f in entries if f[b"kind"] == b"pcm"), "<i2")


def test_the_engine_process_writes_a_realtime_jobs_live_stream_as_the_worker_would(hosted, engine_settings, redis_url):
    client = redis.Redis.from_url(redis_client_url(redis_url))
    worker_side = LiveAudio(client, ttl=60)
    hosted.publish_live(redis_url, 60, worker_side.owner)
    assert hosted.publishes_live
    texts = ["The first piece of a realtime job.", "And its second piece, after a crossfade."]

    def pieces(job_id):
        return [
            SynthesisRequest((job_id, i), text, "tara", seed=7 + i, realtime=True, live=LiveSpec(job_id, 2, 720))
            for i, text in enumerate(texts)
        ]

    # What the worker writes itself when its engine runs in its own process.
    inline = load_engine(engine_settings())
    try:
        requests = pieces("by-worker")
        streams = LiveStreams(worker_side, requests, inline.info.sample_rate)
        for chunk in inline.synthesize(requests):
            streams.put(chunk)
    finally:
        inline.close()
    want = _live_pcm(client, "by-worker")

    # The engine process starts the stream itself, as it ends it: nothing else writes to it.
    chunks = list(hosted.synthesize(pieces("by-engine")))
    got = _live_pcm(client, "by-engine")
    assert got.size == want.size > 0
    np.testing.assert_allclose(got, want, atol=1)
    assert client.xrange(stream_key("by-engine"))[0][1][b"owner"] == worker_side.owner.encode()
    # The worker still gets each piece's audio, whole after its first chunk, for the stored file.
    for i in range(2):
        mine = [c for c in chunks if c.key == ("by-engine", i)]
        assert [c.final for c in mine] == [False, True] and mine[-1].error is None

    # A request the engine fails ends its stream with the engine's reason, from the same process.
    failed = list(
        hosted.synthesize(
            [SynthesisRequest(("bad", 0), "Hello.", "nobody", realtime=True, live=LiveSpec("bad", 1, 720))]
        )
    )
    entries = eventually(
        lambda: (e := client.xrange(stream_key("bad"))) and e[-1][1][b"kind"] == b"end" and e,
        30,
        "the failed job's stream to end",
    )
    assert [f[b"kind"] for _, f in entries] == [b"start", b"end"]
    assert entries[-1][1][b"error"].decode() == str(failed[-1].error)[:500] != ""
