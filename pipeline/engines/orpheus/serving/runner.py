"""The model runner: device state per cache row, prefill, and the decode step as CUDA graphs.

Per row the device holds the last token, its write position, the tokens generated so far, the
sampling key and the repetition mask. The decode step reads and updates them in place: it embeds the
last tokens, runs the decoder, samples, and advances the active rows, with no host sync. At boot the
runner captures that step as a CUDA graph for every batch size of a ladder, largest first in one
memory pool; a step replays the smallest graph that fits. Each row's attention reads its own context
there (kernels/attention.py), so a graph attends over the whole row and one per batch size serves
every length. On the CPU, or when capture fails (the reason is logged and kept), the same step runs
eagerly.

A step that completes one short prompt and decodes rows up to ``MIXED_BATCHES[-1]`` (a stream
arriving beside the others) runs both in one pass (``Decoder.mixed``), replayed from a graph per
(batch, prompt length) captured at boot: the prompt's tokens ride in the decode step's GEMMs
instead of a prefill of their own. ``SYNTH_ORPHEUS_DISABLE=mixed_steps`` prefills separately.
"""

from __future__ import annotations

import bisect
import logging
import time

import torch

from pipeline.engines.orpheus.config import Switches
from pipeline.engines.orpheus.fallbacks import Graph, capture_graphs
from pipeline.engines.orpheus.kernels import attention, fused
from pipeline.engines.orpheus.model.decoder import Decoder
from pipeline.engines.orpheus.model.kv_cache import KVCache
from pipeline.engines.orpheus.model.sampling import RowSampler, SamplingParams
from pipeline.engines.orpheus.rng import mix_keys
from pipeline.engines.orpheus.serving.graphs import LENGTHS as PREFILL_LENGTHS
from pipeline.engines.orpheus.serving.graphs import PrefillGraphs, pack, replay_packed, shape_for
from pipeline.engines.orpheus.serving.launched import HostTimes, LaunchedStep
from pipeline.engines.orpheus.serving.scheduler import Plan

log = logging.getLogger(__name__)


# The CUDA stream priority of the language model's steps (lower is more urgent; 0: the default
# stream, as the codec's batch windows). The codec renders realtime windows at the highest
# priority and batch windows at 0; the decode step sits between, so batch windows fill the
# step's gaps instead of slowing it. ``SYNTH_ORPHEUS_DISABLE=stream_priority`` runs the steps on
# the default stream.
LM_STREAM_PRIORITY = -1

# Mixed steps (the module): the decode batches they run at (a step over fewer rows pads up: an
# idle row costs a small fraction of a step, whose time is mostly reading the weights) and, per
# batch, one graph for each prompt length of the prefill graphs' ladder (graphs.LENGTHS):
# 24 graphs.
MIXED_BATCHES = (8, 16, 32, 64, 96, 128)


BATCH_LADDER = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 80, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512)
# Where attention runs as SDPA over [0, L) (the CPU, eager), L is the step's longest row rounded up
# to a multiple of this (or the full context).
LENGTH_STEP = 256
ACTIVE_MASKS = 4  # row sets whose active masks stay in host memory (ModelRunner._activate)


def ladder(limit: int) -> list[int]:
    sizes = [b for b in BATCH_LADDER if b < limit]
    return sizes + [limit]


class ModelRunner:
    def __init__(
        self,
        model,
        rows: int,
        context: int,
        params: SamplingParams,
        logits_lo: int = 0,
        use_graphs: bool = True,
        kv_dtype: str | None = None,
        switches: Switches = Switches(),
        fallbacks: list[str] | None = None,
        kv_range=None,
        prefill_lengths: tuple[int, ...] = PREFILL_LENGTHS,
    ):
        """``switches``: which of the faster paths run (config.py); all, by default.
        ``fallbacks``: the list where the paths that fell back say why (fallbacks.py).
        ``kv_range``: an fp8 cache's scales (model/kv_scales.py KVRange); None: 1.
        ``prefill_lengths``: the prompt lengths of the prefill graphs and the mixed steps."""
        self.fallbacks = [] if fallbacks is None else fallbacks
        cfg, device = model.config, model.device
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.device, self.rows, self.context = device, rows, context
        self.cache = KVCache(
            cfg.num_hidden_layers,
            rows,
            cfg.num_key_value_heads,
            context,
            head_dim,
            model.dtype,
            device,
            kv_dtype,
            *((kv_range.k_scale, kv_range.v_scale) if kv_range else ()),
        )
        self.decoder = Decoder(
            model,
            self.cache,
            logits_lo,
            ops=fused.ops_for(device, switches.fused_ops),
            prefill_attention=switches.prefill_attention,
        )
        width = self.decoder.logits_width
        self.sampler = RowSampler(
            params, width, logits_lo, device, fused=None if switches.fused_sampler else False, fallbacks=self.fallbacks
        )
        self.lo, self.width = logits_lo, width
        self._allocate_rows(rows, width, device)
        self._cuda = str(device).startswith("cuda")
        # Each row's attention over its own context (the Triton kernel, on CUDA); elsewhere SDPA
        # over the step's longest row, which reads an fp8 cache converted slice by slice.
        self.per_row = attention.available(device)
        self.capture_s = 0.0
        self.host = HostTimes()
        self._plan_graphs(rows, context, switches, prefill_lengths)
        if use_graphs and str(device).startswith("cuda"):
            self._capture_all()
            self._capture_prefill()
            self._capture_mixed()
        priority = LM_STREAM_PRIORITY if self._cuda and switches.stream_priority else 0
        # The steps' stream (None: the current one); launch() orders it after the current stream.
        self.stream = torch.cuda.Stream(device, priority=priority) if priority else None

    def _allocate_rows(self, rows: int, width: int, device) -> None:
        """Each row's state on the device: the graphs read and write these tensors in place."""
        i64 = dict(dtype=torch.int64, device=device)
        self.tokens = torch.zeros(rows, **i64)  # the last token of each row
        self.pos = torch.zeros(rows, **i64)  # where that token is written next step
        self.steps = torch.zeros(rows, **i64)  # tokens generated (the sampler's step)
        self.keys = torch.zeros(rows, **i64)
        self.seen = torch.zeros(rows, width + 1, dtype=torch.bool, device=device)  # +1: idle rows
        self.active = torch.zeros(rows, dtype=torch.bool, device=device)
        self._active_rows: tuple[int, ...] = ()  # the rows ``active`` marks (once queued)
        self._masks: dict[tuple[int, ...], torch.Tensor] = {}  # row set -> its host mask, LRU

    def _plan_graphs(self, rows: int, context: int, switches: Switches, prefill_lengths: tuple[int, ...]) -> None:
        """The batch sizes and prompt lengths the graphs are captured at (none captured yet)."""
        self.batch_sizes = ladder(rows)
        self.graphs: dict[tuple[int, int], Graph] = {}
        self.prefill_graphs: PrefillGraphs | None = None
        # Mixed steps: on the CPU they run eagerly, on CUDA only from their graphs.
        self.mixed_sizes = tuple(sorted({min(b, rows) for b in MIXED_BATCHES})) if switches.mixed_steps else ()
        self.prefill_lengths = prefill_lengths
        self.mixed_lengths = tuple(s for s in prefill_lengths if s <= context)
        self.mixed_graphs: dict[tuple[int, int], Graph] = {}  # output: the prompt's logits
        self.mixed_steps = 0

    def padded_batch(self, rows: int) -> int:
        """The graph batch size a step over ``rows`` rows runs at."""
        return self.batch_sizes[bisect.bisect_left(self.batch_sizes, rows)]

    # The step -----------------------------------------------------------------------------------

    def _length(self, need: int) -> int:
        """The attention length a step runs at: the whole row on CUDA, where the graphs are
        captured at it (and the per-row kernel reads each row's own part); elsewhere the step's
        longest row ``need``, rounded up to LENGTH_STEP."""
        if self._cuda:
            return self.context
        return min(self.context, -(-max(1, need) // LENGTH_STEP) * LENGTH_STEP)

    def _step(self, b: int, length: int) -> None:
        act = self.active[:b]
        wpos = torch.where(act, self.pos[:b], self.cache.scratch)
        logits = self.decoder.decode(self.tokens[:b], wpos, length, self.per_row)  # [B, Vs]
        self._advance(b, act, logits)

    def _step_mixed(self, b: int, length: int, packed):
        """``_step`` with one whole prompt, packed [1, S + 2] (graphs.pack), in the same
        pass; returns the prompt's logits [1, Vs]. Its row must not be active."""
        act = self.active[:b]
        wpos = torch.where(act, self.pos[:b], self.cache.scratch)
        s = packed.shape[1] - 2
        ids, lens, rows = packed[:, :s], packed[:, s], packed[:, s + 1]
        logits, first = self.decoder.mixed(
            self.tokens[:b], wpos, length, self.per_row, ids, torch.zeros_like(lens), lens, rows, s
        )
        self._advance(b, act, logits)
        # A copy: a graph's output keeps its tensor alive, and the decode rows' logits need not
        # stay (36 graphs of up to 129 rows of logits: about 240 MB for Orpheus).
        return first.clone()

    def _advance(self, b: int, act, logits) -> None:
        """Draw the active rows' next tokens from ``logits`` [B, Vs] and move them on a position."""
        new = self.sampler(logits, self.seen[:b], self.steps[:b], self.keys[:b])
        self.tokens[:b] = torch.where(act, new, self.tokens[:b])
        mark = torch.where(act, new - self.lo, self.width).view(-1, 1)
        self.seen[:b].scatter_(1, mark, True)
        self.pos[:b] += act
        self.steps[:b] += act

    def _capture_all(self) -> None:
        """The decode step's graphs, after two warm-ups at the largest and the smallest batch."""
        started = time.monotonic()
        self.active.zero_()  # capture with every row idle: no state changes
        self._active_rows = ()
        big, small = (self.batch_sizes[-1], self.context), (self.batch_sizes[0], self.context)

        def warm_up() -> None:
            for _ in range(2):
                self._step(*big)
                self._step(*small)

        shapes = [(b, self.context) for b in reversed(self.batch_sizes)]
        self.graphs = capture_graphs(
            shapes,
            lambda shape: None,
            lambda shape, _: self._step(*shape),
            device=self.device,
            what="CUDA graph capture",
            instead="running eagerly",
            fallbacks=self.fallbacks,
            warm_up=warm_up,
        )
        self.capture_s = time.monotonic() - started
        if self.graphs:
            log.info("captured %d decode graphs in %.1f s", len(self.graphs), self.capture_s)

    # What the engine calls ----------------------------------------------------------------------

    def run(self, plan: Plan) -> dict[int, list[int]]:
        """Carry out one plan; returns row -> tokens produced this step."""
        return self.collect(self.launch(plan))

    def launch(self, plan: Plan) -> LaunchedStep:
        """Queue one plan's device work (moves, prefill, the decode step) without waiting for it,
        on the runner's stream (after whatever the caller's stream has queued)."""
        if self.stream is None:
            return self._launch(plan)
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            return self._launch(plan)

    def _launch(self, plan: Plan) -> LaunchedStep:
        host, clock = self.host, time.perf_counter
        t0 = clock()
        start = torch.cuda.Event(enable_timing=True) if self._cuda else None
        if start is not None:
            start.record()
        with torch.inference_mode():
            for src, dst, length in plan.moves:
                self._move(src, dst, length)
            t1 = clock()
            rows = [s.row for s in plan.decode]
            mixed = self._mixed_shape(plan) if rows and plan.prefill else None
            first_rows, first = self._prefill(plan) if plan.prefill and not mixed else ([], None)
            prefilled = None
            if start is not None and (plan.prefill or plan.moves) and not mixed:
                prefilled = torch.cuda.Event(enable_timing=True)
                prefilled.record()
            t2, begin = clock(), host.begin
            if mixed:
                b, first_rows, first = self._decode_mixed(plan, rows, *mixed)
            else:
                b = self._decode(plan, rows)
            t3 = clock()
            decoded = self._d2h(self.tokens[:b]) if b else None
            first_host = self._d2h(first) if first is not None else None
            done = torch.cuda.Event(enable_timing=True) if self._cuda else None
            if done is not None:
                done.record()
        t4 = clock()
        begin = host.begin - begin  # a mixed step's first tokens: counted as its prefill's
        host.moves += t1 - t0
        host.prefill += t2 - t1 + begin
        host.decode += t3 - t2 - begin
        host.copies += t4 - t3
        return LaunchedStep(rows, decoded, first_rows, first_host, done, start, prefilled)

    def _decode(self, plan: Plan, rows: list[int]) -> int:
        """The decode step over ``rows``, replayed from the smallest graph that fits (eager where
        none does); returns the batch it ran at (0: no rows)."""
        if not rows:
            return 0
        b = self.padded_batch(plan.rows)
        length = self._length(plan.context)
        self._activate(rows)
        graph = self.graphs.get((b, length))
        if graph is not None:
            graph.replay()
        else:
            self._step(b, length)
        return b

    def collect(self, launched: LaunchedStep) -> dict[int, list[int]]:
        """Wait for a launched step; returns row -> tokens it produced."""
        if launched.done is not None:
            launched.done.synchronize()
        out: dict[int, list[int]] = {}
        if launched.decoded is not None:
            tokens = launched.decoded.tolist()
            out = {r: [tokens[r]] for r in launched.rows}
        if launched.first is not None:
            for row, tok in zip(launched.first_rows, launched.first.tolist()):
                out.setdefault(row, []).append(tok)
        return out

    def _activate(self, rows: list[int]) -> None:
        """Mark ``rows`` as the ones that decode (``self.active``), without waiting for the device.

        Most steps decode the rows of the step before, or alternate between all rows and the
        realtime tier, so the mask is copied only when the set differs from the last one queued
        (nothing else writes ``active`` after boot), from a mask kept for each of the last few
        sets. A kept mask is never written again, so a copy still queued from it is never raced;
        on the GPU it is pinned, and the caching host allocator holds a dropped one until its
        copies have run."""
        key = tuple(rows)
        if key == self._active_rows:
            return
        mask = self._masks.pop(key, None)
        if mask is None:
            mask = torch.zeros(self.rows, dtype=torch.bool, pin_memory=self._cuda)
            mask.numpy()[rows] = True
            if len(self._masks) >= ACTIVE_MASKS - 1:
                del self._masks[next(iter(self._masks))]  # the least recently used
        self._masks[key] = mask
        self.active.copy_(mask, non_blocking=True)
        self._active_rows = key

    def _h2d(self, host):
        """A host tensor onto the device without waiting for the device: staged in pinned memory
        (the caching host allocator keeps it until the copy has run), copied on the stream. A plain
        ``.to(device)`` would wait for every step queued before it, and the loop launches step N+1
        while step N runs."""
        if not self._cuda:
            return host.to(self.device)
        return host.pin_memory().to(self.device, non_blocking=True)

    def _d2h(self, device_tensor):
        """A copy on the host, filled when the step's event has fired (on the CPU: now). A copy,
        not a view: the next step, launched before this one is collected, changes the original."""
        if not self._cuda:
            return device_tensor.clone()
        return device_tensor.to("cpu", non_blocking=True)

    def _move(self, src: int, dst: int, length: int) -> None:
        self.cache.move(src, dst, min(length, self.context))
        for t in (self.tokens, self.pos, self.steps, self.keys, self.seen):
            t[dst] = t[src]

    def _capture_prefill(self) -> None:
        self.prefill_graphs = PrefillGraphs(self.decoder, lengths=self.prefill_lengths, fallbacks=self.fallbacks)

    def _prefill(self, plan: Plan):
        chunks = plan.prefill
        # Whole short prompts replay a captured prefill (graphs.py); the rest runs eagerly.
        logits = self.prefill_graphs.run(chunks) if self.prefill_graphs is not None else None
        if logits is None:
            logits = self._prefill_eager(chunks)  # [N, Vs]
        return self._first_tokens(chunks, logits)

    def _first_tokens(self, chunks, logits):
        """Set up the rows whose prompt a step completed and draw their first tokens from their
        chunks' logits [N, Vs]: (rows, first tokens) or ([], None)."""
        n = len(chunks)
        done = [i for i, c in enumerate(chunks) if c.last]
        if not done:
            return [], None
        t0 = time.perf_counter()
        seqs = [chunks[i].seq for i in done]
        if len(done) < n:
            logits = logits[self._h2d(torch.tensor(done))]
        first = self._begin(seqs, logits)
        self.host.begin += time.perf_counter() - t0
        return [s.row for s in seqs], first

    # Mixed steps ---------------------------------------------------------------------------------

    def _mixed_shape(self, plan: Plan) -> tuple[int, int] | None:
        """(decode batch, prompt length) of the mixed step a plan runs as, or None: not one whole
        short prompt, too many rows, or (on CUDA) no graph for it."""
        if not self.mixed_sizes or plan.rows > self.mixed_sizes[-1]:
            return None
        shape = shape_for(plan.prefill, (1,), self.mixed_lengths)
        if shape is None:
            return None
        b = self.mixed_sizes[bisect.bisect_left(self.mixed_sizes, plan.rows)]
        if self._cuda and (b, shape[1]) not in self.mixed_graphs:
            return None
        return b, shape[1]

    def _decode_mixed(self, plan: Plan, rows: list[int], b: int, s: int):
        """The decode step over ``rows`` at batch ``b`` with the plan's prompt (padded to ``s``
        tokens) in the same pass: (b, rows whose prompt completed, their first tokens)."""
        self._activate(rows)
        host = pack(plan.prefill, 1, s)
        graph = self.mixed_graphs.get((b, s))
        if graph is not None:
            logits = replay_packed(graph, host)
        else:
            logits = self._step_mixed(b, self._length(plan.context), self._h2d(host))
        self.mixed_steps += 1
        return (b, *self._first_tokens(plan.prefill, logits))

    def _capture_mixed(self) -> None:
        """A graph per (mixed batch, prompt length), largest first in one pool; on CUDA, where the
        decode graphs exist and attention runs per row."""
        if not self.mixed_sizes or not self.graphs or not self.per_row:
            return
        started = time.monotonic()
        self.active.zero_()  # every row idle, so capture changes no row's state
        self._active_rows = ()
        lengths = self.mixed_lengths
        shapes = [(b, s) for b in reversed(self.mixed_sizes) for s in reversed(lengths)]

        def padding(shape):  # padding only: the prompt writes row 0's scratch slot (graphs.py)
            return torch.zeros((1, shape[1] + 2), dtype=torch.int64, device=self.device)

        self.mixed_graphs = capture_graphs(
            shapes,
            padding,
            lambda shape, packed: self._step_mixed(shape[0], self.context, packed),
            device=self.device,
            what="mixed step capture",
            instead="prefilling in steps of their own",
            fallbacks=self.fallbacks,
        )
        torch.cuda.empty_cache()  # the warm-ups' blocks; the pool stays with its graphs
        took = time.monotonic() - started
        self.capture_s += took
        log.info(
            "captured %d mixed graphs (batches %s x prompts %s) in %.1f s",
            len(self.mixed_graphs),
            self.mixed_sizes,
            lengths,
            took,
        )

    def _prefill_eager(self, chunks):
        """The chunks, right-padded to the longest, through ``decoder.prefill``: logits [N, Vs]."""
        n, width = len(chunks), max(c.end - c.start for c in chunks)
        ids = torch.zeros((n, width), dtype=torch.int64)
        for i, c in enumerate(chunks):
            ids[i, : c.end - c.start] = torch.tensor(c.seq.prefix[c.start : c.end])
        meta = torch.tensor([[c.start, c.end - c.start, c.seq.row] for c in chunks]).T  # [3, N]
        start, lens, rows = self._h2d(meta.contiguous())
        length = max(c.end for c in chunks)
        return self.decoder.prefill(self._h2d(ids), start, lens, rows, length)

    def _begin(self, seqs, logits):
        """Set up the rows of sequences whose prompt is complete and draw their first tokens."""
        # rows, tokens already generated (> 0 after a preemption), sampling key, next position;
        # an even width, so each row starts 16-byte aligned: Triton compiles a kernel variant per
        # pointer alignment, and an odd count of prompts would cost the fused sampler a compile
        # in the middle of serving, on the loop thread while streams wait.
        n = len(seqs)
        meta = torch.zeros((4, n + n % 2), dtype=torch.int64)
        meta[:, :n] = torch.tensor([[s.row, s.generated, mix_keys(s.seed, 0), len(s.prefix)] for s in seqs]).T
        rows, done, keys, pos = self._h2d(meta)[:, :n]
        self.keys[rows] = keys
        seen = torch.zeros((len(seqs), self.width + 1), dtype=torch.bool)
        for i, s in enumerate(seqs):
            ids = [t - self.lo for t in s.prefix if self.lo <= t < self.lo + self.width]
            seen[i, ids] = True
        seen = self._h2d(seen)
        first = self.sampler(logits, seen, done, keys)
        # scatter_, not seen[arange, first - lo] = True: that index_put_ waits for the device,
        # and this runs while the step before is still on it.
        seen.scatter_(1, (first - self.lo).view(-1, 1), True)
        self.seen[rows] = seen
        self.tokens[rows] = first
        self.pos[rows] = pos
        self.steps[rows] = done + 1
        return first
