"""What a report holds. Plain dataclasses: compute.py fills them, the renderers read them, and
``to_dict`` is the JSON form (also the summary stored in the reports table)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime

from pipeline.reports.stats import percentile

DIMENSIONS = ("device_type", "worker_host", "engine", "model", "quantization")
DIMENSION_TITLES = {
    "device_type": "GPU / device type",
    "worker_host": "worker",
    "engine": "engine",
    "model": "model",
    "quantization": "quantization mode",
}
HEADLINE_FIELDS = (
    "jobs_done",
    "jobs_failed",
    "audio_hours",
    "x_realtime",
    "audio_s_per_gpu_hour",
    "ttfb_p50_s",
    "ttfb_p95_s",
    "cost_per_audio_hour",
)

NOTES = (
    "Period: jobs are counted by when they finished (done or failed), batches and job states by when "
    "they were created; the period is [start, end) in UTC.",
    "Busy time (GPU-hours): per worker, the union of the [started, finished] intervals of the jobs it "
    "rendered, so jobs rendered together count once. Idle time between jobs is not busy time.",
    "x real time = audio seconds / busy seconds; audio s per GPU-hour = 3600 x that. Utilization = "
    "busy time / (workers seen x period length).",
    "Cost = busy GPU-hours x the configured price per GPU-hour of the device type (SYNTH_GPU_PRICES); "
    "idle GPUs are not charged here. Rows with an unpriced device type have no cost.",
    "Percentiles are nearest-rank. TTFB = first audio available - submission; RTF = synthesis / audio.",
    "Checked against the text: the share of done jobs with a verdict that is clean (SYNTH_VERIFY says "
    "which jobs are checked); the worst are the bad jobs, then the suspect ones, highest character error "
    "rate first.",
    "Padding and idle-slot waste come from job_metrics.extra (padded_tokens / tokens, idle_slot_steps / "
    "slot_steps) where the engine records them; slot fill = batch size / extra.max_batch.",
)


@dataclass
class Percentiles:
    n: int
    p50: float | None
    p95: float | None
    p99: float | None
    mean: float | None

    @classmethod
    def of(cls, values: list[float]) -> Percentiles:
        return cls(
            n=len(values),
            p50=percentile(values, 50),
            p95=percentile(values, 95),
            p99=percentile(values, 99),
            mean=sum(values) / len(values) if values else None,
        )


@dataclass
class ThroughputRow:
    key: str
    jobs: int
    audio_s: float
    busy_s: float
    workers: int
    x_realtime: float | None
    audio_s_per_gpu_hour: float | None
    utilization: float | None
    cost: float | None  # None: a device type in this row has no price
    cost_per_audio_hour: float | None
    device_types: list[str] = field(default_factory=list)


@dataclass
class Batching:
    jobs_with_size: int
    mean_batch_size: float | None
    sizes: dict[int, int]  # batch size -> jobs rendered in a batch of that size
    slot_fill: float | None  # mean batch_size / extra.max_batch
    padding_fraction: float | None  # padded_tokens / (tokens + padded_tokens)
    idle_slot_fraction: float | None  # idle_slot_steps / slot_steps
    jobs_with_extra: int


@dataclass
class Verification:
    """The checks of done jobs' audio against their text (pipeline/verify)."""

    checked: int  # done jobs with a verdict
    verdicts: dict[str, int]  # clean, suspect, bad, not_checked -> jobs
    clean_share: float | None  # clean / checked
    worst: list[dict]  # the bad, then suspect, jobs: batch_id, client_id, verdict, reasons, cer


@dataclass
class Series:
    bin_s: int
    starts: list[datetime]
    audio_s: list[float]  # audio finished in each bin
    ttfb_s: list[float]  # every TTFB of the period, for the distribution plot


@dataclass
class Report:
    period_start: datetime
    period_end: datetime
    generated_at: datetime
    jobs_by_state: dict[str, int]
    batches_by_state: dict[str, int]
    jobs_done: int
    jobs_failed: int
    characters: int
    audio_s: float
    failures_by_reason: dict[str, int]
    overall: ThroughputRow
    throughput: dict[str, list[ThroughputRow]]
    ttfb: dict[str, Percentiles]
    rtf: dict[str, Percentiles]
    queue_wait: dict[str, Percentiles]
    batching: Batching
    unpriced_device_types: list[str]
    series: Series
    verification: Verification | None = None
    # Done jobs whose audio was copied from an earlier render (pipeline/reuse.py), and the engine
    # seconds (GPU seconds, on GPU workers) those renders took, not spent again.
    reused: int = 0
    reused_s: float = 0.0
    # per API key (queries.usage_by_key): key_id, name, jobs_done, jobs_failed, characters, audio_s
    by_key: list[dict] = field(default_factory=list)
    headline: dict[str, float | None] = field(default_factory=dict)
    previous: dict[str, float | None] = field(default_factory=dict)
    changes: dict[str, float | None] = field(default_factory=dict)
    notes: tuple[str, ...] = NOTES

    @property
    def audio_hours(self) -> float:
        return self.audio_s / 3600

    def to_dict(self, *, series: bool = True) -> dict:
        out = dataclasses.asdict(self)
        out["audio_hours"] = self.audio_hours
        out["notes"] = list(self.notes)
        if not series:
            out.pop("series")
        return _jsonable(out)


def _jsonable(value):
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
