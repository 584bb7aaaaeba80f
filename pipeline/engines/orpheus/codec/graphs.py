"""CUDA graphs for the codec's common window shapes.

SNAC's decoder is many small kernels: run eagerly it is launch-bound (and holds the GIL the model
loop needs). The streaming grid makes three window lengths common (the first chunk, realtime chunks
and batch chunks: streaming.py), so those are captured at boot for a ladder of window counts and
replayed with the codes and noise keys copied into static inputs. Other shapes (a stream's last
chunk) run eagerly.
"""

from __future__ import annotations

import bisect

import torch

from pipeline.engines.orpheus.fallbacks import capture_graphs

BATCHES = (1, 2, 4, 8, 16, 32, 64)


class CodecGraphs:
    """The decode of each (window count, window length): ``windows`` lengths for every count of
    ``BATCHES``. A failed capture says why in ``fallbacks`` (fallbacks.py) and leaves none: every
    window then decodes eagerly."""

    def __init__(self, model, keys_holder, device, windows: tuple[int, ...], fallbacks: list[str]):
        self.model, self.keys, self.device = model, keys_holder, device
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
        sizes = [b for b, ww in self.graphs if ww == w]
        if not sizes:
            return None
        with torch.inference_mode():  # the static inputs are inference tensors
            return self._replay(codes, keys, g, w, max(sizes))

    def _replay(self, codes: list, keys, g: int, w: int, largest: int):
        outs = []
        for start in range(0, g, largest):
            part = slice(start, min(g, start + largest))
            n = part.stop - part.start
            b = BATCHES[bisect.bisect_left(BATCHES, n)]
            graph = self.graphs[(b, w)]
            static_codes, static_keys = graph.inputs
            for dst, src in zip(static_codes, codes):
                dst[:n].copy_(src[part])
            static_keys[:n, 0, 0].copy_(keys[part])
            outs.append(graph.replay()[:n].clone())
        return torch.cat(outs) if len(outs) > 1 else outs[0]
