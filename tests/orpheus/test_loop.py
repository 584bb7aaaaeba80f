"""The engine loop thread with a scripted runner (the runner's interface, tokens chosen by the test)
and the real codec: sequences that end on end-of-speech while the next step is already in flight."""

from __future__ import annotations

import queue
import time

import numpy as np

from pipeline.engines.base import AudioChunk
from pipeline.engines.orpheus.serving.loop import EngineLoop
from pipeline.engines.orpheus.serving.scheduler import Scheduler, Seq
from pipeline.engines.orpheus.vocab import END_OF_SPEECH, audio_range


class ScriptedRunner:
    """launch/collect/padded_batch as ModelRunner has them. Sequence ``key`` draws valid audio codes
    and end-of-speech as its token number ``ends[key]``."""

    def __init__(self, ends: dict):
        self.ends = ends

    def padded_batch(self, rows: int) -> int:
        return rows

    def launch(self, plan):
        out: dict[int, list[int]] = {}
        for seq in plan.decode:
            out[seq.row] = [self._draw(seq)]
        for chunk in plan.prefill:
            if chunk.last:
                out.setdefault(chunk.seq.row, []).append(self._draw(chunk.seq))
        return out

    def collect(self, launched):
        return launched

    def _draw(self, seq) -> int:
        n = seq.generated + seq.inflight  # this token's number (1-based): counted at schedule
        if n == self.ends[seq.key]:
            return END_OF_SPEECH
        return audio_range((n - 1) % 7)[0] + n % 100


def test_sequences_ending_on_end_of_speech_under_overlap_finish_once(tiny):
    ends = {"a": 15, "b": 29, "c": 22}  # a and b end at a frame boundary, c mid-frame
    loop = EngineLoop(
        ScriptedRunner(ends),
        Scheduler(rows=2, max_context=256),
        tiny.codec,
        on_final=lambda live, audio: AudioChunk(live.key, np.zeros(0, np.float32) if audio is None else audio, True),
    )
    sink: queue.SimpleQueue = queue.SimpleQueue()
    try:
        loop.submit([(Seq(k, [1, 2, 3], budget=100, stop_token=END_OF_SPEECH), k) for k in ends], sink)
        finals = {}
        while len(finals) < len(ends):
            chunk = sink.get(timeout=60)
            assert chunk.error is None, chunk.error
            if chunk.final:
                assert chunk.key not in finals  # one final chunk per sequence
                finals[chunk.key] = chunk
    finally:
        loop.close()
    assert loop.stats.tokens == sum(ends.values())  # the tokens drawn after an end were dropped
    assert not loop.live and loop.stats.oom_events == 0


def final_chunk(live, audio):
    """The codec thread's ``on_final``: the stream's last audio (none: empty) as its final chunk."""
    return AudioChunk(live.key, np.zeros(0, np.float32) if audio is None else audio, True)


def test_the_codec_thread_sends_one_final_chunk_per_stream_whatever_the_slicing(tiny):
    """Batch streams that end on a batch turn are in both of the codec thread's lists; sliced
    renders once sent them two final chunks, and a caller counting finals stopped early."""
    from pipeline.engines.orpheus.codec.streaming import StreamState
    from pipeline.engines.orpheus.codec.thread import CodecThread
    from pipeline.engines.orpheus.serving.loop import InFlight

    worker = CodecThread(tiny.codec, on_final=final_chunk, batch_interval_s=0.0, batch_slice=1)
    sink: queue.SimpleQueue = queue.SimpleQueue()
    rng = np.random.default_rng(0)
    lives = []
    try:
        for k in range(3):
            live = InFlight(Seq(k, [1], budget=100), sink, StreamState(seed=k, chunk_frames=2), k)
            live.stream.assembler.frames.extend(rng.integers(0, 4096, size=7) for _ in range(9))
            worker.register(live)
            lives.append(live)
        for live in lives:
            worker.finish(live)
        chunks = [sink.get(timeout=60) for _ in range(3)]
        while not all(any(c.final and c.key == lv.key for c in chunks) for lv in lives):
            chunks.append(sink.get(timeout=60))
        try:  # anything else that comes is a duplicate
            chunks.append(sink.get(timeout=0.5))
        except queue.Empty:
            pass
    finally:
        worker.close()
    assert sorted(c.key for c in chunks if c.final) == [0, 1, 2]
    for live in lives:
        audio = sum(len(c.audio) for c in chunks if c.key == live.key)
        assert audio == 9 * 2048  # every frame, once


def test_a_codec_failure_after_some_finals_sends_no_second_final(tiny):
    """The batch lane sends finals over several calls (one per slice); when a later call fails,
    the streams finished before it must not get an error final as well, and the realtime lane's
    stream is not touched by the batch lane's failure."""
    from pipeline.engines.orpheus.codec.streaming import StreamState
    from pipeline.engines.orpheus.codec.thread import CodecThread
    from pipeline.engines.orpheus.serving.loop import InFlight

    class FailingSecondBatchCall:  # the codec's interface: decode_windows
        def __init__(self, codec):
            self.codec, self.batch_calls = codec, 0

        def decode_windows(self, frames, keys, urgent=False):
            if not urgent:
                self.batch_calls += 1
                if self.batch_calls == 2:
                    raise RuntimeError("codec broke")
            return self.codec.decode_windows(frames, keys, urgent)

    # all four end before the batch lane's first round, a second after it starts
    worker = CodecThread(FailingSecondBatchCall(tiny.codec), on_final=final_chunk, batch_interval_s=1.0, batch_slice=1)
    sink: queue.SimpleQueue = queue.SimpleQueue()
    rng = np.random.default_rng(1)
    lives = []
    try:
        for k, realtime in enumerate([True, False, False, False]):
            live = InFlight(Seq(k, [1], budget=100, realtime=realtime), sink, StreamState(seed=k, chunk_frames=2), k)
            # 2 frames: one window, so one codec call per stream and slice
            live.stream.assembler.frames.extend(rng.integers(0, 4096, size=7) for _ in range(2))
            lives.append(live)
            worker.register(live)
        for live in lives:  # all end at once
            worker.finish(live)
        finals: dict = {}
        while len(finals) < len(lives):
            chunk = sink.get(timeout=60)
            if chunk.final:
                finals.setdefault(chunk.key, []).append(chunk)
        try:
            while True:
                chunk = sink.get(timeout=0.5)
                if chunk.final:
                    finals[chunk.key].append(chunk)
        except queue.Empty:
            pass
    finally:
        worker.close()
    assert all(len(f) == 1 for f in finals.values()), {k: len(f) for k, f in finals.items()}
    assert finals[0][0].error is None and finals[1][0].error is None  # sent before the failure
    assert all(finals[k][0].error is not None for k in (2, 3))


def test_batch_streams_that_end_apart_share_the_lanes_next_round(tiny):
    """Batch streams ending one after another wait for the batch lane's round: their last chunks
    go in one codec call per window length, not in a call each as they end, and every stream
    still gets all its audio and one final chunk."""
    from pipeline.engines.orpheus.codec.streaming import StreamState
    from pipeline.engines.orpheus.codec.thread import CodecThread
    from pipeline.engines.orpheus.serving.loop import InFlight

    class CountingCalls:  # the codec's interface: decode_windows
        def __init__(self, codec):
            self.codec, self.lengths = codec, []

        def decode_windows(self, frames, keys, urgent=False):
            self.lengths.append(frames.shape[1])
            return self.codec.decode_windows(frames, keys, urgent)

    codec = CountingCalls(tiny.codec)
    worker = CodecThread(codec, on_final=final_chunk, batch_interval_s=1.0)
    sink: queue.SimpleQueue = queue.SimpleQueue()
    rng = np.random.default_rng(4)
    try:
        for k in range(5):
            live = InFlight(Seq(k, [1], budget=100), sink, StreamState(seed=k, chunk_frames=2), k)
            live.stream.assembler.frames.extend(rng.integers(0, 4096, size=7) for _ in range(9))
            worker.register(live)
            worker.finish(live)
            time.sleep(0.01)  # they end apart, as a batch's pieces do
        chunks = []
        while sum(c.final for c in chunks) < 5:
            chunks.append(sink.get(timeout=60))
    finally:
        worker.close()
    # 9 frames in chunks of 2: a first window of 4 frames, the rest full windows of 2 + 3 frames
    # (the last two reach back to that length)
    assert sorted(codec.lengths) == [4, 5]
    for k in range(5):
        assert sum(len(c.audio) for c in chunks if c.key == k) == 9 * 2048


def test_a_stream_that_ends_during_the_last_round_still_gets_its_final_chunk_at_close(tiny):
    """The loop is joined before the codec's lanes close; a stream that ended while the batch lane
    was inside a round is still rendered, and gets its final chunk, when the lanes close."""
    import threading

    from pipeline.engines.orpheus.codec.streaming import StreamState
    from pipeline.engines.orpheus.codec.thread import CodecThread
    from pipeline.engines.orpheus.serving.loop import InFlight

    class SlowCalls:  # the codec's interface: decode_windows
        def __init__(self, codec):
            self.codec, self.entered = codec, threading.Event()

        def decode_windows(self, frames, keys, urgent=False):
            self.entered.set()
            time.sleep(0.3)
            return self.codec.decode_windows(frames, keys, urgent)

    codec = SlowCalls(tiny.codec)
    worker = CodecThread(codec, on_final=final_chunk, batch_interval_s=0.0)
    sink: queue.SimpleQueue = queue.SimpleQueue()
    rng = np.random.default_rng(5)
    running = InFlight(Seq("a", [1], budget=100), sink, StreamState(seed=1, chunk_frames=2), "a")
    running.stream.assembler.frames.extend(rng.integers(0, 4096, size=7) for _ in range(4))
    worker.register(running)
    assert codec.entered.wait(60)  # the batch lane is inside a round
    ended = InFlight(Seq("b", [1], budget=100), sink, StreamState(seed=2, chunk_frames=2), "b")
    ended.stream.assembler.frames.extend(rng.integers(0, 4096, size=7) for _ in range(3))
    worker.register(ended)
    worker.finish(ended)
    worker.close()
    chunks = []
    while True:
        try:
            chunks.append(sink.get_nowait())
        except queue.Empty:
            break
    finals = [c for c in chunks if c.final and c.key == "b"]
    assert len(finals) == 1 and finals[0].error is None
    assert sum(len(c.audio) for c in chunks if c.key == "b") == 3 * 2048


def test_a_realtime_chunk_leaves_while_the_batch_lane_is_inside_a_codec_call(tiny):
    """The realtime lane has its own thread: a stream's chunk goes out while a batch call is
    still running (here: held until the test lets it go), not after it."""
    import threading

    from pipeline.engines.orpheus.codec.streaming import StreamState
    from pipeline.engines.orpheus.codec.thread import CodecThread
    from pipeline.engines.orpheus.serving.loop import InFlight

    class HeldBatchCalls:  # the codec's interface: decode_windows
        def __init__(self, codec):
            self.codec, self.entered, self.release = codec, threading.Event(), threading.Event()

        def decode_windows(self, frames, keys, urgent=False):
            if not urgent:
                self.entered.set()
                assert self.release.wait(60), "the test never released the batch call"
            return self.codec.decode_windows(frames, keys, urgent)

    codec = HeldBatchCalls(tiny.codec)
    worker = CodecThread(codec, on_final=final_chunk, batch_interval_s=0.0)
    sink: queue.SimpleQueue = queue.SimpleQueue()
    rng = np.random.default_rng(2)
    try:
        batch = InFlight(Seq("batch", [1], budget=100), sink, StreamState(seed=1, chunk_frames=2), "batch")
        batch.stream.assembler.frames.extend(rng.integers(0, 4096, size=7) for _ in range(4))
        worker.register(batch)
        assert codec.entered.wait(60)  # the batch lane is now inside its call, held
        stream = InFlight(Seq("rt", [1], budget=100, realtime=True), sink, StreamState(seed=2, ramp=True), "rt")
        worker.register(stream)
        stream.stream.assembler.frames.extend(rng.integers(0, 4096, size=7) for _ in range(3))
        worker.frames_fed()
        chunk = sink.get(timeout=60)
        assert chunk.key == "rt" and not chunk.final and len(chunk.audio) == 2048
        assert not codec.release.is_set()  # it came while the batch call was held
    finally:
        codec.release.set()
        worker.close()
    assert worker.lanes[True].stats.calls >= 1 and worker.lanes[True].stats.frames == 3


def test_the_lanes_decode_at_once_with_their_own_noise_keys(tiny):
    """The two lanes call the codec from their own threads; the keyed noise of an eager decode
    reads the keys of its own thread's call, so concurrent calls render what each renders alone."""
    import threading

    rng = np.random.default_rng(3)
    calls = [(rng.integers(0, 4096, size=(2, 3, 7)), np.array([10 * i, 10 * i + 1])) for i in range(6)]
    alone = [tiny.codec.decode_windows(frames, keys) for frames, keys in calls]
    got: dict[int, np.ndarray] = {}

    def lane(indices):
        for _ in range(3):
            for i in indices:
                got[i] = tiny.codec.decode_windows(*calls[i])

    threads = [threading.Thread(target=lane, args=(range(k, 6, 2),)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(got) == list(range(6))
    for i, audio in enumerate(alone):
        np.testing.assert_array_equal(got[i], audio)


def test_a_stalled_step_is_kept_with_where_its_time_went(tiny, caplog):
    """A step whose device work stalls (here: collect held 200 ms) is kept in ``slow_steps`` with
    the time in its wait part, so a run of streams beside batch work can show where an underrun's
    stall was, and logged."""
    import logging
    import time

    from pipeline.engines.orpheus.serving.stats import SLOW_STEP_S, STALL_S

    class StallingRunner(ScriptedRunner):
        def __init__(self, ends, stall_at: int):
            super().__init__(ends)
            self.collected, self.stall_at = 0, stall_at

        def collect(self, launched):
            self.collected += 1
            if self.collected == self.stall_at:
                time.sleep(0.2)
            return launched

    ends = {"a": 40}
    loop = EngineLoop(
        StallingRunner(ends, stall_at=20), Scheduler(rows=2, max_context=256), tiny.codec, on_final=final_chunk
    )
    sink: queue.SimpleQueue = queue.SimpleQueue()
    caplog.set_level(logging.WARNING, logger="pipeline.engines.orpheus.serving.stats")
    try:
        began = time.monotonic()
        loop.submit([(Seq("a", [1, 2, 3], budget=100, stop_token=END_OF_SPEECH), "a")], sink)
        while not sink.get(timeout=60).final:
            pass
    finally:
        loop.close()
    stalled = [s for s in loop.stats.slow_steps if s[3] >= 0.2]
    assert len(stalled) == 1
    at, gap, launch, wait, post, live = stalled[0]
    assert began <= at and gap >= 0 and launch >= 0 and post >= 0 and live == 1
    assert gap + launch + wait + post > STALL_S > SLOW_STEP_S
    warned = [r.getMessage() for r in caplog.records if "stalled" in r.getMessage()]
    assert len(warned) == 1 and "wait for the device 2" in warned[0]  # 200-odd ms
