"""CUDA graphs for the codec's common window shapes.

SNAC's decoder is many small kernels: run eagerly it is launch-bound (and holds the GIL the model
loop needs). The streaming grid makes three window lengths common (the first chunk, realtime chunks
and batch chunks: streaming.py), so those are captured at boot for a ladder of window counts and
replayed with the codes and noise keys copied into static inputs. Other shapes (a stream's last
chunk) run eagerly.
"""

from __future__ import annotations

import bisect
import logging

import torch

log = logging.getLogger(__name__)

BATCHES = (1, 2, 4, 8, 16, 32, 64)


class CodecGraphs:
    def __init__(self, model, keys_holder, device, windows: tuple[int, ...]):
        self.model, self.keys, self.device = model, keys_holder, device
        self.graphs: dict[tuple[int, int], tuple] = {}
        self.fallback: str | None = None
        pool = torch.cuda.graph_pool_handle()
        try:
            with torch.inference_mode():
                for w in sorted(windows, reverse=True):
                    for g in reversed(BATCHES):
                        self.graphs[(g, w)] = self._capture(g, w, pool)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - any capture failure means "decode eagerly, say why"
            self.graphs.clear()
            self.fallback = f"codec graph capture failed ({type(e).__name__}: {e}); decoding eagerly"
            log.warning(self.fallback)
        finally:
            self.keys.value = None

    def _capture(self, g: int, w: int, pool):
        codes = [torch.zeros((g, w * m), dtype=torch.int64, device=self.device) for m in (1, 2, 4)]
        keys = torch.zeros((g, 1, 1), dtype=torch.int64, device=self.device)
        self.keys.value = keys
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.model.decode(codes)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            out = self.model.decode(codes)
        return graph, codes, keys, out

    def decode(self, codes: list, keys):
        """codes: three [G, w*m] tensors; keys [G] -> audio [G, 1, T], or None if no graph fits."""
        g, w = codes[0].shape
        sizes = [b for b, ww in self.graphs if ww == w]
        if not sizes:
            return None
        with torch.inference_mode():           # the static inputs are inference tensors
            return self._replay(codes, keys, g, w, max(sizes))

    def _replay(self, codes: list, keys, g: int, w: int, largest: int):
        outs = []
        for start in range(0, g, largest):
            part = slice(start, min(g, start + largest))
            n = part.stop - part.start
            b = BATCHES[bisect.bisect_left(BATCHES, n)]
            graph, static_codes, static_keys, out = self.graphs[(b, w)]
            for dst, src in zip(static_codes, codes):
                dst[:n].copy_(src[part])
            static_keys[:n, 0, 0].copy_(keys[part])
            graph.replay()
            outs.append(out[:n].clone())
        return torch.cat(outs) if len(outs) > 1 else outs[0]
