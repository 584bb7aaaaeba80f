"""The fp8 KV cache (model/kv_cache.py KVCache with kv_dtype "fp8") against the bf16 cache it came from, at
Orpheus-3B shapes on random data. Run on a CUDA machine with Triton (sm_89 or later):

    python3 -m ops.bench.kernels.check_kv8

- decode_attention: the Triton kernel over an fp8 cache against the same kernel over the bf16
  cache it was quantized from (relative L2: what fp8 costs), and against the kernel over the fp8
  cache converted back to bf16 (must agree to the last bit: that checks the fp8 loads and the
  folded scales), with scales of 1 and of powers of two; then both caches timed at B=256 with
  rows of about 1000 tokens, in GB/s of K and V read.
- rope_store: the Triton kernel writing an fp8 cache against the torch reference: the share of
  entries differing, the largest difference in e4m3 steps, the rotated q; values past 448 saturate.
- the decoder: a random 28-layer model at Orpheus-3B shapes (``--layers``; ``--model`` loads a
  checkpoint instead), a prompt prefilled then teacher-forced decode steps, logits over an fp8
  cache against a bf16 cache (relative L2), each batch on SDPA and on the per-row kernel; the
  largest |K| and |V| written; for scale, the same model with fp8 weights against bf16.

One line per check; exits 1 when a check is out of its tolerance (the constants below), 2 without
Triton.

``--device cpu`` with ``TRITON_INTERPRET=1`` runs the checks in Triton's interpreter (tests/orpheus/
test_kv8.py does), in fp32, small, untimed. The interpreter loads e4m3 exactly but its fp32 -> e4m3
cast drops the carry when rounding overflows the mantissa (1.96 -> 1.0, not 2.0; triton-lang/triton
#11897), so there rope_store is checked on data whose every stored value is exact in e4m3 (cos/sin
tables of 0 and +-1, k and v on the e4m3 grid, power-of-two scales), and the decoder check uses the
torch rope_store (with the per-row kernel).
"""

from __future__ import annotations

import argparse

import torch

from ops.bench.kernels.checking import (
    CONTEXT,
    HEAD_DIM,
    HEADS,
    KV_HEADS,
    TOLERANCE,
    Report,
    kernels_runnable,
    random_model,
    rope_tables,
    start,
)
from ops.bench.timing import median_device_ms
from pipeline.engines.orpheus.kernels import FP8_MAX, attention, fused
from pipeline.engines.orpheus.model.decoder import Decoder
from pipeline.engines.orpheus.model.kv_cache import KVCache
from pipeline.engines.orpheus.model.quant import quantize
from pipeline.engines.orpheus.tiny import ORPHEUS_3B
from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE

# Relative L2 of fp8 against bf16: e4m3 rounds each entry by up to 2^-4 (3.6% rms), so attention
# over random K and V (near-uniform weights) is off by about 4% (measured 3.8% in plain torch).
ATTENTION_FP8_REL = 0.06
# The decoder's logits over an fp8 cache against a bf16 one. With random weights (Llama's init)
# every layer's attention output outweighs its residual input, so the K/V rounding reaches the
# logits undiluted and grows over the layers: measured on the CPU (bf16, SDPA, 2 rows, prompt 200)
# 0.20-0.24 at 28 layers, where fp8 weights (quant.py, shipped) give 0.34-0.41 on the same model;
# 0.07 at 2 layers (fp32). A bound for bugs (a wrong scale or position is off by ~1), not quality:
# a checkpoint (--model) is the measure of that.
DECODER_FP8_REL = 0.35
# rope_store into fp8: the kernel rotates in fp32 and rounds once to e4m3; the reference rotates in
# the model dtype (x*cos, rotated*sin and their sum each rounded to bf16) and then rounds to e4m3.
# Where those roundings stack up the two differ by a step, rarely two: on an H200 (random data,
# B=64) 7e-6 of the entries differed, by at most 2 steps.
ROPE_DIFFERING = 0.01
ROPE_MAX_STEPS = 2
TIMED_BATCH, TIMED_LEN = 256, 1000
SCALES = ((1.0, 1.0), (0.5, 2.0))        # (k_scale, v_scale): the default and powers of two


def rel_l2(got, want) -> float:
    g, w = got.float(), want.float()
    return ((g - w).norm() / w.norm().clamp_min(1e-30)).item()


def bound(report: Report, name: str, value: float, limit: float, more: str = "") -> None:
    """A check whose value must stay at or under ``limit``."""
    ok = value <= limit
    print(f"  {name:<44} {value:.3e} (limit {limit:g}){more}  {'ok' if ok else 'FAIL'}",
          flush=True)
    if not ok:
        report.failures.append(name)


def e4m3_steps(a, b) -> torch.Tensor:
    """|a - b| in e4m3 steps, per entry (sign-magnitude bytes as ordinals: +0 and -0 are equal)."""
    def ordinal(t):
        bits = t.view(torch.uint8).int()
        return torch.where(bits >= 128, -(bits - 128), bits)
    return (ordinal(a) - ordinal(b)).abs()


def quantized(cache, k_scale: float, v_scale: float, like):
    """An fp8 copy of a bf16 cache (fused.to_cache) and that copy back in ``like``'s dtype with
    the scales applied (exact for power-of-two scales)."""
    k8, v8 = fused.to_cache(cache[0], k_scale), fused.to_cache(cache[1], v_scale)
    back = ((k8.float() * k_scale).to(like), (v8.float() * v_scale).to(like))
    return (k8, v8), back


def check_attention(report: Report, b: int, length: int, dtype, device) -> None:
    """decode_attention over an fp8 cache, rows of about ``length`` tokens."""
    g, scale = HEADS // KV_HEADS, HEAD_DIM ** -0.5
    q = torch.randn(b, KV_HEADS, g, HEAD_DIM, dtype=dtype, device=device)
    k, v = (torch.randn(b, KV_HEADS, length + 1, HEAD_DIM, dtype=dtype, device=device)
            for _ in range(2))                                          # [B, Hkv, T+1, D]
    lens = torch.randint(length * 9 // 10, length + 1, (b,), device=device)
    plain = attention.decode_attention(q, k, v, lens, scale)
    # The fp8 cache's launch with dots in the query's dtype, as over the converted cache: the same
    # arithmetic, so the same bits (check_f16 covers the fp16 dots).
    same = attention.launch_for(1, b)[:3] + (False,)
    for ks, vs in SCALES:
        (k8, v8), (kb, vb) = quantized((k, v), ks, vs, dtype)
        got = attention.decode_attention(q, k8, v8, lens, scale * ks, vs, launch=same)
        report.error(f"fp8 kernel = kernel on fp8->{str(dtype)[6:]} B={b} s={ks},{vs}", got,
                     attention.decode_attention(q, kb, vb, lens, scale, launch=same),
                     TOLERANCE[dtype])
        got = attention.decode_attention(q, k8, v8, lens, scale * ks, vs)
        bound(report, f"attention fp8 vs {str(dtype)[6:]} origin B={b} s={ks},{vs}",
              rel_l2(got, plain), ATTENTION_FP8_REL)


# fp16 dots over an fp8 cache round the query and the softmax weights to 11 bits, where bf16 has 8
# and the fp32 interpreter 24: against the fp32 dots it is off by about 2^-12 relative.
F16_TOLERANCE = {torch.bfloat16: TOLERANCE[torch.bfloat16], torch.float32: (2 ** -9, 2e-4)}


def check_f16(report: Report, b: int, length: int, dtype, device) -> None:
    """The fp8 cache's kernel with fp16 dots (the default) against dots in the query's dtype, rows
    from 1 token to ``length``: within rounding."""
    g, scale = HEADS // KV_HEADS, HEAD_DIM ** -0.5
    q = torch.randn(b, KV_HEADS, g, HEAD_DIM, dtype=dtype, device=device)
    k, v = (torch.randn(b + 1, KV_HEADS, length + 1, HEAD_DIM, dtype=dtype, device=device)
            for _ in range(2))
    lens = torch.linspace(1, length, b, device=device).long()
    (k8, v8), _ = quantized((k, v), 0.5, 2.0, dtype)
    launch = attention.launch_for(1, b)
    assert launch[3], "fp16 dots are the fp8 cache's default"
    got = attention.decode_attention(q, k8, v8, lens, scale * 0.5, 2.0)
    want = attention.decode_attention(q, k8, v8, lens, scale * 0.5, 2.0,
                                      launch=launch[:3] + (False,))
    report.error(f"fp16 dots = {str(dtype)[6:]} dots, fp8 cache B={b}", got, want,
                 F16_TOLERANCE[dtype])


def time_attention(b: int, length: int, dtype, device) -> None:
    g, scale = HEADS // KV_HEADS, HEAD_DIM ** -0.5
    q = torch.randn(b, KV_HEADS, g, HEAD_DIM, dtype=dtype, device=device)
    k, v = (torch.randn(b, KV_HEADS, length + 1, HEAD_DIM, dtype=dtype, device=device)
            for _ in range(2))
    lens = torch.randint(length * 9 // 10, length + 1, (b,), device=device)
    (k8, v8), _ = quantized((k, v), 1.0, 1.0, dtype)
    cells = []
    for name, kc, vc in ((str(dtype)[6:], k, v), ("fp8", k8, v8)):
        ms = median_device_ms(lambda: attention.decode_attention(q, kc, vc, lens, scale))
        read = 2 * lens.sum().item() * KV_HEADS * HEAD_DIM * kc.element_size()
        cells.append(f"{name} {ms * 1e3:7.1f} us ({read / ms / 1e6:5.0f} GB/s of "
                     f"{read / 1e9:.2f} GB)")
    print(f"  decode_attention B={b} rows ~{length} tokens, one layer: " + "   ".join(cells),
          flush=True)


def check_rope_store(report: Report, b: int, dtype, device, grid_only: bool) -> None:
    """fp8 rope_store, the Triton kernel against the torch reference: on data exact in e4m3 (the
    bytes must all match), then (off the interpreter) on random data with values past 448."""
    hq, hkv, d = HEADS, KV_HEADS, HEAD_DIM
    rows = b + 3
    wpos = torch.randperm(CONTEXT, device=device)[:b]
    wpos[-1] = CONTEXT                                   # an idle row writes the scratch slot
    # cos/sin of 0, 90, 180, 270 degrees: the rotation only moves and negates entries
    quarter = torch.arange(CONTEXT + 1, device=device) % 4
    cos = torch.tensor([1.0, 0.0, -1.0, 0.0], device=device)[quarter].view(-1, 1).expand(-1, d)
    sin = torch.tensor([0.0, 1.0, 0.0, -1.0], device=device)[quarter].view(-1, 1).expand(-1, d)
    grid = dict(cos=cos.to(dtype).contiguous(), sin=sin.to(dtype).contiguous(), scales=(0.5, 4.0))
    cases = [("grid", grid)]
    if not grid_only:
        cos, sin = rope_tables(dtype, device)
        cases.append(("random", dict(cos=cos, sin=sin, scales=(1.0, 1.0))))
    for name, case in cases:
        ks, vs = case["scales"]
        qkv = torch.randn(b, (hq + 2 * hkv) * d, device=device)
        if name == "grid":                              # e4m3 values times the scales: exact
            qkv = fused.to_cache(qkv * 16, 1.0).float()
            qkv[:, hq * d:(hq + hkv) * d] *= ks
            qkv[:, (hq + hkv) * d:] *= vs
        else:                                           # some past 448: saturated
            qkv[:, ::97] *= 1000
        q, k, v = (t.view(b, -1, d) for t in
                   qkv.to(dtype).split([hq * d, hkv * d, hkv * d], dim=-1))
        caches = [torch.zeros(rows, hkv, CONTEXT + 1, d, dtype=fused.FP8, device=device)
                  for _ in range(4)]
        args = (q, k, v, case["cos"], case["sin"], wpos)
        q_ref = fused.rope_store_ref(*args, caches[0], caches[1], ks, vs)
        q_out = fused.rope_store_triton(*args, caches[2], caches[3], ks, vs)
        report.error(f"rope_store fp8 q ({name}) B={b}", q_out, q_ref, TOLERANCE[dtype])
        for part, got, want in (("k", caches[2], caches[0]), ("v", caches[3], caches[1])):
            steps = e4m3_steps(got, want)
            most = 0 if name == "grid" else ROPE_MAX_STEPS
            bound(report, f"rope_store fp8 {part} cache ({name}) B={b}: values differing",
                  (steps > 0).float().mean().item(), 0 if name == "grid" else ROPE_DIFFERING,
                  f", max {steps.max().item()} e4m3 steps (limit {most})")
            if steps.max().item() > most:
                report.failures.append(f"rope_store fp8 {part} cache ({name}) B={b}: steps")
            if name == "random":                # NaN fails this too
                top = got.float().abs().max().item()
                bound(report, f"rope_store fp8 {part} saturates: |max - 448| B={b}",
                      abs(top - FP8_MAX), 0)


def step_logits(decoder, ids, prompt: int, per_row: bool) -> list:
    """Prefill ``ids[:, :prompt]`` into rows 0..N-1, then decode the rest teacher-forced: the
    prefill's logits and each step's."""
    n, dev = ids.shape[0], ids.device
    out = [decoder.prefill(ids[:, :prompt], torch.zeros(n, dtype=torch.long, device=dev),
                           torch.full((n,), prompt, device=dev), torch.arange(n, device=dev),
                           prompt)]
    for t in range(prompt, ids.shape[1]):
        out.append(decoder.decode(ids[:, t], torch.full((n,), t, device=dev), t + 1, per_row))
    return out


def worst(got: list, want: list) -> float:
    return max(rel_l2(g, w) for g, w in zip(got, want))


def check_decoder(report: Report, model, batches, prompt: int, ops, fp8_weights=None) -> None:
    """Prefill and teacher-forced decode, logits over an fp8 cache against a bf16 cache; each
    batch on both attention paths (SDPA over a length bucket, the per-row kernel). With
    ``fp8_weights`` (the same model, quant.py's fp8), its logits over a bf16 cache against the
    same reference, for scale: a mode the engine already ships."""
    n, steps, context = max(batches), 4, 512
    cfg = model.config

    def decoder(m, kv_dtype):
        cache = KVCache(cfg.num_hidden_layers, n + 1, cfg.num_key_value_heads, context, HEAD_DIM,
                        m.dtype, m.device, kv_dtype)
        return Decoder(m, cache, CUSTOM_TOKEN_BASE, ops=ops)

    plain, fp8 = decoder(model, None), decoder(model, "fp8")
    print(f"decoder, {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size} ({n} rows, "
          f"{str(model.dtype)[6:]} model, prompt {prompt}):", flush=True)
    ids = torch.randint(CUSTOM_TOKEN_BASE, cfg.vocab_size, (n, prompt + steps), device=model.device)
    with torch.inference_mode():
        for b in batches:
            for per_row in (False, True):
                want = step_logits(plain, ids[:b], prompt, per_row)
                bound(report, f"logits fp8 vs {str(model.dtype)[6:]} cache B={b} "
                      f"({'per-row kernel' if per_row else 'SDPA'}; prefill, {steps} steps)",
                      worst(step_logits(fp8, ids[:b], prompt, per_row), want), DECODER_FP8_REL)
        k, v = (c[:, :n].abs().max().item() for c in (plain.cache.k, plain.cache.v))
        print(f"  largest |K| {k:.2f}, |V| {v:.2f} written (e4m3 saturates at 448)",
              flush=True)
        if fp8_weights is not None:
            err = worst(step_logits(decoder(fp8_weights, None), ids, prompt, False),
                        step_logits(plain, ids, prompt, False))
            print(f"  for scale, fp8 weights (bf16 cache) vs bf16 B={n} (SDPA): {err:.3e}",
                  flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batches", type=int, nargs="+",
                    help="decoder batches (default: 8 64 on CUDA, 2 in the interpreter)")
    ap.add_argument("--layers", type=int, default=None,
                    help="decoder layers (default: 28 on CUDA, 2 in the interpreter)")
    ap.add_argument("--model", help="a checkpoint folder for the decoder check (default: random "
                                     "weights at Orpheus-3B shapes)")
    ap.add_argument("--no-time", action="store_true", help="errors only")
    args = ap.parse_args(argv)
    if not kernels_runnable(args.device):
        return 2
    on_cuda = start(args.device)
    report = Report()
    dtype = torch.bfloat16 if on_cuda else torch.float32
    length = TIMED_LEN if on_cuda else 100
    print("decode_attention:", flush=True)
    for b in (1, TIMED_BATCH) if on_cuda else (1, 3):
        check_attention(report, b, length, dtype, args.device)
    check_f16(report, 64 if on_cuda else 5, 1800 if on_cuda else 80, dtype, args.device)
    if on_cuda and not args.no_time:
        time_attention(TIMED_BATCH, TIMED_LEN, dtype, args.device)
    print("rope_store:", flush=True)
    for b in (1, 64) if on_cuda else (1, 5):
        check_rope_store(report, b, dtype, args.device, grid_only=not on_cuda)
    def model():
        if args.model:
            from pipeline.engines.orpheus.model.loading import load_lm

            return load_lm(args.model, str(dtype)[6:], args.device)[1]
        return random_model(args.layers or (ORPHEUS_3B["num_hidden_layers"] if on_cuda else 2),
                            dtype, args.device)               # seeded: the same weights each call

    fp8_weights = None
    if on_cuda and not args.no_time:
        fp8_weights = model()
        if quantize(fp8_weights, "fp8", args.device, dtype).applied != "fp8":
            fp8_weights = None                        # the reason is logged
    check_decoder(report, model(), args.batches or ([8, 64] if on_cuda else [2]),
                  200 if on_cuda else 24, fused.TRITON if on_cuda else fused.REFERENCE,
                  fp8_weights)
    return report.exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
