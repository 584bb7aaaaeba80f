"""The Orpheus engine: requests -> prompts with token budgets -> the continuous loop -> streamed audio.

Each request becomes a sequence (its prompt, a token budget from its text, its seed) that the loop
thread (serving/loop.py) admits beside every other one in flight: a step's tokens go to each
stream's frame assembler, the codec renders the frames that are ready (codec/thread.py), and chunks
go to the caller as they come; a sequence that ends is flushed and gets its final chunk at once,
while the others continue. ``build_loop`` sizes the KV cache and captures the graphs at boot.
"""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from pipeline.constants import (
    CHARS_PER_SECOND,
    LM_TOKENS_PER_AUDIO_SECOND,
    SNAC_SAMPLE_RATE,
    SNAC_TOKENS_PER_FRAME,
)
from pipeline.engines.base import AudioChunk, Engine, EngineInfo, SynthesisRequest
from pipeline.engines.orpheus.config import OrpheusConfig, RealtimeConfig
from pipeline.engines.orpheus.model import device as devices
from pipeline.engines.orpheus.model.loading import LoadedModel, load
from pipeline.engines.orpheus.model.sampling import SamplingParams
from pipeline.engines.orpheus.prompt import prompt_ids
from pipeline.engines.orpheus.codec.streaming import (
    BATCH_CHUNK_FRAMES,
    FIRST_CHUNK_FRAMES,
    LEFT_CONTEXT_FRAMES,
    RAMP_FIRST_FRAMES,
    REALTIME_CHUNK_FRAMES,
    RIGHT_CONTEXT_FRAMES,
    StreamState,
)
from pipeline.engines.orpheus.serving.scheduler import SchedulerConfig, Seq
from pipeline.engines.orpheus.vocab import (
    CUSTOM_TOKEN_BASE,
    END_OF_SPEECH,
    INLINE_TAGS,
    LANGUAGE,
    VOICES,
)
from pipeline.errors import EngineError, EngineUnavailableError, SilentRenderError
from pipeline.gcfreeze import freeze_boot_objects
from pipeline.textfront import speech_seconds

log = logging.getLogger(__name__)

BUDGET_SLACK = 2.0  # budget = 2x the expected speech length from the text ...
BUDGET_MIN_TOKENS = 28 * 7  # ... and never under 28 frames (2.4 s)
BUDGET_MAX_TOKENS = 1170 * 7  # 8190: the model's 8192-token context caps every job
PROMPT_TOKENS_PER_CHAR = 0.35  # Llama-3 BPE on English: about 3 characters a token, with margin
PROMPT_OVERHEAD_TOKENS = 16  # voice name and the control tokens around the text
BUDGET_POLICIES = ("error", "keep")
ADMIT_EVERY = 8  # GPU: batch prompts are prefilled together every 8 steps (realtime: every step)


def token_budget(
    text: str, slack: float = BUDGET_SLACK, minimum: int = BUDGET_MIN_TOKENS, maximum: int = BUDGET_MAX_TOKENS
) -> int:
    """LM tokens a text may take: expected seconds of speech x 82.03 tokens/s x slack, whole frames
    (an inline tag such as <laugh> counts as a second of audio, not as its characters)."""
    seconds = speech_seconds(text)
    tokens = max(minimum, math.ceil(seconds * LM_TOKENS_PER_AUDIO_SECOND * slack))
    frames = math.ceil(tokens / SNAC_TOKENS_PER_FRAME)
    return min(maximum // SNAC_TOKENS_PER_FRAME, frames) * SNAC_TOKENS_PER_FRAME


def default_seed(request: SynthesisRequest) -> int:
    """A job without a seed gets one from its voice and text, so reruns reproduce it."""
    return zlib.crc32(f"{request.voice}\x00{request.text}".encode())


class OrpheusEngine(Engine):
    def __init__(
        self,
        loaded: LoadedModel,
        config: OrpheusConfig = OrpheusConfig(),
        voices: Sequence[str] = VOICES,
        max_batch: int = 0,
        params: SamplingParams = SamplingParams(),
        budget_policy: str | None = None,
        budget_slack: float | None = None,
        budget_min: int = BUDGET_MIN_TOKENS,
        budget_max: int = BUDGET_MAX_TOKENS,
        scheduling: Callable[[SchedulerConfig], SchedulerConfig] | None = None,
    ):
        """``scheduling``: a change to the scheduler's config as the engine derives it from
        ``config.realtime`` and the rows (``scheduler_config``), made before the scheduler is
        built; benchmarks set what serving does not (ops/bench/orpheus/fast.py)."""
        self.lm, self.config, self.params = loaded, config, params
        self.scheduling = scheduling
        # A budget stop means runaway generation on a real model: an error for the job, unless the
        # checkpoint asks otherwise (model/loading.py ServingHints).
        hints = loaded.serving
        self.budget = (budget_slack or hints.budget_slack or BUDGET_SLACK, budget_min, budget_max)
        self.budget_policy = budget_policy or hints.budget_policy or "error"
        if self.budget_policy not in BUDGET_POLICIES:
            raise ValueError(f"budget_policy must be one of {BUDGET_POLICIES}")
        devices.resolve_kv_dtype(config.kv_dtype, None)  # refuses an unknown setting
        self.stats = {"tokens": 0, "invalid_tokens": 0, "dropped_frames": 0, "budget_stops": 0}
        self._prepare_lock = threading.Lock()
        batch, max_chars = self._start(max_batch, budget_slack)
        self.info = EngineInfo(
            name="orpheus",
            model=loaded.source,
            quantization=loaded.quant.applied,
            device_type=loaded.choice.name,
            sample_rate=SNAC_SAMPLE_RATE,
            voices=tuple(voices),
            max_batch=batch,
            max_text_chars=max_chars,
            extra=self._extra(),
            languages={v: (LANGUAGE,) for v in voices},
            inline_tags=INLINE_TAGS,
        )

    def _start(self, max_batch: int, budget_slack: float | None) -> tuple[int, int | None]:
        """Boot the loop; returns its rows and the longest text one row holds."""
        self.loop = build_loop(self.lm, self.params, max_batch, self.config, self._final_live, self.scheduling)
        if self.lm.device.startswith("cuda") and self.config.switches.gc_freeze:
            freeze_boot_objects("engine")  # on CUDA only: a CPU test session builds many
        return self.loop.scheduler.capacity, text_chars_for(self.config.context, budget_slack or BUDGET_SLACK)

    def _extra(self) -> dict:
        runner, codec = self.loop.runner, self.lm.codec
        return {
            "cuda_graphs": len(runner.graphs),
            "graph_capture_s": round(runner.capture_s, 2),
            "codec_graphs": codec.graph_count,
            "mixed_graphs": len(runner.mixed_graphs),
            "context": runner.context,
            "kv_dtype": str(runner.cache.k.dtype).removeprefix("torch."),
            **({"kv_scales": [runner.cache.k_scale, runner.cache.v_scale]} if runner.cache.fp8 else {}),
            **self._device_extra(runner.fallbacks),
        }

    def _device_extra(self, fallbacks: list[str]) -> dict:
        """What every job records of the device, the weights and the paths that fell back."""
        c, q, codec = self.lm.choice, self.lm.quant, self.lm.codec
        return {
            "device": c.device,
            "dtype": c.dtype_name,
            "compute_capability": c.capability,
            "quantization_requested": q.requested,
            "kernel": q.kernel,
            "fallbacks": list(fallbacks),
            "random_weights": self.lm.random_weights,
            "budget_policy": self.budget_policy,
            "codec_noise": "keyed per window",
            "codec_fused_units": getattr(codec, "fused_units", 0),
            "codec_dtype": getattr(codec, "dtype", "float32"),
        }

    @classmethod
    def from_settings(cls, settings) -> OrpheusEngine:
        loaded = load(
            settings.model,
            settings.codec,
            settings.dtype,
            settings.quantization,
            settings.device,
            settings.orpheus.switches,
            settings.codec_dtype,
        )
        if loaded.device == "cpu" and settings.threads > 0:
            import torch

            torch.set_num_threads(settings.threads)
        return cls(loaded, settings.orpheus, voices=settings.voices or VOICES, max_batch=settings.max_batch)

    # The Engine interface ---------------------------------------------------------------------

    def synthesize(self, requests: Sequence[SynthesisRequest]) -> Iterator[AudioChunk]:
        refused, seqs = self._admit(requests)
        yield from refused
        yield from self._run_continuous(seqs)

    def submit(self, requests: Sequence[SynthesisRequest], sink) -> None:
        """The loop takes the jobs and puts their chunks into ``sink`` itself: no thread per call."""
        refused, seqs = self._admit(requests)
        for chunk in refused:
            sink.put(chunk)
        if seqs:
            self.loop.submit([(seq, seq.key) for seq in seqs], sink)

    def _admit(self, requests: Sequence[SynthesisRequest]) -> tuple[list[AudioChunk], list[Seq]]:
        """Tokenize the requests: a refusal chunk for each one the engine cannot render, a
        sequence for the rest."""
        seqs, refused = [], []
        stop = None if self.params.ignore_eos else END_OF_SPEECH
        # Batch callers tokenize one at a time: many task threads tokenizing at once would keep the
        # loop thread from the GIL. Realtime requests never wait for this lock.
        urgent = any(req.realtime for req in requests)
        with contextlib.nullcontext() if urgent else self._prepare_lock:
            for req in requests:
                problem = self._check(req)
                if problem:
                    refused.append(AudioChunk(req.key, np.zeros(0, np.float32), True, EngineError(problem)))
                    continue
                prompt = prompt_ids(self.lm.tokenizer, req.text, req.voice)
                seed = req.seed if req.seed is not None else default_seed(req)
                seqs.append(
                    Seq(
                        req.key,
                        prompt,
                        token_budget(req.text, *self.budget),
                        req.realtime,
                        seed,
                        stop,
                        group=req.group,
                        again=req.again,
                    )
                )
        return refused, seqs

    def _run_continuous(self, seqs: list[Seq]) -> Iterator[AudioChunk]:
        """Hand the sequences to the loop thread and pass on their chunks as they come."""
        if not seqs:
            return
        sink: queue.SimpleQueue = queue.SimpleQueue()
        self.loop.submit([(seq, seq.key) for seq in seqs], sink)
        open_jobs = len(seqs)
        while open_jobs:
            chunk = sink.get()
            open_jobs -= chunk.final
            yield chunk

    def _final_live(self, live, audio) -> AudioChunk:
        chunk = self._final(live.key, live.stream, live.seq.finish_reason, audio)
        seq = live.seq
        chunk.stats = {
            "tokens": seq.generated,
            "slot_steps": round(seq.slot_steps, 3),
            "idle_slot_steps": round(seq.idle_slot_steps, 3),
            "preemptions": seq.preemptions,
            "max_batch": self.info.max_batch,
        }
        return chunk

    def close(self) -> None:
        """Stop the loop thread and free its KV cache; the model stays loaded (it may be shared)."""
        if self.loop is not None:
            self.loop.close()
            self.loop = None
            if self.lm.device.startswith("cuda"):
                import torch

                torch.cuda.empty_cache()

    # Internals --------------------------------------------------------------------------------

    def _check(self, req: SynthesisRequest) -> str | None:
        if req.voice not in self.info.voices:
            return f"unknown voice {req.voice!r} for orpheus; choose one of {self.info.voices}"
        if not req.text.strip():
            return "nothing speakable: empty text"
        return None

    def _final(self, key, st: StreamState, reason: str, audio) -> AudioChunk:
        a = st.assembler
        self.stats["invalid_tokens"] += a.invalid_tokens
        self.stats["dropped_frames"] += a.dropped_frames
        audio = np.zeros(0, np.float32) if audio is None else audio
        if a.invalid_tokens:
            log.warning("job %r: %d invalid audio tokens, %d frames dropped", key, a.invalid_tokens, a.dropped_frames)
        error = None
        if reason == "budget":
            self.stats["budget_stops"] += 1
            if self.budget_policy == "error":
                error = EngineError(f"token budget blown: no end of speech after {a.audio_tokens} audio tokens")
        if not a.frames and error is None:
            error = SilentRenderError("the model produced no valid audio frame")
        return AudioChunk(key, audio, True, error)


def realtime_windows() -> tuple[int, ...]:
    """Codec window lengths of realtime chunks: the ramp's sizes (with a first lookahead of one
    frame too) and the full realtime chunk (codec/streaming.py)."""
    edge = LEFT_CONTEXT_FRAMES + RIGHT_CONTEXT_FRAMES
    ramp = [RAMP_FIRST_FRAMES + RIGHT_CONTEXT_FRAMES, RAMP_FIRST_FRAMES + 1] + [
        c + edge for c in range(1, REALTIME_CHUNK_FRAMES)
    ]
    return tuple(sorted({REALTIME_CHUNK_FRAMES + edge, *ramp}))


def batch_windows() -> tuple[int, ...]:
    """Codec window lengths of batch chunks: the first, and every one after (codec/streaming.py)."""
    edge = LEFT_CONTEXT_FRAMES + RIGHT_CONTEXT_FRAMES
    return (FIRST_CHUNK_FRAMES + RIGHT_CONTEXT_FRAMES, BATCH_CHUNK_FRAMES + edge)


def stream_state(seed: int, realtime: bool, first_lookahead: int = RIGHT_CONTEXT_FRAMES) -> StreamState:
    """Realtime streams get small, growing chunks (latency, no underruns); batch work big ones
    (fewer codec frames)."""
    if realtime:
        return StreamState(seed=seed, chunk_frames=REALTIME_CHUNK_FRAMES, ramp=True, first_right=first_lookahead)
    return StreamState(seed=seed, chunk_frames=BATCH_CHUNK_FRAMES)


def text_chars_for(context: int, slack: float = BUDGET_SLACK) -> int:
    """The longest text whose prompt and token budget fit one cache row of ``context`` tokens."""
    per_char = LM_TOKENS_PER_AUDIO_SECOND * slack / CHARS_PER_SECOND + PROMPT_TOKENS_PER_CHAR
    return max(20, int((context - PROMPT_OVERHEAD_TOKENS) / per_char))


# Batch rows over the realtime cap wait with their cache (scheduler ``pause_batch``) rather than
# being preempted and prefilled again: more streams keep ahead of real time, and batch work loses
# no prefill.
PAUSE_BATCH = True


def scheduler_config(rows: int, rt: RealtimeConfig, on_gpu: bool) -> SchedulerConfig:
    """How the engine's scheduler shares ``rows`` between realtime and batch work."""
    first = stream_state(0, True, rt.first_lookahead).first_ready_frames * SNAC_TOKENS_PER_FRAME
    return SchedulerConfig(
        reserved=rt.rows or max(1, rows // 8) if rows > 1 else 0,
        batch_floor=rows // 8,
        admit_every=ADMIT_EVERY if on_gpu else 1,
        realtime_max_rows=rt.max_rows or max(1, rows // 3),
        batch_every=rt.batch_every,
        batch_every_starting=rt.batch_every_starting,
        first_tokens=first,
        playing_every=rt.playing_every,
        pause_batch=PAUSE_BATCH,
        frame_tokens=SNAC_TOKENS_PER_FRAME,
        playback_tokens_per_s=LM_TOKENS_PER_AUDIO_SECOND,
        low_lead_s=rt.low_lead_ms / 1000,
    )


def kv_cache_plan(loaded: LoadedModel, config: OrpheusConfig):
    """The KV cache's dtype (the setting resolved for the card), its storage dtype and its bytes
    per row; an fp8 cache on a card without e4m3 kernels is refused."""
    from pipeline.engines.orpheus.model.kv_cache import KVCache, kv_storage_dtype

    cap = loaded.choice.capability
    kv_dtype = devices.resolve_kv_dtype(config.kv_dtype, cap)
    if kv_dtype == "fp8" and cap is not None and cap < devices.FP8_KV_CAPABILITY:
        raise EngineUnavailableError(
            f"an fp8 KV cache needs compute capability >= {devices.FP8_KV_CAPABILITY} for its "
            f"e4m3 kernels (Ada, Hopper); {loaded.choice.name} is sm_{cap[0]}{cap[1]}: set "
            "SYNTH_ORPHEUS_KV_DTYPE=auto or model"
        )
    cfg = loaded.model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    store = kv_storage_dtype(kv_dtype, loaded.model.dtype)
    per_row = KVCache.bytes_per_row(
        cfg.num_hidden_layers, cfg.num_key_value_heads, config.context, head_dim, store.itemsize
    )
    return kv_dtype, store, per_row


def build_loop(
    loaded: LoadedModel,
    params: SamplingParams,
    max_rows: int,
    config: OrpheusConfig,
    on_final,
    scheduling: Callable[[SchedulerConfig], SchedulerConfig] | None = None,
):
    """Size the KV cache from free memory (an fp8 cache: twice the rows of bf16), capture the
    graphs, start the loop thread."""
    from pipeline.engines.orpheus.model import kv_scales
    from pipeline.engines.orpheus.serving.graphs import LENGTHS as PREFILL_LENGTHS
    from pipeline.engines.orpheus.serving.loop import EngineLoop
    from pipeline.engines.orpheus.serving.runner import ModelRunner
    from pipeline.engines.orpheus.serving.scheduler import Scheduler

    context, rt = config.context, config.realtime
    kv_dtype, store, per_row = kv_cache_plan(loaded, config)
    scales = kv_scales.fp8_scales(loaded) if kv_dtype == "fp8" else None
    rows = devices.choose_max_batch(max_rows, loaded.device, per_row, cap=devices.GPU_MAX_ROWS)
    lo = CUSTOM_TOKEN_BASE if params.constrain_codes else 0
    runner = ModelRunner(
        loaded.model,
        rows,
        context,
        params,
        logits_lo=lo,
        use_graphs=config.cuda_graphs,
        kv_dtype=kv_dtype,
        kv_range=scales,
        switches=config.switches,
        fallbacks=loaded.fallbacks,
        prefill_lengths=loaded.serving.prefill_lengths or PREFILL_LENGTHS,
    )
    on_gpu = loaded.device.startswith("cuda")
    derived = scheduler_config(rows, rt, on_gpu)
    scheduler = Scheduler(rows, context, config=scheduling(derived) if scheduling else derived)
    if config.cuda_graphs:
        loaded.codec.capture_graphs(realtime_windows(), batch_windows(), runner.fallbacks)
    log.info(
        "continuous loop: %d rows of %d tokens (%.1f GiB of %s KV cache), %d reserved for realtime",
        rows,
        context,
        rows * per_row / 2**30,
        store,
        scheduler.reserved,
    )
    return EngineLoop(
        runner,
        scheduler,
        loaded.codec,
        on_final,
        stream_factory=lambda seed, realtime: stream_state(seed, realtime, rt.first_lookahead),
    )
