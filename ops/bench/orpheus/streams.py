"""Realtime streams measured the way a listener hears them, and the bf16 logits check.

``run_streams``: a background batch (part of the batch workload) runs in one ``synthesize`` call,
as a batch task would; once it is under way, each realtime stream arrives on its own thread (as
its own task would) at a spread of start times. Per stream: TTFB from its own submission, RTF = (last chunk - submission) /
audio seconds, and underruns: a chunk that arrives after the audio before it has finished playing.
"""

from __future__ import annotations

import gc
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from pipeline.constants import SNAC_SAMPLE_RATE
from pipeline.engines.base import SynthesisRequest

from ops.bench.orpheus.runs import Job, Result, percentiles, run_synth


@dataclass
class Stream:
    key: str
    submitted: float = 0.0
    first: float | None = None
    done: float | None = None
    audio_s: float = 0.0
    underruns: int = 0
    underrun_at: list[float] = field(default_factory=list)  # time.monotonic of each
    error: str | None = None

    @property
    def ttfb(self) -> float:
        return self.first - self.submitted

    @property
    def rtf(self) -> float:
        return (self.done - self.submitted) / max(self.audio_s, 1e-9)


@dataclass
class StreamsResult:
    streams: list[Stream] = field(default_factory=list)
    background: Result | None = None

    def summary(self) -> dict:
        ok = [s for s in self.streams if s.error is None and s.first is not None]
        p50, p95, p99 = percentiles(s.ttfb for s in ok)
        rtfs = [s.rtf for s in ok]
        return {
            "streams": len(self.streams),
            "ok": len(ok),
            "ttfb_p50": p50,
            "ttfb_p95": p95,
            "ttfb_p99": p99,
            "rtf_max": max(rtfs) if rtfs else None,
            "rtf_p50": percentiles(rtfs)[0],
            "rtf_lt_1": sum(r < 1 for r in rtfs),
            "rtf_lt_0_8": sum(r < 0.8 for r in rtfs),
            "underruns": sum(s.underruns for s in ok),
            "errors": [s.error for s in self.streams if s.error][:3],
        }


def one_stream(engine, job: Job, seed: int, out: Stream) -> None:
    req = SynthesisRequest(job.key, job.text, "tara", seed=seed, realtime=True)
    out.submitted = time.perf_counter()
    played_until = None
    for chunk in engine.synthesize([req]):
        now = time.perf_counter()
        if chunk.error is not None:
            out.error = str(chunk.error)
            return
        seconds = len(chunk.audio) / SNAC_SAMPLE_RATE
        if seconds > 0:
            if out.first is None:
                out.first, played_until = now, now
            elif now > played_until + 1e-3:
                out.underruns += 1
                out.underrun_at.append(time.monotonic())
                played_until = now
            played_until += seconds
            out.audio_s += seconds
        if chunk.final:
            out.done = now


@contextmanager
def gc_pauses():
    """The garbage collector's collections while the block runs, per generation: how many, and
    their longest and total wall time in ms (a collection holds the GIL, so every thread,
    the engine's loop among them, waits it out). Yields the dict it fills."""
    out = {g: {"count": 0, "max_ms": 0.0, "total_ms": 0.0} for g in (0, 1, 2)}
    began = {}

    def timer(phase, info):
        if phase == "start":
            began[threading.get_ident()] = time.perf_counter()
            return
        t0 = began.pop(threading.get_ident(), None)
        if t0 is not None:
            ms = (time.perf_counter() - t0) * 1e3
            g = out[info["generation"]]
            g["count"] += 1
            g["total_ms"] += ms
            g["max_ms"] = max(g["max_ms"], ms)

    gc.callbacks.append(timer)
    try:
        yield out
    finally:
        gc.callbacks.remove(timer)
        for g in out.values():
            g["max_ms"], g["total_ms"] = round(g["max_ms"], 2), round(g["total_ms"], 1)


def run_streams(engine, background: list[Job], streams: list[Job], spread_s: float, lead_s: float) -> StreamsResult:
    res = StreamsResult(streams=[Stream(j.key) for j in streams])
    bg = threading.Thread(
        target=lambda: setattr(res, "background", run_synth(engine, background)) if background else None
    )
    bg.start()
    if background:
        time.sleep(lead_s)  # let the batch fill its rows first
    threads = []
    t0 = time.perf_counter()
    for i, (job, st) in enumerate(zip(streams, res.streams)):
        delay = t0 + spread_s * i / max(1, len(streams)) - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        t = threading.Thread(target=one_stream, args=(engine, job, 10_000 + i, st))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    bg.join()
    return res


def logits_check(lm, prompts: list[list[int]], context: int = 512, kv_dtype: str = "model") -> dict:
    """Our decoder (with a ``kv_dtype`` cache) against the transformers model with the same
    weights: relative L2 of the last-position logits over the sampled slice, for a prefill and 8
    decode steps (greedy)."""
    import torch

    from pipeline.engines.orpheus.reference import left_pad
    from pipeline.engines.orpheus.model.sampling import SamplingParams
    from pipeline.engines.orpheus.serving.runner import ModelRunner
    from pipeline.engines.orpheus.serving.scheduler import Scheduler, Seq
    from pipeline.engines.orpheus.vocab import CUSTOM_TOKEN_BASE

    params = SamplingParams(temperature=0, ignore_eos=True)
    runner = ModelRunner(
        lm.model, len(prompts), context, params, logits_lo=CUSTOM_TOKEN_BASE, use_graphs=True, kv_dtype=kv_dtype
    )
    sched = Scheduler(len(prompts), context)
    seqs = [Seq(i, p, 9) for i, p in enumerate(prompts)]
    for s in seqs:
        sched.add(s)
    made = {i: list(p) for i, p in enumerate(prompts)}
    errors = []
    for _ in range(9):
        plan = sched.schedule()
        toks = runner.run(plan)
        owners = {r: sched.by_row[r] for r in toks}
        sched.postprocess(plan, toks)
        for r, t in toks.items():
            made[owners[r].key] += t
    # Replay each sequence through transformers and compare its logits at every generated step;
    # where the weights are plain, both against transformers in float32, the scale of bf16 noise.
    fp32 = None
    if lm.quant.applied == "none" and lm.model.dtype != torch.float32:
        import copy

        fp32 = copy.deepcopy(lm.model).float()
    rel = lambda a, b: float((a.float() - b.float()).norm() / b.float().norm())  # noqa: E731
    hf_vs_32, ours_vs_32 = [], []
    with torch.inference_mode():
        for i, p in enumerate(prompts):
            ids, attn = left_pad([made[i]], lm.model.device)
            window = slice(len(p) - 1, -1)
            ref = lm.model(input_ids=ids, attention_mask=attn).logits[0, window, CUSTOM_TOKEN_BASE:]
            ours = _our_logits(runner, made[i], len(p))
            errors.append(rel(ours, ref))
            if fp32 is not None:
                r32 = fp32(input_ids=ids, attention_mask=attn).logits[0, window, CUSTOM_TOKEN_BASE:]
                hf_vs_32.append(rel(ref, r32))
                ours_vs_32.append(rel(ours, r32))
    del fp32
    out = {
        "rel_l2_max": max(errors),
        "rel_l2_mean": sum(errors) / len(errors),
        "graphs": len(runner.graphs),
        "fallbacks": runner.fallbacks,
    }
    if hf_vs_32:
        out.update(ours_vs_fp32_max=max(ours_vs_32), transformers_vs_fp32_max=max(hf_vs_32))
    return out


def _our_logits(runner, tokens: list[int], prompt_len: int):
    """Our logits at every generated position of one sequence (row 0): the prompt through
    ``prefill``, then one ``decode`` step per token, the code the graphs capture."""
    import torch

    dec, dev = runner.decoder, runner.device
    t = lambda v: torch.tensor(v, device=dev)  # noqa: E731
    out = [dec.prefill(t([tokens[:prompt_len]]), t([0]), t([prompt_len]), t([0]), prompt_len)[0]]
    for pos in range(prompt_len, len(tokens) - 1):
        out.append(dec.decode(t([tokens[pos]]), t([pos]), pos + 1)[0])
    return torch.stack(out)
