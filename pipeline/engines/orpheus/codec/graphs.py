"""CUDA graphs for the codec's common window shapes.

SNAC's decoder is many small kernels: run eagerly it is launch-bound (and holds the GIL the model
loop needs). The streaming grid makes three window lengths common (the first chunk, realtime chunks
and batch chunks: streaming.py), so those are captured at boot for a ladder of window counts and
replayed with the codes and noise keys copied into static inputs. Other shapes (the last chunk of a
stream too short for a full window) run eagerly.

A call of ``g`` windows is split over the ladder's graphs at the least cost: a replay costs its
graph's windows, padding included, plus a fixed part. Timed on an H200 (``python -m
ops.bench.kernels codec --sweep``), a batch call of 19-frame windows takes 0.7 ms + 0.62 ms a
window, whatever its count from 1 to 64: padding a window costs as much as one asked for, and a
replay more costs about 21 frames of windows. So 17 windows go as 16 + 1 (12 ms), not padded to
24 (16 ms).
"""

from __future__ import annotations

import functools

import torch

from pipeline.engines.orpheus.fallbacks import capture_graphs

# Window counts captured (steps of at most 1.5x past 8: the batch lane's rounds hold some 10-30
# windows), and what a replay costs beyond its windows, in frames of windows (the module's text).
BATCHES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
REPLAY_COST_FRAMES = 21


@functools.lru_cache(maxsize=4096)
def split(g: int, w: int, sizes: tuple[int, ...]) -> tuple[int, ...]:
    """The graph sizes, largest first, whose replays decode ``g`` windows of ``w`` frames at the
    least cost: each costs its size (padding included) plus ``REPLAY_COST_FRAMES / w``."""
    fixed = REPLAY_COST_FRAMES / w
    cost, pick = [0.0] * (g + 1), [0] * (g + 1)
    for m in range(1, g + 1):
        cost[m], pick[m] = min((b + fixed + cost[max(0, m - b)], b) for b in sizes)
    plan, m = [], g
    while m > 0:
        plan.append(pick[m])
        m -= pick[m]
    return tuple(sorted(plan, reverse=True))


class CodecGraphs:
    """The decode of each (window count, window length): ``windows`` lengths for every count of
    ``BATCHES``. A failed capture says why in ``fallbacks`` (fallbacks.py) and leaves none: every
    window then decodes eagerly."""

    def __init__(self, model, keys_holder, device, windows: tuple[int, ...], fallbacks: list[str]):
        self.model, self.keys, self.device = model, keys_holder, device
        self.replays = 0  # graph replays, and the windows they decoded that no caller asked for
        self.padded_windows = 0
        shapes = [(g, w) for w in sorted(windows, reverse=True) for g in reversed(BATCHES)]
        try:
            self.graphs = capture_graphs(
                shapes,
                self._inputs,
                self._decode,
                device=device,
                what="codec graph capture",
                instead="decoding eagerly",
                fallbacks=fallbacks,
            )
        finally:
            self.keys.value = None

    def _inputs(self, shape: tuple[int, int]):
        """The static codes (three levels [G, w * m]) and noise keys [G, 1, 1] of a shape."""
        g, w = shape
        codes = [torch.zeros((g, w * m), dtype=torch.int64, device=self.device) for m in (1, 2, 4)]
        return codes, torch.zeros((g, 1, 1), dtype=torch.int64, device=self.device)

    def _decode(self, _shape, inputs):
        codes, keys = inputs
        self.keys.value = keys  # what the keyed noise blocks read (snac.py)
        return self.model.decode(codes)

    def decode(self, codes: list, keys):
        """codes: three [G, w*m] tensors; keys [G] -> audio [G, 1, T], or None if no graph fits."""
        g, w = codes[0].shape
        sizes = tuple(sorted(b for b, ww in self.graphs if ww == w))
        if not sizes:
            return None
        with torch.inference_mode():  # the static inputs are inference tensors
            return self._replay(codes, keys, w, split(g, w, sizes))

    def _replay(self, codes: list, keys, w: int, plan: tuple[int, ...]):
        outs, start, g = [], 0, len(keys)
        for b in plan:
            n = min(b, g - start)
            part = slice(start, start + n)
            graph = self.graphs[(b, w)]
            self.replays += 1
            self.padded_windows += b - n
            static_codes, static_keys = graph.inputs
            for dst, src in zip(static_codes, codes):
                dst[:n].copy_(src[part])
            static_keys[:n, 0, 0].copy_(keys[part])
            outs.append(graph.replay()[:n].clone())
            start += n
        return torch.cat(outs) if len(outs) > 1 else outs[0]
