"""A database filled with known jobs and metrics, so every number in a report can be worked out by
hand. Period under test: [T0, T0 + 24 h); one job in the previous day for the comparison."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pipeline.db.models import Batch, Job, JobMetrics, JobStatus

T0 = datetime(2026, 1, 10, tzinfo=UTC)
UNTIL = T0 + timedelta(hours=24)
H100, EPYC = "NVIDIA H100 80GB HBM3", "AMD EPYC 7R13"
PRICES = {H100: 3.6}
EXTRA = {"max_batch": 4, "tokens": 900, "padded_tokens": 100, "slot_steps": 1000, "idle_slot_steps": 250}


def at(hours: float = 0, seconds: float = 0) -> datetime:
    return T0 + timedelta(hours=hours, seconds=seconds)


# name, worker, device, engine, model, quant, priority, start, busy s, audio s, ttfb, queue wait,
# batch size, extra, text length
DONE = [
    ("j1", "hostA/gpu0", H100, "orpheus", "orpheus-3b", "none", "batch", at(1), 100, 1000, 1.0, 10, 2, EXTRA, 100),
    ("j2", "hostA/gpu0", H100, "orpheus", "orpheus-3b", "none", "batch", at(1, 50), 150, 500, 2.0, 20, 2, EXTRA, 50),
    ("j3", "hostA/gpu0", H100, "orpheus", "orpheus-3b", "none", "batch", at(2), 100, 300, 3.0, 30, 1, None, 30),
    ("j4", "hostA/gpu1", H100, "orpheus", "orpheus-3b", "int8", "batch", at(3), 400, 2000, 4.0, 40, 1, None, 20),
    ("j5", "hostB/cpu", EPYC, "piper", "en_US-joe-medium", "none", "realtime", at(4), 600, 300, 0.5, 0.1, 1, None, 10),
]
FAILED = [
    ("f1", "nothing speakable in line: '--- ... ---'"),
    ("f2", "nothing speakable in line: '!!!'"),
    ("f3", "gave up after 5 retries: database unreachable while claiming jobs"),
    ("f4", "internal error: KeyError: 'abc123'"),
]


def _job(batch: Batch, name: str, status: JobStatus, created: datetime, **kw) -> Job:
    return Job(
        id=name.ljust(8, "x"),
        batch_id=batch.id,
        client_id=name,
        text=kw.pop("text", "hello"),
        voice="joe",
        format="wav",
        priority=kw.pop("priority", "batch"),
        status=status,
        attempts=1,
        created_at=created,
        updated_at=created,
        **kw,
    )


def fill(session) -> None:
    old = Batch(id="b0", voice="joe", format="wav", created_at=at(-13), finished_at=at(-11))
    done = Batch(id="b1", voice="joe", format="wav", created_at=at(0.5), finished_at=at(5))
    open_ = Batch(id="b2", voice="joe", format="wav", created_at=at(5))
    session.add_all([old, done, open_])
    session.flush()
    for name, worker, device, engine, model, quant, prio, start, busy, audio, ttfb, wait, size, extra, chars in DONE:
        job = _job(
            done,
            name,
            JobStatus.DONE,
            at(0.5),
            text="a" * chars,
            priority=prio,
            started_at=start,
            finished_at=start + timedelta(seconds=busy),
        )
        job.metrics = JobMetrics(
            queue_wait_s=wait,
            ttfb_s=ttfb,
            synth_s=busy,
            audio_s=audio,
            rtf=busy / audio,
            engine=engine,
            model=model,
            quantization=quant,
            device_type=device,
            worker_host=worker,
            batch_size=size,
            extra=extra,
        )
        session.add(job)
    for name, error in FAILED:
        session.add(
            _job(done, name, JobStatus.FAILED, at(0.5), error=error, started_at=at(4.5), finished_at=at(4.5, 1))
        )
    session.add(_job(open_, "q1", JobStatus.QUEUED, at(5)))
    # The previous day: one job on gpu0, 600 s of audio in 100 busy seconds (6x real time).
    prev = _job(old, "p1", JobStatus.DONE, at(-13), started_at=at(-12), finished_at=at(-12, 100))
    prev.metrics = JobMetrics(
        queue_wait_s=5,
        ttfb_s=1.5,
        synth_s=100,
        audio_s=600,
        rtf=1 / 6,
        engine="orpheus",
        model="orpheus-3b",
        quantization="none",
        device_type=H100,
        worker_host="hostA/gpu0",
        batch_size=1,
    )
    session.add(prev)
    # After the period: must not count.
    late = _job(open_, "late", JobStatus.DONE, at(25), started_at=at(25), finished_at=at(25, 10))
    late.metrics = JobMetrics(
        audio_s=999,
        ttfb_s=9,
        synth_s=10,
        rtf=0.01,
        engine="piper",
        model="m",
        quantization="none",
        device_type=EPYC,
        worker_host="hostB/cpu",
        batch_size=1,
    )
    session.add(late)
    session.commit()
