"""Sampling: repetition penalty, the audio-code constraint, temperature, top-k, top-p, and a draw
that depends only on the job's seed and step (rng.py), never on its batch neighbours.

Defaults are the Orpheus transformers example's (temperature 0.6, top-p 0.95, repetition penalty 1.1).
``constrain_codes`` keeps each step inside the 4096-wide range of its frame position (end-of-speech
allowed at frame boundaries): a free model emits these anyway, a random-weight model needs it to make
any audio. The order matches transformers' processors: penalty, constraint, temperature, top-k, top-p.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.constants import SNAC_TOKENS_PER_FRAME
from pipeline.engines.orpheus.vocab import END_OF_SPEECH, audio_range

_STEP_MUL = 0x632BE5AB


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.6        # 0: greedy
    top_p: float = 0.95             # 1.0: off
    top_k: int = 0                  # 0: off
    repetition_penalty: float = 1.1  # 1.0: off
    constrain_codes: bool = True
    ignore_eos: bool = False        # benchmarks with random weights: run every job to its budget

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0


def code_mask(vocab_size: int, device, dtype=None):
    """[7, V] additive mask: 0 where position p may emit the token, -inf elsewhere."""
    import torch

    mask = torch.full((SNAC_TOKENS_PER_FRAME, vocab_size), float("-inf"), device=device,
                      dtype=dtype or torch.float32)
    for p in range(SNAC_TOKENS_PER_FRAME):
        start, end = audio_range(p)
        mask[p, start:end] = 0.0
    mask[0, END_OF_SPEECH] = 0.0
    return mask


def apply_penalty(logits, seen, penalty: float):
    """transformers' rule: divide positive logits of seen tokens by ``penalty``, multiply negatives."""
    import torch

    if penalty == 1.0:
        return logits
    penalized = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalized, logits)


def candidates(device) -> list:
    """Per frame position, the token ids the constraint allows: [7] int64 tensors of 4096 (+ EOS)."""
    import torch

    out = []
    for p in range(SNAC_TOKENS_PER_FRAME):
        ids = list(range(*audio_range(p))) + ([END_OF_SPEECH] if p == 0 else [])
        out.append(torch.tensor(ids, dtype=torch.int64, device=device))
    return out


class Sampler:
    """Next tokens from raw logits. With the code constraint it works on the position's 4,097
    candidates only: the same draw as over the full vocabulary with -inf outside (the noise is keyed
    by token id), at 1/38 of the work."""

    def __init__(self, params: SamplingParams, device):
        self.params = params
        self.cands = candidates(device) if params.constrain_codes else None

    def __call__(self, logits, seen, step: int, keys):
        """logits [B, V] fp32, seen [B, V] bool, keys [B] int64 -> tokens [B] int64."""
        import torch

        p = self.params
        if self.cands is None:
            ids = torch.arange(logits.shape[-1], device=logits.device)
            scores = apply_penalty(logits, seen, p.repetition_penalty)
        else:
            ids = self.cands[step % SNAC_TOKENS_PER_FRAME]
            scores = apply_penalty(logits[:, ids], seen[:, ids], p.repetition_penalty)
        if p.ignore_eos:
            scores = scores.masked_fill(ids.view(1, -1) == END_OF_SPEECH, float("-inf"))
        return ids[draw(scores, p, keys, step, ids)]


def draw(scores, params: SamplingParams, keys, step: int, ids):
    """Indices into ``scores`` [B, C]; ``ids`` [C] are the token ids, the counters of the noise."""
    import torch

    from pipeline.engines.orpheus import rng

    if params.greedy:
        return scores.argmax(dim=-1)
    scores = _filter_top(scores / params.temperature, params)
    step_keys = (keys + step * _STEP_MUL) & rng.MASK32
    noise = rng.gumbel(step_keys.view(-1, 1), ids.view(1, -1))
    return torch.argmax(scores + noise, dim=-1)


def _filter_top(scores, params: SamplingParams):
    import torch

    if params.top_k > 0:
        kth = torch.topk(scores, min(params.top_k, scores.shape[-1]), dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
        probs = sorted_scores.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs          # mass strictly above each token
        drop_sorted = before > params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return scores
