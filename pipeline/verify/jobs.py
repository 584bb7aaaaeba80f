"""Checking jobs as they render: which jobs are checked (``SYNTH_VERIFY``), inline or on the verify
queue, the check itself, and the word-time files stored beside each checked job's audio."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pipeline.errors import InputError
from pipeline.lexicon.apply import Compiled
from pipeline.storage import ObjectStore
from pipeline.textfront import VoiceProfile
from pipeline.verify import captions, verdict
from pipeline.verify.recognizer import Recognizer, load_recognizer

log = logging.getLogger(__name__)

CAPTION_TYPES = {"json": "application/json", "srt": "application/x-subrip", "vtt": "text/vtt"}


def in_share(job_id: str, share: float) -> bool:
    """Whether a job is in the checked share: by a hash of its id, so every render and every
    worker of the same job agree."""
    if share >= 1.0:
        return True
    digest = hashlib.blake2b(job_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < share


@dataclass(frozen=True)
class Verifier:
    """Checks a job as it renders (inline: the embedded default)."""

    recognizer: Recognizer
    share: float  # of jobs checked, 0 < share <= 1

    def wants(self, job_id: str) -> bool:
        return in_share(job_id, self.share)

    def check(
        self, samples: np.ndarray, sample_rate: int, text: str, voice: VoiceProfile, lexicon: Compiled | None = None
    ) -> verdict.Verdict:
        return verdict.check(samples, sample_rate, text, voice, self.recognizer, lexicon)


@dataclass(frozen=True)
class LaterChecks:
    """Checks a job after it renders, on the verify queue: the render worker records the job's
    verdict as ``pending`` with its audio and sends ``send(job_id)``; a verify worker checks it
    (pipeline/verify/queued.py). The render worker loads no recognizer and spends no CPU on it."""

    share: float
    send: Callable[[str], None]

    def wants(self, job_id: str) -> bool:
        return in_share(job_id, self.share)


def verify_share(setting: str, on_cpu: bool, sample: float = 0.1) -> float:
    """``SYNTH_VERIFY``: ``auto`` (every job where the engine runs on the CPU, none on a GPU),
    ``all``, ``sample`` (``sample``, SYNTH_VERIFY_SHARE, of them), ``off``, or a share such as ``0.1``."""
    value = setting.strip().lower()
    if value == "auto":
        return 1.0 if on_cpu else 0.0
    if value in ("all", "on"):
        return 1.0
    if value == "sample":
        return sample
    if value in ("off", "none"):
        return 0.0
    try:
        share = float(value)
    except ValueError:
        share = -1.0
    if not 0.0 <= share <= 1.0:
        raise InputError(
            f"SYNTH_VERIFY={setting!r}: give auto, all, sample (SYNTH_VERIFY_SHARE of the jobs), "
            "off, or a share of jobs from 0 to 1 (0.1)"
        )
    return share


def make_verifier(setting: str, recognizer_spec: str, on_cpu: bool, sample: float = 0.1) -> Verifier | None:
    """None where no job is checked. ``auto`` without the recognizer installed checks nothing and
    says so once; a share asked for explicitly needs it (InputError)."""
    share = verify_share(setting, on_cpu, sample)
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


def plan_checks(
    setting: str, recognizer_spec: str, *, on_cpu: bool, sample: float, later: Callable[[str], None] | None
) -> Verifier | LaterChecks | None:
    """How a render worker has its jobs checked: inline (``later`` None: the embedded Redis, where
    the worker is the whole fleet), or on the verify queue through ``later``. A render worker that
    queues its checks needs no recognizer, but under ``auto`` the CPU workers that render are the
    ones that check: without the recognizer there, nothing is queued for it."""
    if later is None or setting.strip().lower() == "auto":
        inline = make_verifier(setting, recognizer_spec, on_cpu, sample)
        if later is None or inline is None:
            return inline
        return LaterChecks(inline.share, later)
    share = verify_share(setting, on_cpu, sample)
    return LaterChecks(share, later) if share else None


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
    words = result.caption_words
    assert words is not None  # the words as written, or else these
    keys = []
    for fmt, content_type in CAPTION_TYPES.items():
        key = caption_key(audio_key, fmt)
        store.put(key, captions.render(words, fmt).encode("utf-8"), content_type)
        keys.append(key)
    return keys


def record(result: verdict.Verdict) -> dict:
    """What job_metrics.extra keeps of a verdict (its status has a column of its own)."""
    return {
        "reasons": result.reasons,
        "scores": result.scores,
        "transcript": result.transcript,
        "recognizer": result.recognizer,
        "captions": bool(result.words),
    }
