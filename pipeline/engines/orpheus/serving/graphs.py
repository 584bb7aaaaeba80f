"""CUDA graphs for the prefill of fresh short prompts.

A realtime stream arrives alone with a prompt of some 20-120 tokens, and its prefill sits on the
time-to-first-audio path. Run eagerly, the prefill launches a dozen kernels a layer from the host,
several ms over 28 layers; replayed as a graph it is one launch. A graph's shapes are fixed, so a
plan whose chunks are all whole prompts (each starts at 0 and is its prefix's last chunk) is padded
to the smallest captured (N rows, S tokens) that holds it and replayed; anything else (a chunked or
resumed prompt, a longer one, more rows) runs the eager prefill as before.

Padding is harmless by construction, through ``Decoder.prefill``'s own rules: ids past a prompt's
length write to the cache's scratch slot, and a padding row has length 0 and row 0, so it writes
only row 0's scratch slot (never attended to); its ``lens - 1`` index is -1, which indexes column
S - 1, and its logits are dropped. On the torch path attention runs over [0, S) from position 0: the
positions past a prompt's end are masked for its real queries, as they are in the eager path for
every chunk shorter than the longest. The Triton path (attention.prefill_attention) reads each
chunk's own [0, start + length) and a padding row's position 0 only.

The ladder, N in (1, 2, 4) x S in (32, 64, 128, 256), 12 graphs: a realtime prompt through the
checkpoint's Llama-3 tokenizer (some 20-120 tokens) fits S <= 128, and 256 holds long texts. Up
to about a hundred tokens a 3B prefill is bound by reading its weights (6 GB in bf16), so padding
a short prompt up costs little; past that its FLOPs count (256 tokens are 1.7 TFLOP). A checkpoint
whose tokenizer makes longer prompts asks for its own lengths (model/loading.py ServingHints: the
random ones of make-tiny, whose byte-level tokenizer makes a token a character, do). Two or three
streams may arrive in the same step; batch prompts come in larger groups and longer, off the
latency path, and stay eager. The graphs share one memory pool, captured largest first, so the
pool holds about one prefill's activations at 4 x 256 tokens.
"""

from __future__ import annotations

import bisect
import logging
import time

import torch

from pipeline.engines.orpheus.fallbacks import Graph, capture_graphs

log = logging.getLogger(__name__)

BATCHES = (1, 2, 4)
LENGTHS = (32, 64, 128, 256)


def shape_for(chunks, batches=BATCHES, lengths=LENGTHS) -> tuple[int, int] | None:
    """The smallest (N, S) of the grid that holds ``chunks`` (PrefillChunk), or None: a chunk that is
    not a whole prompt (start > 0: chunked or resumed; not last: more of it comes later), or too
    many chunks or too long a prompt for the grid."""
    if not chunks or any(c.start != 0 or not c.last for c in chunks):
        return None
    i = bisect.bisect_left(batches, len(chunks))
    j = bisect.bisect_left(lengths, max(c.end for c in chunks))
    if i == len(batches) or j == len(lengths):
        return None
    return batches[i], lengths[j]


def pack(chunks, n: int, s: int) -> torch.Tensor:
    """A graph's input on the host, [n, s + 2] int64: per row its prompt's ids right-padded with 0,
    its length, its cache row. Padding rows are all zeros: length 0, row 0 (see the module doc)."""
    host = torch.zeros((n, s + 2), dtype=torch.int64)
    for i, c in enumerate(chunks):
        host[i, : c.end] = torch.tensor(c.seq.prefix[: c.end])
        host[i, s], host[i, s + 1] = c.end, c.seq.row
    return host


def padded_prefill(decoder, packed):
    """``decoder.prefill`` of a packed input [N, S + 2] (``pack``): every row from position 0,
    attending over [0, S). Returns logits [N, Vs] fp32; a padding row's are garbage."""
    s = packed.shape[1] - 2
    ids, lens, rows = packed[:, :s], packed[:, s], packed[:, s + 1]  # [N, S], [N], [N]
    return decoder.prefill(ids, torch.zeros_like(lens), lens, rows, s)


def replay_packed(graph: Graph, host: torch.Tensor) -> torch.Tensor:
    """Copy ``host`` (``pack``'s output, the graph's shape) into a captured prefill's (or
    runner.py's mixed step's) static input, replay; its logits [N, Vs] fp32. Queues device work
    only: the caching host allocator keeps the pinned block until the copy ran."""
    graph.inputs.copy_(host.pin_memory(), non_blocking=True)
    return graph.replay()


class PrefillGraphs:
    """Prefill graphs over ``decoder`` for the grid ``batches`` x ``lengths`` (cut to the cache's rows
    and context). ``capture=False`` (the CPU, tests): the same padded prefill runs eagerly. A failed
    capture says why in ``fallbacks`` (fallbacks.py); every prefill then runs eagerly."""

    def __init__(
        self, decoder, batches=BATCHES, lengths=LENGTHS, capture: bool = True, fallbacks: list[str] | None = None
    ):
        cache = decoder.cache
        self.decoder, self.device = decoder, cache.k.device
        self.batches = tuple(sorted({min(b, cache.k.shape[1]) for b in batches}))
        self.lengths = tuple(s for s in sorted(lengths) if s <= cache.context)
        self.graphs: dict[tuple[int, int], Graph] = {}
        self.fallbacks = [] if fallbacks is None else fallbacks
        self.capture_s = 0.0
        self.bytes = 0  # the pool and the static buffers
        if capture:
            self._capture_all()

    def shape(self, chunks) -> tuple[int, int] | None:
        return shape_for(chunks, self.batches, self.lengths)

    def run(self, chunks):
        """Logits [len(chunks), Vs] fp32 of a plan's prefill chunks, from the smallest shape that
        holds them; None where none does (the caller runs the eager prefill). Queues device work
        only: the input goes through pinned memory, and nothing waits for the device."""
        shape = self.shape(chunks)
        if shape is None:
            return None
        host = pack(chunks, *shape)
        with torch.inference_mode():
            if not self.graphs:
                return padded_prefill(self.decoder, self._h2d(host))[: len(chunks)]
            return replay_packed(self.graphs[shape], host)[: len(chunks)]

    def _h2d(self, host):
        if self.device.type != "cuda":
            return host.to(self.device)
        return host.pin_memory().to(self.device, non_blocking=True)

    def _capture_all(self) -> None:
        started = time.monotonic()
        torch.cuda.empty_cache()
        before = torch.cuda.memory_reserved(self.device)
        shapes = sorted(
            ((n, s) for n in self.batches for s in self.lengths), key=lambda ns: ns[0] * ns[1], reverse=True
        )  # largest first

        def padding(shape):  # all padding rows: warm-up and capture write only row 0's scratch slot
            return torch.zeros((shape[0], shape[1] + 2), dtype=torch.int64, device=self.device)

        self.graphs = capture_graphs(
            shapes,
            padding,
            lambda _shape, packed: padded_prefill(self.decoder, packed),
            device=self.device,
            what="prefill graph capture",
            instead="prefilling eagerly",
            fallbacks=self.fallbacks,
        )
        if not self.graphs:
            self.batches = self.lengths = ()
        torch.cuda.empty_cache()  # the warm-ups' blocks; the pool stays with its graphs
        self.bytes = max(0, torch.cuda.memory_reserved(self.device) - before)
        self.capture_s = time.monotonic() - started
        if self.graphs:
            log.info(
                "captured %d prefill graphs (N %s x S %s) in %.2f s, %.0f MiB",
                len(self.graphs),
                self.batches,
                self.lengths,
                self.capture_s,
                self.bytes / 2**20,
            )
