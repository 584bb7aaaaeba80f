"""The three approaches on one workload, each timed the same way.

- ``generate1``: transformers ``generate()`` one job at a time, then one SNAC decode per job.
- ``static``: ``generate()`` on padded static batches (longest job sets the length), then decode.
- ``synth``: the engine (batched KV-cache loop, streamed windowed decode).

A job's TTFB is when its first audio is in hand: the first streamed chunk for synth, the end of its
decode for the generate() paths. Every job runs exactly its token budget (random weights never stop:
``ignore_eos``), so all approaches do the same useful work.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from pipeline.constants import LM_TOKENS_PER_AUDIO_SECOND, SNAC_SAMPLE_RATE
from pipeline.engines.base import SynthesisRequest
from pipeline.engines.orpheus.codec.codes import tokens_to_frames
from pipeline.engines.orpheus.codec.streaming import decode_frames
from pipeline.engines.orpheus.engine import OrpheusEngine
from pipeline.engines.orpheus.reference import reference_generate
from pipeline.engines.orpheus.model.sampling import SamplingParams
from pipeline.engines.orpheus.prompt import prompt_ids

PARAMS = SamplingParams(ignore_eos=True)


@dataclass
class Job:
    key: str
    text: str
    budget: int
    realtime: bool = False


@dataclass
class Result:
    approach: str
    jobs: int
    tokens: int = 0
    audio_s: float = 0.0
    wall_s: float = 0.0
    ttfb: dict = field(default_factory=dict)  # key -> seconds
    done: dict = field(default_factory=dict)  # key -> seconds
    underruns: int = 0
    padded_tokens: int = 0  # generated past a job's own budget (static)
    stream_audio: dict = field(default_factory=dict)  # key -> audio seconds


def _sync(lm):
    if lm.device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def run_generate(lm, jobs: list[Job], batch: int) -> Result:
    res = Result("generate1" if batch == 1 else "static", len(jobs))
    _sync(lm)
    t0 = time.perf_counter()
    for i in range(0, len(jobs), batch):
        group = jobs[i : i + batch]
        prompts = [prompt_ids(lm.tokenizer, j.text, "tara") for j in group]
        rows = reference_generate(lm.model, prompts, PARAMS, [j.budget for j in group], seed=i)
        longest = max(j.budget for j in group)
        res.padded_tokens += sum(longest - j.budget for j in group)
        for job, row in zip(group, rows):
            audio = decode_frames(lm.codec, tokens_to_frames(row).frames, seed=i)
            _sync(lm)
            res.ttfb[job.key] = res.done[job.key] = time.perf_counter() - t0
            res.tokens += len(row)
            res.audio_s += len(audio) / SNAC_SAMPLE_RATE
            res.stream_audio[job.key] = len(audio) / SNAC_SAMPLE_RATE
    res.wall_s = time.perf_counter() - t0
    return res


def run_synth(engine: OrpheusEngine, jobs: list[Job]) -> Result:
    res = Result("synth", len(jobs))
    budgets = {j.key: j.budget for j in jobs}
    played: dict = {}  # key -> (first chunk time, audio seconds so far)
    reqs = [SynthesisRequest(j.key, j.text, "tara", seed=n, realtime=j.realtime) for n, j in enumerate(jobs)]
    t0 = time.perf_counter()
    for chunk in engine.synthesize(reqs):
        now = time.perf_counter() - t0
        if chunk.error is not None:
            raise chunk.error
        seconds = len(chunk.audio) / SNAC_SAMPLE_RATE
        if chunk.key not in res.ttfb and seconds > 0:
            res.ttfb[chunk.key] = now
            played[chunk.key] = (now, 0.0)
        if chunk.key in played:
            start, have = played[chunk.key]
            if now > start + have + 1e-3 and have > 0:
                res.underruns += 1
            played[chunk.key] = (start, have + seconds)
        res.audio_s += seconds
        res.stream_audio[chunk.key] = res.stream_audio.get(chunk.key, 0.0) + seconds
        if chunk.final:
            if chunk.key in res.done:
                raise RuntimeError(f"two final chunks for job {chunk.key!r}")
            res.done[chunk.key] = now
    res.wall_s = time.perf_counter() - t0
    missing = set(budgets) - set(res.done)
    if missing:  # the figures would count work that never came back
        raise RuntimeError(f"{len(missing)} jobs got no final chunk, e.g. {sorted(missing)[:3]}")
    res.tokens = sum(budgets.values())
    return res


def expected_audio_s(jobs: list[Job]) -> float:
    return sum(j.budget for j in jobs) / LM_TOKENS_PER_AUDIO_SECOND


def percentiles(values) -> tuple[float, float, float]:
    if not values:
        return (float("nan"),) * 3
    p = np.percentile(np.asarray(list(values)), [50, 95, 99])
    return float(p[0]), float(p[1]), float(p[2])
