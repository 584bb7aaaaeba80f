"""The engine loop thread with a scripted runner (the runner's interface, tokens chosen by the test)
and the real codec: sequences that end on end-of-speech while the next step is already in flight."""

from __future__ import annotations

import queue

import numpy as np

from pipeline.engines.base import AudioChunk
from pipeline.engines.orpheus.loop import EngineLoop
from pipeline.engines.orpheus.scheduler import Scheduler, Seq
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
        n = seq.generated + seq.inflight          # this token's number (1-based): counted at schedule
        if n == self.ends[seq.key]:
            return END_OF_SPEECH
        return audio_range((n - 1) % 7)[0] + n % 100


def test_sequences_ending_on_end_of_speech_under_overlap_finish_once(tiny):
    ends = {"a": 15, "b": 29, "c": 22}              # a and b end at a frame boundary, c mid-frame
    loop = EngineLoop(ScriptedRunner(ends), Scheduler(rows=2, max_context=256), tiny.codec,
                      on_final=lambda live, audio: AudioChunk(
                          live.key, np.zeros(0, np.float32) if audio is None else audio, True))
    sink: queue.SimpleQueue = queue.SimpleQueue()
    try:
        loop.submit([(Seq(k, [1, 2, 3], budget=100, stop_token=END_OF_SPEECH), k) for k in ends], sink)
        finals = {}
        while len(finals) < len(ends):
            chunk = sink.get(timeout=60)
            assert chunk.error is None, chunk.error
            if chunk.final:
                assert chunk.key not in finals          # one final chunk per sequence
                finals[chunk.key] = chunk
    finally:
        loop.close()
    assert loop.stats.tokens == sum(ends.values())    # the tokens drawn after an end were dropped
    assert not loop.live and loop.stats.oom_events == 0
