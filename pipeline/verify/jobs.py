"""Checking jobs as they render: which jobs are checked (``SYNTH_VERIFY``), the check itself, and
the word-time files stored beside each checked job's audio."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

import numpy as np

from pipeline.errors import InputError
from pipeline.storage import ObjectStore
from pipeline.textfront import VoiceProfile
from pipeline.verify import captions, verdict
from pipeline.verify.recognizer import Recognizer, load_recognizer

log = logging.getLogger(__name__)

CAPTION_TYPES = {"json": "application/json", "srt": "application/x-subrip", "vtt": "text/vtt"}


@dataclass(frozen=True)
class Verifier:
    recognizer: Recognizer
    share: float            # of jobs checked, 0 < share <= 1

    def wants(self, job_id: str) -> bool:
        """Whether a job is in the checked share: by a hash of its id, so every render and every
        worker of the same job agree."""
        if self.share >= 1.0:
            return True
        digest = hashlib.blake2b(job_id.encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64 < self.share

    def check(self, samples: np.ndarray, sample_rate: int, text: str, voice: VoiceProfile) -> verdict.Verdict:
        return verdict.check(samples, sample_rate, text, voice, self.recognizer)


def verify_share(setting: str, on_cpu: bool) -> float:
    """``SYNTH_VERIFY``: ``auto`` (every job where the engine runs on the CPU, none on a GPU),
    ``all``, ``off``, or a share such as ``0.1``."""
    value = setting.strip().lower()
    if value == "auto":
        return 1.0 if on_cpu else 0.0
    if value in ("all", "on"):
        return 1.0
    if value in ("off", "none"):
        return 0.0
    try:
        share = float(value)
    except ValueError:
        share = -1.0
    if not 0.0 <= share <= 1.0:
        raise InputError(f"SYNTH_VERIFY={setting!r}: give auto, all, off, or a share of jobs from 0 to 1 (0.1)")
    return share


def make_verifier(setting: str, recognizer_spec: str, on_cpu: bool) -> Verifier | None:
    """None where no job is checked. ``auto`` without the recognizer installed checks nothing and
    says so once; a share asked for explicitly needs it (InputError)."""
    share = verify_share(setting, on_cpu)
    if share == 0.0:
        return None
    try:
        recognizer = load_recognizer(recognizer_spec)
    except InputError as e:
        if setting.strip().lower() != "auto":
            raise
        log.warning("jobs are not checked against their text: %s", e)
        return None
    return Verifier(recognizer, share)


def caption_key(audio_key: str, fmt: str) -> str:
    """``batches/B/audio/line-000001.J.mp3`` -> ``batches/B/captions/line-000001.J.srt`` (json:
    ``.words.json``): a folder of their own, so ``audio/`` holds one object per job, as before."""
    folder, _, name = audio_key.rpartition("/audio/")
    stem = name.rsplit(".", 1)[0]
    return f"{folder}/captions/{stem}.words.json" if fmt == "json" else f"{folder}/captions/{stem}.{fmt}"


def store_captions(store: ObjectStore, audio_key: str, result: verdict.Verdict) -> list[str]:
    """Word times beside the audio, in every caption format; the keys written."""
    if not result.words:
        return []
    keys = []
    for fmt, content_type in CAPTION_TYPES.items():
        key = caption_key(audio_key, fmt)
        store.put(key, captions.render(result.words, fmt).encode("utf-8"), content_type)
        keys.append(key)
    return keys


def record(result: verdict.Verdict) -> dict:
    """What job_metrics.extra keeps of a verdict (its status has a column of its own)."""
    return {"reasons": result.reasons, "scores": result.scores, "transcript": result.transcript,
            "recognizer": result.recognizer, "captions": bool(result.words)}
