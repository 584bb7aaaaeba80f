"""The reference: transformers ``generate()``, and a batched loop over transformers' cache with the
engine around it. Neither is a way the engine serves: they are the tests' oracle and the
benchmark's baseline (``python -m ops.bench.orpheus``).

``generate_batched`` keeps one transformers ``DynamicCache`` for a batch of jobs from one length
bucket: prefill on the left-padded prompts, then one decode step per token for every unfinished job.
A job leaves the batch (its cache rows are dropped) when it emits end-of-speech or reaches its
budget, and each step reports the new tokens so the caller can stream.

``ReferenceEngine`` runs it as an engine: the same admission, budgets, chunk grid and final chunks
as ``OrpheusEngine``, over length-bucketed batches one at a time, with no rows, tiers or graphs.

``reference_generate`` is the usual first approach, ``model.generate()``: one job at a time or a padded
static batch.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pipeline.constants import SNAC_TOKENS_PER_FRAME
from pipeline.engines.base import AudioChunk, Engine, SynthesisRequest
from pipeline.engines.orpheus.codec.streaming import decode_ready
from pipeline.engines.orpheus.engine import BUDGET_MAX_TOKENS, OrpheusEngine, stream_state
from pipeline.engines.orpheus.model import device as devices
from pipeline.engines.orpheus.model.sampling import Sampler, SamplingParams, code_mask
from pipeline.engines.orpheus.rng import mix_keys
from pipeline.engines.orpheus.serving.scheduler import Seq
from pipeline.engines.orpheus.vocab import END_OF_SPEECH, PAD
from pipeline.errors import EngineError

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

MAX_CONTEXT_TOKENS = 1024 + BUDGET_MAX_TOKENS // 4  # per-job KV estimate for sizing batches


@dataclass(frozen=True)
class GenJob:
    key: Hashable
    prompt: list[int]
    max_new_tokens: int
    seed: int
    realtime: bool = False


@dataclass(frozen=True)
class Step:
    tokens: list[tuple[Hashable, int]]  # one new token per job still running
    finished: list[tuple[Hashable, str]]  # (key, "eos" | "budget") ended by this step


def left_pad(prompts: list[list[int]], device):
    """[B, S] ids and attention mask, prompts aligned right so new tokens share a column."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), PAD, dtype=torch.int64)
    attn = torch.zeros((len(prompts), width), dtype=torch.int64)
    for row, p in enumerate(prompts):
        ids[row, width - len(p) :] = torch.tensor(p, dtype=torch.int64)
        attn[row, width - len(p) :] = 1
    return ids.to(device), attn.to(device)


def prefill(model, ids, attn):
    """Run the prompts; returns last-position logits [B, V] fp32, the cache, positions [B, 1]."""
    from transformers import DynamicCache

    pos = (attn.cumsum(-1) - 1).clamp(min=0)  # [B, S]
    cache = DynamicCache(config=model.config)
    out = model(
        input_ids=ids, attention_mask=attn, position_ids=pos, past_key_values=cache, use_cache=True, logits_to_keep=1
    )
    return out.logits[:, -1].float(), cache, pos[:, -1:]


def decode_step(model, tokens, attn, pos, cache):
    """One token for every row: tokens [B, 1], attn [B, S+1], pos [B, 1] -> logits [B, V] fp32."""
    out = model(input_ids=tokens, attention_mask=attn, position_ids=pos, past_key_values=cache, use_cache=True)
    return out.logits[:, -1].float()


class _Batch:
    """Device state of the running rows; ``keep`` drops finished rows everywhere at once."""

    pos: torch.Tensor  # [B, 1] positions, from the prefill on
    last: torch.Tensor  # [B] the tokens last drawn

    def __init__(self, model, jobs: list[GenJob]):
        import torch

        self.jobs = list(jobs)
        device = model.device
        self.ids, self.attn = left_pad([j.prompt for j in jobs], device)
        self.keys = torch.tensor([mix_keys(j.seed, 0) for j in jobs], device=device)
        vocab = model.config.vocab_size
        self.seen = torch.zeros((len(jobs), vocab), dtype=torch.bool, device=device)
        for row, j in enumerate(jobs):
            self.seen[row, torch.tensor(j.prompt, device=device)] = True

    def keep(self, rows: list[int], cache) -> None:
        import torch

        idx = torch.tensor(rows, device=self.attn.device)
        for layer in cache.layers:
            layer.batch_select_indices(idx)
        self.jobs = [self.jobs[r] for r in rows]
        self.attn, self.pos = self.attn[idx], self.pos[idx]
        self.seen, self.keys, self.last = self.seen[idx], self.keys[idx], self.last[idx]


def generate_batched(model, jobs: list[GenJob], params: SamplingParams) -> Iterator[Step]:
    """Generate for ``jobs`` together, yielding each step's tokens as they are drawn."""
    import torch

    b = _Batch(model, jobs)
    sampler = Sampler(params, model.device)
    with torch.inference_mode():
        logits, cache, b.pos = prefill(model, b.ids, b.attn)
        step = 0
        while b.jobs:
            b.last = sampler(logits, b.seen, step, b.keys)  # [B]
            b.seen.scatter_(1, b.last.view(-1, 1), True)
            step += 1
            tokens = b.last.tolist()
            yield_step, rows = _finish(b.jobs, tokens, step, params)
            yield yield_step
            if not rows:
                return
            if len(rows) < len(b.jobs):
                b.keep(rows, cache)
            b.attn = torch.cat([b.attn, b.attn.new_ones((b.attn.shape[0], 1))], dim=1)
            b.pos = b.pos + 1
            logits = decode_step(model, b.last.view(-1, 1), b.attn, b.pos, cache)


def _finish(jobs: list[GenJob], tokens: list[int], step: int, params: SamplingParams):
    finished, rows = [], []
    for row, (job, tok) in enumerate(zip(jobs, tokens)):
        if tok == END_OF_SPEECH and not params.ignore_eos:
            finished.append((job.key, "eos"))
        elif step >= job.max_new_tokens:
            finished.append((job.key, "budget"))
        else:
            rows.append(row)
    return Step([(j.key, t) for j, t in zip(jobs, tokens)], finished), rows


def _reference_processor(prompt_width: int, params: SamplingParams, vocab: int, device):
    from transformers import LogitsProcessor

    mask = code_mask(vocab, device)

    class CodeConstraint(LogitsProcessor):
        def __call__(self, input_ids, scores):
            position = (input_ids.shape[1] - prompt_width) % SNAC_TOKENS_PER_FRAME
            if params.constrain_codes:
                scores = scores + mask[position].to(scores.dtype)
            if params.ignore_eos:
                scores[:, END_OF_SPEECH] = float("-inf")
            return scores

    return CodeConstraint()


def reference_generate(
    model, prompts: list[list[int]], params: SamplingParams, max_new_tokens: list[int], seed: int = 0
) -> list[list[int]]:
    """transformers ``generate()`` on a padded static batch (one prompt: the one-at-a-time path).

    The batch runs until every row ended or the largest budget; each row is then cut at its own
    end-of-speech or budget, as a caller of ``generate()`` would.
    """
    import torch
    from transformers import GenerationConfig, LogitsProcessorList

    ids, attn = left_pad(prompts, model.device)
    sample = (
        {} if params.greedy else dict(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k or None)
    )
    config = GenerationConfig(
        do_sample=not params.greedy,
        max_new_tokens=max(max_new_tokens),
        repetition_penalty=params.repetition_penalty,
        eos_token_id=END_OF_SPEECH,
        pad_token_id=PAD,
        **sample,
    )
    processors = LogitsProcessorList(
        [_reference_processor(ids.shape[1], params, model.config.vocab_size, model.device)]
    )
    torch.manual_seed(seed)
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=attn, generation_config=config, logits_processor=processors)
    rows = []
    for row, budget in zip(out[:, ids.shape[1] :].tolist(), max_new_tokens):
        row = row[:budget]
        if END_OF_SPEECH in row and not params.ignore_eos:
            row = row[: row.index(END_OF_SPEECH) + 1]
        rows.append(row)
    return rows


class ReferenceEngine(OrpheusEngine):
    """``OrpheusEngine`` over ``generate_batched``: realtime jobs first, then length buckets, one
    batch at a time over transformers' cache, eager; the same chunks as the engine's to rounding.
    It takes no fp8 cache (that is our KV cache's)."""

    def _start(self, max_batch: int, budget_slack: float | None) -> tuple[int, None]:
        if self.config.kv_dtype == "fp8":
            raise ValueError(
                f"kv_dtype {self.config.kv_dtype!r} is our KV cache's: the reference loop runs transformers' cache"
            )
        self.loop = None
        model = self.lm.model
        per_seq = devices.kv_bytes_per_token(model.config, model.dtype.itemsize) * MAX_CONTEXT_TOKENS
        return devices.choose_max_batch(max_batch, self.lm.device, per_seq), None

    def _extra(self) -> dict:
        return {"loop": "reference", "kv_dtype": self.lm.choice.dtype_name, **self._device_extra(self.lm.fallbacks)}

    def synthesize(self, requests: Sequence[SynthesisRequest]) -> Iterator[AudioChunk]:
        refused, seqs = self._admit(requests)
        yield from refused
        for batch in plan_batches(seqs, self.info.max_batch):
            yield from self._run_batch(batch)

    def submit(self, requests: Sequence[SynthesisRequest], sink) -> None:
        Engine.submit(self, requests, sink)  # a thread of the call's own: there is no loop

    def _run_batch(self, batch: list[GenJob]) -> Iterator[AudioChunk]:
        streams = {j.key: stream_state(j.seed, j.realtime, self.config.realtime.first_lookahead) for j in batch}
        try:
            for step in generate_batched(self.lm.model, batch, self.params):
                for key, token in step.tokens:
                    streams[key].assembler.feed(token)
                self.stats["tokens"] += len(step.tokens)
                ended = dict(step.finished)
                for key, audio in decode_ready(self.lm.codec, streams, set(ended)).items():
                    if key not in ended:
                        yield AudioChunk(key, audio, False)
                    else:
                        yield self._final(key, streams.pop(key), ended[key], audio)
                for key in [k for k in ended if k in streams]:
                    yield self._final(key, streams.pop(key), ended[key], None)
        except Exception as e:  # a failed batch fails its unfinished jobs, loudly
            log.exception("Orpheus batch of %d failed", len(batch))
            for key in list(streams):
                err = EngineError(f"generation failed: {type(e).__name__}: {e}")
                err.__cause__ = e
                yield AudioChunk(key, np.zeros(0, np.float32), True, err)


def plan_batches(seqs: list[Seq], max_batch: int) -> list[list[GenJob]]:
    """Realtime jobs first, then length buckets: sort by prompt length and cut into batches."""
    ordered = sorted(seqs, key=lambda s: (not s.realtime, len(s.prompt)))
    jobs = [GenJob(s.key, s.prompt, s.budget, s.seed, s.realtime) for s in ordered]
    return [jobs[i : i + max_batch] for i in range(0, len(jobs), max(1, max_batch))]
