"""Our forward pass over a transformers Llama checkpoint, with a preallocated KV cache.

The modules are the checkpoint's own (embedding, norms, projections, MLP, rotary tables), so the
weights are loaded once and a quantized swap of the linear layers (quant.py) applies here too. What
is ours is the shape of the computation, as in gpt-fast: a static cache with one row per sequence,
prefill of prompt chunks separate from the one-token decode step, and no host work inside the step,
so the step can be captured as a CUDA graph.

Where the projections are plain Linear, q/k/v are one GEMM and gate/up another, over fused weights
that the modules' own weights are views into (``fuse_weights``); the norms with their residual adds,
RoPE with the cache write, and silu * up are kernels/fused.py's ops, Triton kernels on CUDA. The
decode step then launches about ten kernels a layer, not forty, which is what batch-1 decode is
bound by.

The language-model head is computed only for the ids the sampler can pick (``logits_lo`` .. vocab:
the audio codes, end-of-speech and the control tokens), a sixth of the vocabulary: the head's weight
is 15% of Orpheus-3B's bytes, read every step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from pipeline.engines.orpheus.kernels import attention, fused
from pipeline.engines.orpheus.model.kv_cache import KVCache
from pipeline.engines.orpheus.model.quant import fuse_float8


# A prefill's attention on CUDA (Decoder._prefill_attention); math only where the efficient kernel
# cannot run the shape.
PREFILL_BACKENDS = [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def fuse_weights(linears) -> torch.Tensor | None:
    """One weight ``[sum of outputs, in]`` for plain bias-free ``nn.Linear`` modules, whose
    ``.weight`` become row views of it, so one copy stays allocated (the originals are freed).
    None, and the modules untouched, for anything else: quant.py's fp8 and bitsandbytes modules."""
    if not all(type(m) is torch.nn.Linear and m.bias is None for m in linears):
        return None
    ws = [m.weight for m in linears]
    if len({(w.dtype, w.device, w.shape[1]) for w in ws}) > 1:
        return None
    rows, cols = sum(w.shape[0] for w in ws), ws[0].shape[1]
    if _adjacent(ws):  # fused by an earlier decoder over the same model
        return ws[0].detach().as_strided((rows, cols), (cols, 1))
    with torch.inference_mode(False), torch.no_grad():
        whole = torch.cat([w.detach() for w in ws])  # [N1 + N2 + .., K]
        start = 0
        for m, w in zip(linears, ws):
            m.weight = torch.nn.Parameter(whole[start : start + w.shape[0]], requires_grad=w.requires_grad)
            start += w.shape[0]
    return whole


def _adjacent(ws) -> bool:
    """The weights lie back to back in one storage, in order."""
    storage = ws[0].untyped_storage().data_ptr()
    for a, b in zip(ws, ws[1:]):
        if b.untyped_storage().data_ptr() != storage or b.storage_offset() != a.storage_offset() + a.numel():
            return False
    return all(w.is_contiguous() for w in ws)


class Decoder:
    """``fuse``: one GEMM for q/k/v and one for gate/up where the projections are plain Linear
    (fuse_weights). ``ops``: the elementwise set (kernels/fused.py), by default Triton on CUDA.
    ``prefill_attention``: a prefill's attention as Triton kernels where the fused ops run on
    CUDA; False keeps the torch path (rotations, indexed cache writes and reads, SDPA), which the
    CPU runs."""

    def __init__(
        self,
        model,
        cache: KVCache,
        logits_lo: int = 0,
        fuse: bool = True,
        ops: fused.Ops | None = None,
        prefill_attention: bool = True,
    ):
        inner = model.model
        cfg = model.config
        self.embed, self.layers, self.norm = inner.embed_tokens, inner.layers, inner.norm
        self.heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.scale = self.head_dim**-0.5
        self.cache = cache
        self.qk_scale = self.scale * cache.k_scale  # an fp8 cache's key scale folded in
        device = self.embed.weight.device
        self.ops = ops or fused.ops_for(device)
        # The checkpoint's own rotary module makes the tables (rope scaling included), once.
        positions = torch.arange(cache.context + 1, device=device).view(1, -1)
        probe = torch.zeros(1, device=device, dtype=self.embed.weight.dtype)
        cos, sin = inner.rotary_emb(probe, positions)  # [1, T+1, D]
        self.cos, self.sin = cos[0].contiguous(), sin[0].contiguous()  # [T+1, D]
        self.key_pos = torch.arange(cache.context + 1, device=device)  # [T+1]
        self.head_w = model.lm_head.weight[logits_lo:]  # [Vs, H] view, tied or not
        self.logits_lo = logits_lo
        # The norm each layer's MLP output is added in front of: the next layer's input norm.
        self.after_mlp = [layer.input_layernorm for layer in self.layers[1:]] + [self.norm]
        self.qkv_split = (self.heads * self.head_dim,) + (self.kv_heads * self.head_dim,) * 2
        silu = getattr(cfg, "hidden_act", "silu") == "silu"
        self.qkv_w = [
            fuse_weights([layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj]) if fuse else None
            for layer in self.layers
        ]  # [Hq*D + 2*Hkv*D, H]
        self.gate_up_w = [
            fuse_weights([layer.mlp.gate_proj, layer.mlp.up_proj]) if fuse and silu else None for layer in self.layers
        ]  # [2F, H]
        # fp8 projections (quant.py) are fused as modules: one activation quantization, one GEMM.
        self.qkv_fp8 = [
            fuse_float8([layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj])
            if fuse and w is None
            else None
            for layer, w in zip(self.layers, self.qkv_w)
        ]
        self.gate_up_fp8 = [
            fuse_float8([layer.mlp.gate_proj, layer.mlp.up_proj]) if fuse and silu and w is None else None
            for layer, w in zip(self.layers, self.gate_up_w)
        ]
        # Prefill attention as two Triton kernels (rope_store with each token's row, then
        # attention.prefill_attention over the cache).
        self.prefill_kernel = prefill_attention and self.ops is fused.TRITON and attention.available(device)
        if str(device).startswith("cuda"):
            torch.cuda.empty_cache()  # the unfused copies' blocks, for the sizing after

    @property
    def logits_width(self) -> int:
        return self.head_w.shape[0]

    def _norm(self, x, delta, norm) -> tuple[torch.Tensor, torch.Tensor]:
        """``x + delta`` (delta may be None) and that sum through ``norm``: (x, normed)."""
        return self.ops.add_rms_norm(x, delta, norm.weight, norm.variance_epsilon)

    def _qkv(self, i: int, h):
        """h [.., H] -> q [.., Hq*D], k and v [.., Hkv*D]."""
        if (w := self.qkv_w[i]) is not None:
            return F.linear(h, w).split(self.qkv_split, dim=-1)
        if (fp8 := self.qkv_fp8[i]) is not None:
            return fp8(h).split(self.qkv_split, dim=-1)
        attn = self.layers[i].self_attn
        return attn.q_proj(h), attn.k_proj(h), attn.v_proj(h)

    def _mlp(self, i: int, h):
        mlp = self.layers[i].mlp
        if (w := self.gate_up_w[i]) is not None:
            return mlp.down_proj(self.ops.silu_mul(F.linear(h, w)))
        if (fp8 := self.gate_up_fp8[i]) is not None:
            return mlp.down_proj(self.ops.silu_mul(fp8(h)))
        return mlp(h)

    def _sdpa(self, q, k, v, mask, **kw):
        """SDPA over cache slices; an fp8 slice is converted to the query's dtype and the cache's
        scales are folded in (the key scale into the softmax scale, the value scale after)."""
        if not self.cache.fp8:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale, **kw)
        o = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype), attn_mask=mask, scale=self.qk_scale, **kw)
        return o * self.cache.v_scale if self.cache.v_scale != 1.0 else o

    def _prefill_attention(self, q, k, v, mask):
        """A prefill's attention: q [N, Hq, S, D] over k, v [N, Hkv, L, D] with a per-row mask.

        On CUDA, not cuDNN's SDPA (which torch picks first for a masked call on Hopper): it plans
        each new shape on the host, and every eager prefill has a new (N, S, L): milliseconds of
        host time per layer call, so a whole prefill held the loop thread long enough to starve
        the streams of decode steps. The efficient (CUTLASS) kernel launches at
        once; it has no grouped heads, so K and V are repeated to the query heads first (about
        50 MB at 4 rows of 2,048), and ``prefill`` pads the length to the 16 it reads the mask in.
        """
        if not q.is_cuda:
            return self._sdpa(q, k, v, mask, enable_gqa=True)
        group = q.shape[1] // k.shape[1]
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        with sdpa_kernel(PREFILL_BACKENDS):
            return self._sdpa(q, k, v, mask)

    def _layers(self, x, h, attend):
        """The decoder layers over token rows: x [T, H] and h (x through the first layer's input
        norm); ``attend(i, q, k, v)`` is layer i's attention, [T, Hq*D] from q, k, v [T, ..].
        Returns the final norm's output [T, H]."""
        for i, layer in enumerate(self.layers):
            q, k, v = self._qkv(i, h)
            x, h = self._norm(x, layer.self_attn.o_proj(attend(i, q, k, v)), layer.post_attention_layernorm)
            x, h = self._norm(x, self._mlp(i, h), self.after_mlp[i])
        return h

    def _embed(self, tokens) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids [T] -> (x, h) [T, H], as ``_layers`` takes them."""
        return self._norm(self.embed(tokens), None, self.layers[0].input_layernorm)

    def _decode_attention(self, wpos, length: int, per_row: bool):
        """The attention of one-token rows ``0 .. B-1`` at write positions wpos [B] (scratch for
        idle rows), as ``_layers``' ``attend``: over cache positions [0, length), or with
        ``per_row`` over each row's own [0, wpos] (kernels/attention.py)."""
        b, d = wpos.shape[0], self.head_dim
        lens = torch.where(wpos == self.cache.scratch, 1, wpos + 1) if per_row else None
        mask = (self.key_pos[:length].view(1, -1) <= wpos.view(-1, 1)).view(b, 1, 1, length)

        def attend(i, q, k, v):
            kc, vc = self.cache.k[i], self.cache.v[i]  # [R, Hkv, T+1, D]
            q = self.ops.rope_store(
                q.view(b, self.heads, d),
                k.view(b, self.kv_heads, d),
                v.view(b, self.kv_heads, d),
                self.cos,
                self.sin,
                wpos,
                kc,
                vc,
                self.cache.k_scale,
                self.cache.v_scale,
            )
            # The query heads of one KV head, all at the same position, go in as its queries:
            # [B, Hkv, G, D] against [B, Hkv, L, D], so K and V are read once, never repeated.
            q = q.view(b, self.kv_heads, -1, d)
            if per_row:
                o = attention.decode_attention(q, kc, vc, lens, self.qk_scale, self.cache.v_scale)
            else:
                o = self._sdpa(q, kc[:b, :, :length], vc[:b, :, :length], mask)
            return o.reshape(b, -1)

        return attend

    @staticmethod
    def _token_rows(rows, s: int):
        """Each of N chunks' S tokens' cache row, [N * S], contiguous (an expanded view of one
        row would have stride 0, and the kernels read it with stride 1)."""
        return rows.view(-1, 1).expand(-1, s).reshape(-1).contiguous()

    def _prefill_positions(self, ids, start, lens):
        """Prompt chunks' positions [N, S], and where each token writes: its position, or the
        scratch slot past its chunk's length."""
        col = torch.arange(ids.shape[1], device=ids.device).view(1, -1)
        positions = start.view(-1, 1) + col  # [N, S]
        return positions, torch.where(col < lens.view(-1, 1), positions, self.cache.scratch)

    def _prefill_attention_of(self, ids, start, lens, rows, length: int):
        """The attention of prompt chunks ids [N, S] (see ``prefill``) as ``_layers``' ``attend``,
        over their N * S token rows: their keys and values go into the cache first."""
        n, s = ids.shape
        d = self.head_dim
        positions, wpos = self._prefill_positions(ids, start, lens)
        if self.prefill_kernel:
            token_rows = self._token_rows(rows, s)
            wpos = wpos.reshape(-1)

            def attend_kernel(i, q, k, v):
                kc, vc = self.cache.k[i], self.cache.v[i]
                q = self.ops.rope_store(
                    q.view(n * s, self.heads, d),
                    k.view(n * s, -1, d),
                    v.view(n * s, -1, d),
                    self.cos,
                    self.sin,
                    wpos,
                    kc,
                    vc,
                    self.cache.k_scale,
                    self.cache.v_scale,
                    rows=token_rows,
                )
                return attention.prefill_attention(
                    q, kc, vc, rows, start, lens, self.qk_scale, self.cache.v_scale
                ).view(n * s, -1)

            return attend_kernel
        if ids.is_cuda:  # the efficient kernel's mask rows are read 16-aligned (see below)
            length = min(-(-length // 16) * 16, self.cache.context + 1)
        cos, sin = self.cos[wpos].unsqueeze(1), self.sin[wpos].unsqueeze(1)  # [N, 1, S, D]
        mask = (self.key_pos[:length].view(1, 1, -1) <= positions.unsqueeze(-1)).unsqueeze(1)

        def attend(i, q, k, v):
            q = q.view(n, s, self.heads, d).transpose(1, 2)  # [N, Hq, S, D]
            k = k.view(n, s, self.kv_heads, d).transpose(1, 2)  # [N, Hkv, S, D]
            v = v.view(n, s, self.kv_heads, d).transpose(1, 2)
            q, k = fused.rotate(q, cos, sin), fused.rotate(k, cos, sin)
            kc, vc = self.cache.k[i], self.cache.v[i]
            if self.cache.fp8:
                at = (rows.view(-1, 1), slice(None), wpos)
                fused.store_fp8(kc, at, k.transpose(1, 2), self.cache.k_scale)
                fused.store_fp8(vc, at, v.transpose(1, 2), self.cache.v_scale)
                kr, vr = (
                    fused.gather_fp8(c, (rows, slice(None), slice(0, length)), q.dtype) for c in (kc, vc)
                )  # [N, Hkv, L, D]
            else:
                kc[rows.view(-1, 1), :, wpos] = k.transpose(1, 2)  # [N, S, Hkv, D]
                vc[rows.view(-1, 1), :, wpos] = v.transpose(1, 2)
                kr, vr = kc[rows, :, :length], vc[rows, :, :length]
            o = self._prefill_attention(q, kr, vr, mask)
            return o.transpose(1, 2).reshape(n * s, -1)

        return attend

    def decode(self, tokens, wpos, length: int, per_row: bool = False):
        """One token for rows ``0 .. B-1``: tokens [B], write positions [B] (scratch for idle rows);
        attends over cache positions [0, length), or with ``per_row`` over each row's own
        [0, wpos] (kernels/attention.py). Returns logits [B, Vs] fp32."""
        h = self._layers(*self._embed(tokens), self._decode_attention(wpos, length, per_row))
        return F.linear(h, self.head_w).float()

    def prefill(self, ids, start, lens, rows, length: int):
        """Prompt chunks into the cache: ids [N, S] (right-padded), start [N] (first position),
        lens [N] (valid ids), rows [N] (cache rows); attends over [0, length). Returns the logits
        of each chunk's last valid position, [N, Vs] fp32."""
        n, s = ids.shape
        h = self._layers(*self._embed(ids.reshape(-1)), self._prefill_attention_of(ids, start, lens, rows, length))
        last = h.view(n, s, -1)[torch.arange(n, device=ids.device), lens - 1]  # [N, H]
        return F.linear(last, self.head_w).float()

    def mixed(self, tokens, wpos, length: int, per_row: bool, ids, start, lens, rows, prefill_length: int):
        """``decode`` and ``prefill`` in one pass: the decode rows' B tokens and the chunks' N * S
        go through each projection together, so the weights are read once for both (a decode
        step over many rows is still largely bound by reading the weights, and a prefill of a
        short prompt on its own reads every weight again, with all its small kernels). The rows
        the chunks fill must not decode in this pass. Returns (decode logits [B, Vs], chunk
        logits [N, Vs]), fp32, each what ``decode`` and ``prefill`` return, up to the rounding of
        GEMMs at another M. One exception: fp8 weights (quant.py) run their weight-only kernel
        up to 32 rows and ``_scaled_mm`` (fp8 activations) above, and a mixed pass has B + N * S
        rows, so its decode rows are rounded as a step over more than 32 rows is."""
        b = tokens.shape[0]
        n, s = ids.shape
        if self.prefill_kernel and per_row:
            attend = self._mixed_attention_kernel(wpos, ids, start, lens, rows)
        else:
            dec = self._decode_attention(wpos, length, per_row)
            pre = self._prefill_attention_of(ids, start, lens, rows, prefill_length)

            def attend(i, q, k, v):
                return torch.cat([dec(i, q[:b], k[:b], v[:b]), pre(i, q[b:], k[b:], v[b:])])

        h = self._layers(*self._embed(torch.cat([tokens, ids.reshape(-1)])), attend)
        last = h[b:].view(n, s, -1)[torch.arange(n, device=ids.device), lens - 1]  # [N, H]
        logits = F.linear(torch.cat([h[:b], last]), self.head_w).float()
        return logits[:b], logits[b:]

    def _mixed_attention_kernel(self, wpos, ids, start, lens, rows):
        """``mixed``'s attention with the kernels: one rope_store for the B decode rows' tokens
        and the chunks' N * S (each to its own cache row), then the per-row decode kernel and the
        prefill kernel, each writing its part of one output."""
        b, (n, s), d = wpos.shape[0], ids.shape, self.head_dim
        t = b + n * s
        lens_b = torch.where(wpos == self.cache.scratch, 1, wpos + 1)
        token_rows = torch.cat([torch.arange(b, device=ids.device), self._token_rows(rows, s)])
        token_pos = torch.cat([wpos, self._prefill_positions(ids, start, lens)[1].reshape(-1)])

        def attend(i, q, k, v):
            kc, vc = self.cache.k[i], self.cache.v[i]
            q = self.ops.rope_store(
                q.view(t, self.heads, d),
                k.view(t, -1, d),
                v.view(t, -1, d),
                self.cos,
                self.sin,
                token_pos,
                kc,
                vc,
                self.cache.k_scale,
                self.cache.v_scale,
                rows=token_rows,
            )
            out = torch.empty_like(q)  # [T, Hq, D]
            attention.decode_attention(
                q[:b].view(b, self.kv_heads, -1, d),
                kc,
                vc,
                lens_b,
                self.qk_scale,
                self.cache.v_scale,
                out=out[:b].view(b, self.kv_heads, -1, d),
            )
            attention.prefill_attention(
                q[b:], kc, vc, rows, start, lens, self.qk_scale, self.cache.v_scale, out=out[b:]
            )
            return out.view(t, -1)

        return attend
