"""A batch's closing numbers: jobs, audio seconds, x real time, TTFB percentiles, failures."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from pipeline.db import jobs as db
from pipeline.db.models import Batch, JobStatus, as_utc
from pipeline.plural import counted


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class BatchSummary:
    batch_id: str
    name: str | None
    total: int
    counts: dict[str, int]
    skipped_lines: int
    audio_s: float
    wall_s: float | None
    ttfb_p50: float | None
    ttfb_p95: float | None
    failures: list[tuple[str, str]]  # (client id, reason)
    # What the text front end changed, summed over the done jobs (job_metrics.extra["text"]), with
    # "jobs": how many jobs had anything changed; empty when nothing was.
    text_notes: dict[str, int] = field(default_factory=dict)
    # Checks of the done jobs' audio against their text (pipeline/verify): count per verdict, and
    # the suspect and bad jobs as (client id, verdict, reasons).
    verdicts: dict[str, int] = field(default_factory=dict)
    flagged: list[tuple[str, str, str]] = field(default_factory=list)
    # Done jobs whose audio is a copy of an earlier render (pipeline/reuse.py), and the engine
    # seconds (GPU seconds, on a GPU worker) those renders took, spent again by none of them.
    reused: int = 0
    reused_s: float = 0.0

    @property
    def x_real_time(self) -> float | None:
        return self.audio_s / self.wall_s if self.wall_s else None

    @property
    def finished(self) -> bool:
        return sum(self.counts.get(s.value, 0) for s in JobStatus if not s.terminal) == 0


def summarize(session: Session, batch: Batch) -> BatchSummary:
    rows = db.jobs_with_metrics(session, batch.id)
    counts = {s.value: 0 for s in JobStatus}
    ttfbs, audio_s, last = [], 0.0, None
    failures = []
    text_notes: dict[str, int] = {}
    verdicts: dict[str, int] = {}
    flagged = []
    reused, reused_s = 0, 0.0
    for job, m in rows:
        counts[job.status.value] += 1
        if job.status == JobStatus.FAILED:
            failures.append((job.client_id, job.error or "unknown"))
        if m is not None and job.status == JobStatus.DONE:
            _add_text_notes(text_notes, (m.extra or {}).get("text"))
            if m.verdict is not None:
                verdicts[m.verdict] = verdicts.get(m.verdict, 0) + 1
                if m.verdict in ("suspect", "bad"):
                    reasons = ((m.extra or {}).get("verify") or {}).get("reasons") or []
                    flagged.append((job.client_id, m.verdict, "; ".join(reasons)))
            audio_s += m.audio_s or 0.0
            if m.reused_s is not None:
                reused, reused_s = reused + 1, reused_s + m.reused_s
            if m.ttfb_s is not None:
                ttfbs.append(m.ttfb_s)
        if job.finished_at and (last is None or job.finished_at > last):
            last = job.finished_at
    wall = (as_utc(last) - as_utc(batch.created_at)).total_seconds() if last else None
    return BatchSummary(
        batch_id=batch.id,
        name=batch.name,
        total=len(rows),
        counts=counts,
        skipped_lines=batch.skipped_lines,
        audio_s=audio_s,
        wall_s=wall,
        ttfb_p50=percentile(ttfbs, 50),
        ttfb_p95=percentile(ttfbs, 95),
        failures=failures,
        text_notes=text_notes,
        verdicts=verdicts,
        flagged=flagged,
        reused=reused,
        reused_s=reused_s,
    )


def _add_text_notes(total: dict[str, int], notes: dict | None) -> None:
    if not notes:
        return
    total["jobs"] = total.get("jobs", 0) + 1
    for key, n in notes.items():
        total[key] = total.get(key, 0) + n


# How `synth status` names each count of the text front end (pipeline/textfront): one, many.
TEXT_NOTE_WORDS = {
    "foreign_chars_dropped": ("character of other scripts dropped", "characters of other scripts dropped"),
    "emoji_dropped": ("emoji silent", "emoji silent"),
    "tags_removed": ("tag removed", "tags removed"),
    "readings_expanded": ("amount, URL or e-mail address in words", "amounts, URLs or e-mail addresses in words"),
    "ssml_breaks": ("SSML break", "SSML breaks"),
    "ssml_say_as": ("SSML say-as", "SSML say-as"),
    "rate_ignored": ("prosody rate the engine cannot honour", "prosody rates the engine cannot honour"),
    "lexicon_entries": ("lexicon entry said", "lexicon entries said"),
    "lexicon_phonemes_skipped": (
        "lexicon phoneme entry the voice cannot say",
        "lexicon phoneme entries the voice cannot say",
    ),
}


def describe_text_notes(notes: dict[str, int]) -> str:
    """'text: 3 emoji silent, 12 characters of other scripts dropped (in 2 jobs)'; '' for none."""
    parts = [counted(notes[k], *words) for k, words in TEXT_NOTE_WORDS.items() if notes.get(k)]
    if not parts:
        return ""
    jobs = notes.get("jobs", 0)
    return f"text: {', '.join(parts)} (in {counted(jobs, 'job')})"
