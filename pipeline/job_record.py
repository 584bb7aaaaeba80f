"""What a rendered job records beside its audio: its loudness (levelled to its batch's target, or
measured), its check against its text, and its job_metrics row. render.py calls these as each job
finishes; retake.py levels its renders the same way."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
import numpy as np

from pipeline import audio, loudness
from pipeline.db.models import Job, as_utc
from pipeline.documents.plan import place_of
from pipeline.formats import get_format
from pipeline.hostinfo import hostname
from pipeline.lexicon.store import job_lexicon
from pipeline.renderer import JobState, Renderer
from pipeline.verify.jobs import LaterChecks, record, store_captions
from pipeline.verify.queued import pending_record
from pipeline.verify.verdict import PENDING


def level_job(
    job: Job, samples: np.ndarray, sample_rate: int, *, meter: bool = True
) -> tuple[np.ndarray, loudness.Level]:
    """A job of a levelled batch is brought to its target; any other is measured where ``meter``,
    and a document's always: its chapter's true peak is read from its jobs' (documents/chapter.py)."""
    if job.loudness_target is None:
        measured = meter or place_of(job.client_id) is not None
        return samples, loudness.measure(samples, sample_rate) if measured else loudness.Level(None, None)
    ceiling = loudness.ceiling_for(
        job.true_peak_max if job.true_peak_max is not None else loudness.DEFAULT_CEILING_DBTP,
        get_format(job.format).lossy,
    )
    return loudness.level(samples, sample_rate, job.loudness_target, ceiling)


def metrics_row(
    r: Renderer,
    state: JobState,
    samples: np.ndarray,
    synth_s: float,
    level: loudness.Level,
    checked: tuple[str, dict] | None,
) -> dict:
    """The job_metrics row of a finished job."""
    job, info = state.job, r.engine.info
    audio_s = audio.duration_seconds(samples, info.sample_rate)
    first = state.first_audio or time.monotonic()
    first_wall = state.admitted_wall + timedelta(seconds=first - state.admitted)
    extra = _extra(state)
    precision = info.precision  # a lossy setting, or one chosen at load, stays beside its figures
    if precision:
        extra = {**(extra or {}), "precision": precision}
    if checked:
        extra = {**(extra or {}), "verify": checked[1]}
    # A chapter rendered again with a new seed was asked for when it was queued again, not when
    # its document was submitted, perhaps days before.
    submitted = job.created_at if job.seed is None else (job.queued_at or job.created_at)
    return dict(
        queue_wait_s=_seconds(job.queued_at or job.created_at, state.admitted_wall),
        ttfb_s=_seconds(submitted, first_wall),
        synth_s=synth_s,
        audio_s=audio_s,
        rtf=synth_s / audio_s,
        engine=info.name,
        model=info.model,
        quantization=info.quantization,
        device_type=info.device_type,
        worker_host=r.worker_host or hostname(),
        batch_size=state.batch_size,
        extra=extra,
        loudness_lufs=level.lufs,
        true_peak_dbtp=level.true_peak_dbtp,
        verdict=checked[0] if checked else None,
        renders=1,
    )


def check_job(r: Renderer, job: Job, key: str, samples: np.ndarray) -> tuple[str, dict] | None:
    """The verdict on a batch job in the checked share and what job_metrics.extra keeps of it,
    its word times stored beside its audio; or ``pending`` where a verify worker checks it later.
    A realtime job's audio went out live before any check could act on it, and the check's CPU
    would come out of the other streams' first bytes: it is not checked."""
    if r.verifier is None or job.priority == "realtime" or not r.verifier.wants(job.id):
        return None
    info = r.engine.info
    profile = info.profile(job.voice)
    if isinstance(r.verifier, LaterChecks):
        return PENDING, pending_record(profile)
    result = r.verifier.check(
        samples,
        info.sample_rate,
        job.text,
        profile,
        job_lexicon(r.sessions, r.lexicons, job.lexicon_id, job.lexicon_version),
    )
    store_captions(r.store, key, result)
    return result.status, record(result)


def _extra(state: JobState) -> dict | None:
    """job_metrics.extra: the engine's counters, under "text" what the front end changed, and
    under "lexicon" the lexicon version it rendered with."""
    extra = {
        **state.stats,
        **({"text": state.text_notes} if state.text_notes else {}),
        **({"lexicon": state.lexicon} if state.lexicon else {}),
    }
    return extra or None


def _seconds(start: datetime, end: datetime) -> float:
    return max(0.0, (end - as_utc(start)).total_seconds())
