"""Piper shares its threads between realtime streams: a short stream that arrives while a long one
renders gets its first chunk after a sentence or two of the long one, not after all of it. The real
engine with one thread, so the order of chunks is the order of the work."""

from __future__ import annotations

import queue

import pytest

from pipeline.engines.base import SynthesisRequest
from pipeline.settings import Settings

# Three sentences a piece, ten pieces: a long speech request cut at max_chunk_chars.
PIECE = "The committee met at dawn. It read every proposal. Then it voted at noon."


@pytest.fixture(scope="module")
def one_thread_piper():
    pytest.importorskip("piper")
    from pipeline.engines.registry import load_engine

    engine = load_engine(Settings(engine_threads=1).engine_settings())
    yield engine
    engine.close()


def test_a_short_stream_gets_its_first_chunk_while_a_long_stream_is_still_rendering(one_thread_piper):
    sink: queue.SimpleQueue = queue.SimpleQueue()
    long = [SynthesisRequest(("long", i), PIECE, "joe", realtime=True, job="long") for i in range(10)]
    one_thread_piper.submit(long, sink)
    first = sink.get(timeout=60)
    assert first.key[0] == "long" and first.error is None  # the long stream is playing

    one_thread_piper.submit([SynthesisRequest(("short", 0), "Hello there.", "joe", realtime=True, job="short")], sink)
    arrivals, open_pieces = [], len(long) + 1
    while open_pieces:
        chunk = sink.get(timeout=120)
        assert chunk.error is None, chunk.error
        arrivals.append(chunk.key)
        open_pieces -= chunk.final
    before_short = arrivals.index(("short", 0))
    # The long stream's sentence in progress when the short one came, its next turn, and one chunk
    # on its way through the other call's thread; before, the short one waited for all 29.
    assert before_short <= 3, arrivals
    assert arrivals[-1][0] == "long"


def test_a_long_streams_own_pieces_still_come_in_text_order(one_thread_piper):
    sink: queue.SimpleQueue = queue.SimpleQueue()
    long = [SynthesisRequest(("long", i), PIECE, "joe", realtime=True, job="long") for i in range(4)]
    one_thread_piper.submit(long, sink)
    finals = []
    while len(finals) < len(long):
        chunk = sink.get(timeout=120)
        if chunk.final:
            finals.append(chunk.key[1])
    assert finals == [0, 1, 2, 3]
