"""Our forward pass over a transformers Llama checkpoint, with a preallocated KV cache.

The modules are the checkpoint's own (embedding, norms, projections, MLP, rotary tables), so the
weights are loaded once and a quantized swap of the linear layers (quant.py) applies here too. What
is ours is the shape of the computation, as in gpt-fast: a static cache with one row per sequence,
prefill of prompt chunks separate from the one-token decode step, and no host work inside the step,
so the step can be captured as a CUDA graph.

The language-model head is computed only for the ids the sampler can pick (``logits_lo`` .. vocab:
the audio codes, end-of-speech and the control tokens), a sixth of the vocabulary: the head's weight
is 15% of Orpheus-3B's bytes, read every step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pipeline.engines.orpheus import attention


class KVCache:
    """Keys and values for ``rows`` sequences of up to ``context`` tokens, for every layer.

    Position ``context`` is a scratch slot: rows that are not decoding write there, and it is
    never attended to, so the captured step needs no branch for idle rows.
    """

    def __init__(self, layers: int, rows: int, kv_heads: int, context: int, head_dim: int,
                 dtype, device):
        shape = (layers, rows, kv_heads, context + 1, head_dim)   # [L, R, Hkv, T+1, D]
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.context = context
        self.scratch = context

    @staticmethod
    def bytes_per_row(layers: int, kv_heads: int, context: int, head_dim: int, itemsize: int) -> int:
        return 2 * layers * kv_heads * (context + 1) * head_dim * itemsize

    def move(self, src: int, dst: int, length: int) -> None:
        """Copy a sequence's first ``length`` positions from row ``src`` to row ``dst``."""
        self.k[:, dst, :, :length] = self.k[:, src, :, :length]
        self.v[:, dst, :, :length] = self.v[:, src, :, :length]


def _rotate(x, cos, sin):
    """Rotary embedding as transformers applies it (rotate_half); cos/sin broadcast to x."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Decoder:
    def __init__(self, model, cache: KVCache, logits_lo: int = 0):
        inner = model.model
        cfg = model.config
        self.embed, self.layers, self.norm = inner.embed_tokens, inner.layers, inner.norm
        self.heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.scale = self.head_dim ** -0.5
        self.cache = cache
        device = self.embed.weight.device
        # The checkpoint's own rotary module makes the tables (rope scaling included), once.
        positions = torch.arange(cache.context + 1, device=device).view(1, -1)
        probe = torch.zeros(1, device=device, dtype=self.embed.weight.dtype)
        cos, sin = inner.rotary_emb(probe, positions)                 # [1, T+1, D]
        self.cos, self.sin = cos[0], sin[0]                           # [T+1, D]
        self.key_pos = torch.arange(cache.context + 1, device=device)  # [T+1]
        self.head_w = model.lm_head.weight[logits_lo:]                # [Vs, H] view, tied or not
        self.logits_lo = logits_lo

    @property
    def logits_width(self) -> int:
        return self.head_w.shape[0]

    def _qkv(self, attn, h, b: int, s: int):
        q = attn.q_proj(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)     # [B, H, S, D]
        k = attn.k_proj(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)  # [B, Hkv, S, D]
        v = attn.v_proj(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        return q, k, v

    def decode(self, tokens, wpos, length: int, per_row: bool = False):
        """One token for rows ``0 .. B-1``: tokens [B], write positions [B] (scratch for idle rows);
        attends over cache positions [0, length), or with ``per_row`` over each row's own
        [0, wpos] (attention.py). Returns logits [B, Vs] fp32."""
        b = tokens.shape[0]
        lens = torch.where(wpos == self.cache.scratch, 1, wpos + 1) if per_row else None
        rows = torch.arange(b, device=tokens.device)
        cos = self.cos[wpos].view(b, 1, 1, -1)                             # [B, 1, 1, D]
        sin = self.sin[wpos].view(b, 1, 1, -1)
        mask = (self.key_pos[:length].view(1, -1) <= wpos.view(-1, 1)).view(b, 1, 1, length)
        x = self.embed(tokens).unsqueeze(1)                                # [B, 1, H]
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            q, k, v = self._qkv(attn, layer.input_layernorm(x), b, 1)
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
            kc, vc = self.cache.k[i], self.cache.v[i]                      # [R, Hkv, T+1, D]
            kc[rows, :, wpos] = k[:, :, 0]
            vc[rows, :, wpos] = v[:, :, 0]
            # The query heads of one KV head, all at the same position, go in as its queries:
            # [B, Hkv, G, D] against [B, Hkv, L, D], so K and V are read once, never repeated.
            q = q.view(b, self.kv_heads, -1, self.head_dim)
            if per_row:
                o = attention.decode_attention(q, kc, vc, lens, self.scale)
            else:
                o = F.scaled_dot_product_attention(q, kc[:b, :, :length], vc[:b, :, :length],
                                                   attn_mask=mask, scale=self.scale)
            x = x + attn.o_proj(o.reshape(b, 1, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return F.linear(self.norm(x[:, 0]), self.head_w).float()

    def prefill(self, ids, start, lens, rows, length: int):
        """Prompt chunks into the cache: ids [N, S] (right-padded), start [N] (first position),
        lens [N] (valid ids), rows [N] (cache rows); attends over [0, length). Returns the logits
        of each chunk's last valid position, [N, Vs] fp32."""
        n, s = ids.shape
        col = torch.arange(s, device=ids.device).view(1, -1)
        positions = start.view(-1, 1) + col                               # [N, S]
        wpos = torch.where(col < lens.view(-1, 1), positions, self.cache.scratch)
        cos, sin = self.cos[wpos].unsqueeze(1), self.sin[wpos].unsqueeze(1)  # [N, 1, S, D]
        mask = (self.key_pos[:length].view(1, 1, -1) <= positions.unsqueeze(-1)).unsqueeze(1)
        x = self.embed(ids)                                                # [N, S, H]
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            q, k, v = self._qkv(attn, layer.input_layernorm(x), n, s)
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
            kc, vc = self.cache.k[i], self.cache.v[i]
            kc[rows.view(-1, 1), :, wpos] = k.transpose(1, 2)              # [N, S, Hkv, D]
            vc[rows.view(-1, 1), :, wpos] = v.transpose(1, 2)
            o = F.scaled_dot_product_attention(q, kc[rows, :, :length], vc[rows, :, :length],
                                               attn_mask=mask, scale=self.scale, enable_gqa=True)
            x = x + attn.o_proj(o.transpose(1, 2).reshape(n, s, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        last = x[torch.arange(n, device=ids.device), lens - 1]             # [N, H]
        return F.linear(self.norm(last), self.head_w).float()
