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
from pipeline.engines.orpheus.fallbacks import fall_back
from pipeline.engines.orpheus.vocab import END_OF_SPEECH, audio_range


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.6  # 0: greedy
    top_p: float = 0.95  # 1.0: off
    top_k: int = 0  # 0: off
    repetition_penalty: float = 1.1  # 1.0: off
    constrain_codes: bool = True
    ignore_eos: bool = False  # benchmarks with random weights: run every job to its budget

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0


def code_mask(vocab_size: int, device, dtype=None):
    """[7, V] additive mask: 0 where position p may emit the token, -inf elsewhere."""
    import torch

    mask = torch.full((SNAC_TOKENS_PER_FRAME, vocab_size), float("-inf"), device=device, dtype=dtype or torch.float32)
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


def draw(scores, params: SamplingParams, keys, step, ids):
    """Indices into ``scores`` [B, C]; ``ids`` [C] or [B, C] are the token ids, the counters of the
    noise; ``step`` is one int for the batch or a [B] tensor, one per row."""
    import torch

    from pipeline.engines.orpheus import rng

    if params.greedy:
        return scores.argmax(dim=-1)
    scores = _filter_top(scores / params.temperature, params)
    step_keys = (keys + step * rng.STEP_MUL) & rng.MASK32
    noise = rng.gumbel(step_keys.view(-1, 1), ids if ids.dim() == 2 else ids.view(1, -1))
    return torch.argmax(scores + noise, dim=-1)


def _filter_top(scores, params: SamplingParams):
    import torch

    if params.top_k > 0:
        kth = torch.topk(scores, min(params.top_k, scores.shape[-1]), dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
        probs = sorted_scores.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # mass strictly above each token
        drop_sorted = before > params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return scores


class RowSampler:
    """The same draw as ``Sampler`` when every row is at its own step (continuous batching), with
    no host sync, so it runs inside a captured graph.

    It takes logits over ids ``lo`` .. ``lo + Vs`` (the decoder's head slice). With the code
    constraint each row gathers the 4,097 candidates of its own frame position from a [7, C] table
    (positions 1-6 have 4,096 and one padding entry that is masked out).
    """

    def __init__(
        self,
        params: SamplingParams,
        width: int,
        lo: int,
        device,
        fused: bool | None = None,
        fallbacks: list[str] | None = None,
    ):
        """``fused``: draw with one Triton kernel (kernels/sample.py; with the code constraint and
        no top-k); None: on CUDA. A kernel that fails its first draw says why in ``fallbacks``
        (fallbacks.py), and the torch draw runs. It draws the same tokens as the torch draw, whose some 67 small
        kernels it replaces, so a decode step is shorter."""
        import torch

        if fused is None:
            fused = str(device).startswith("cuda")
        self.fused = None
        if fused and params.top_k == 0 and params.constrain_codes:
            try:
                from pipeline.engines.orpheus.kernels.sample import fused_draw
            except ImportError:  # no Triton: the torch draw
                pass
            else:
                self.fused = fused_draw
        self.params, self.lo = params, lo
        if params.constrain_codes:
            cands = candidates("cpu")
            c = max(len(x) for x in cands)
            table = torch.stack([torch.cat([x, x[:1].repeat(c - len(x))]) for x in cands]) - lo
            valid = torch.stack([torch.arange(c) < len(x) for x in cands])
        else:
            table = torch.arange(width).view(1, -1).repeat(SNAC_TOKENS_PER_FRAME, 1)
            valid = torch.ones_like(table, dtype=torch.bool)
        if table.min() < 0 or table.max() >= width:
            raise ValueError("the logits slice does not cover every candidate")
        self.table, self.valid = table.to(device), valid.to(device)  # [7, C]
        self.eos = END_OF_SPEECH - lo
        self.fallbacks = [] if fallbacks is None else fallbacks
        if self.fused is not None:  # one draw first: a kernel that fails is said, not used
            try:
                z = torch.zeros(1, dtype=torch.int64, device=device)
                self(
                    torch.zeros(1, width, device=device),
                    torch.zeros(1, width + 1, dtype=torch.bool, device=device),
                    z,
                    z,
                )
            except Exception as e:  # noqa: BLE001 - any failure means "the torch draw, say why"
                self.fused = None
                fall_back(self.fallbacks, "fused sampler", e, "torch draw")

    def __call__(self, logits, seen, steps, keys):
        """logits [B, Vs] fp32, seen [B, Vs+1] bool, steps [B] int64, keys [B] -> tokens [B]."""
        import torch

        p = self.params
        if self.fused is not None:
            return self.fused(p, self.table, self.valid, self.lo, self.eos, logits, seen, steps, keys)
        pos = steps % SNAC_TOKENS_PER_FRAME
        cand = self.table[pos]  # [B, C]
        scores = apply_penalty(logits.gather(1, cand), seen.gather(1, cand), p.repetition_penalty)
        drop = ~self.valid[pos]
        if p.ignore_eos:
            drop = drop | (cand == self.eos)
        scores = scores.masked_fill(drop, float("-inf"))
        pick = draw(scores, p, keys, steps, cand + self.lo)
        return torch.gather(cand, 1, pick.view(-1, 1)).view(-1) + self.lo
