"""What the database and Redis recorded of a run through synth: a batch's audio, wall time and
timeline, and the realtime streams' jobs as the worker recorded them, stage by stage."""

from __future__ import annotations

import redis
from sqlalchemy import func, select

from ops.bench.e2e.streams import percentile
from ops.bench.scale import per_worker_truth
from pipeline import live
from pipeline.db.models import Batch, Job, JobMetrics, as_utc
from pipeline.db.session import make_engine, make_sessionmaker


def batch_figures(db_url: str, name: str, wall_s: float, started_wall: float | None = None) -> dict:
    """The batch's audio over the command's wall time, and the precisions its first job recorded;
    with ``started_wall`` (Unix time the command started), its timeline in seconds from then: the
    batch's row written, the first and the last claim, the last job finished."""
    sessions = make_sessionmaker(make_engine(db_url))
    with sessions() as s:
        batch_id, created = s.execute(select(Batch.id, Batch.created_at).where(Batch.name == name)).one()
        audio, jobs = s.execute(
            select(func.sum(JobMetrics.audio_s), func.count())
            .join(Job, Job.id == JobMetrics.job_id)
            .where(Job.batch_id == batch_id)
        ).one()
        errors = s.scalars(select(Job.error).where(Job.batch_id == batch_id, Job.status == "failed")).all()
        extra = s.scalars(
            select(JobMetrics.extra).join(Job, Job.id == JobMetrics.job_id).where(Job.batch_id == batch_id).limit(1)
        ).first()
        claims = s.execute(
            select(func.min(Job.started_at), func.max(Job.started_at), func.max(Job.finished_at)).where(
                Job.batch_id == batch_id
            )
        ).one()
    audio = float(audio or 0)
    workers = {
        host: {"jobs": w["jobs"], "audio_s": round(w["audio_s"], 1)}
        for host, w in sorted(per_worker_truth(sessions, batch_id).items())
    }
    out = {
        "jobs_done": jobs,
        "jobs_failed": len(errors),
        "failures": sorted(set(errors))[:3],
        "audio_s": round(audio, 1),
        "wall_s": round(wall_s, 2),
        "x_real_time": round(audio / wall_s, 1) if wall_s else None,
        "workers": workers,
        # the precisions the engine ran at, as a job recorded them (pipeline/job_record.py)
        "precision": (extra or {}).get("precision"),
    }
    if started_wall is not None:
        marks = dict(zip(("first_claim", "last_claim", "last_finished"), claims), created=created)
        out["timeline_s"] = {
            k: round(as_utc(v).timestamp() - started_wall, 2) for k, v in marks.items() if v is not None
        }
    return out


def realtime_job_ids(db_url: str) -> set[str]:
    with make_sessionmaker(make_engine(db_url))() as s:
        return set(s.scalars(select(Job.id).where(Job.priority == "realtime")))


def server_figures(db_url: str, before: set[str]) -> dict:
    """The streams' jobs as the worker recorded them: request to first audio in the worker
    (ttfb; the client's first byte less this is the live path), and its first part, request to
    the engine (queue wait), split at the claim: the message's way to a worker thread, then the
    claim and the text front end."""
    with make_sessionmaker(make_engine(db_url))() as s:
        rows = [
            r
            for r in s.execute(
                select(
                    Job.id, JobMetrics.ttfb_s, JobMetrics.queue_wait_s, Job.queued_at, Job.created_at, Job.started_at
                )
                .join(JobMetrics, JobMetrics.job_id == Job.id)
                .where(Job.priority == "realtime")
            )
            if r[0] not in before
        ]
    ttfb, wait = [r[1] for r in rows], [r[2] for r in rows]
    split = [((as_utc(r[5]) - as_utc(r[3] or r[4])).total_seconds(), r[2]) for r in rows if r[5]]
    to_claim, claim_on = [c for c, _ in split], [w - c for c, w in split]
    return {
        "jobs": len(rows),
        **{f"ttfb_p{q}_ms": _ms(percentile(ttfb, q)) for q in (50, 95, 99)},
        **{f"queue_wait_p{q}_ms": _ms(percentile(wait, q)) for q in (50, 99)},
        **{f"to_claim_p{q}_ms": _ms(percentile(to_claim, q)) for q in (50, 99)},
        **{f"claim_and_front_p{q}_ms": _ms(percentile(claim_on, q)) for q in (50, 99)},
    }


def stage_figures(db_url: str, client: redis.Redis, streams: list) -> dict:
    """Where each stream's first byte and last byte spent their time, p50 / p99 in ms, from the
    clocks of the client, the database and Redis (one host): the request to the job's row
    (the API), the row to the worker's claim, the claim to the worker's first audio, that to the
    first audio entry in the job's Redis stream (the engine's publisher), and that to the client's
    first byte (the API's live path and HTTP); then the last audio entry to the client's last byte."""
    ids = {s.job_id: s for s in streams if s.job_id and s.arrivals and not s.error}
    with make_sessionmaker(make_engine(db_url))() as session:
        rows = session.execute(
            select(Job.id, Job.created_at, Job.started_at, JobMetrics.ttfb_s)
            .join(JobMetrics, JobMetrics.job_id == Job.id)
            .where(Job.id.in_(list(ids)))
        ).all()
    stages: dict[str, list[float]] = {
        k: [] for k in ("api", "to_claim", "claim_to_audio", "publish", "deliver_first", "deliver_last")
    }
    for job_id, created, started, ttfb in rows:
        stream = ids[job_id]
        entries = client.xrange(live.stream_key(job_id))
        pcm = [int(eid.split(b"-")[0]) / 1000 for eid, fields in entries if fields.get(b"kind") == live.PCM]
        created_s = as_utc(created).timestamp()
        first_audio = created_s + ttfb
        stages["api"].append(created_s - stream.wall(stream.sent))
        if started is not None:
            stages["to_claim"].append(as_utc(started).timestamp() - created_s)
            stages["claim_to_audio"].append(first_audio - as_utc(started).timestamp())
        if pcm:
            stages["publish"].append(pcm[0] - first_audio)
            stages["deliver_first"].append(stream.wall(stream.arrivals[0][0]) - pcm[0])
            stages["deliver_last"].append(stream.wall(stream.arrivals[-1][0]) - pcm[-1])
    return {"jobs": len(rows), **{f"{k}_p{q}_ms": _ms(percentile(v, q)) for k, v in stages.items() for q in (50, 99)}}


def cut_figures(db_url: str, client: redis.Redis, streams: list) -> dict:
    """Why the streams that failed at the client failed, as the server recorded it: each one's job
    (its status, attempts and error in the database) and its live copy in Redis (how many times it
    started: a second start is a retry, which the API answers by cutting the stream; its end's
    error). Counted by reason, so a run that cut streams says why without the server's logs."""
    failed = [s for s in streams if s.error]
    ids = [s.job_id for s in failed if s.job_id]
    with make_sessionmaker(make_engine(db_url))() as session:
        jobs = {
            row[0]: row[1:]
            for row in session.execute(select(Job.id, Job.status, Job.attempts, Job.error).where(Job.id.in_(ids)))
        }
    reasons: dict[str, int] = {}
    for stream in failed:
        reason = f"no job named in a response: {stream.error[:120]}"
        if stream.job_id in jobs:
            status, attempts, error = jobs[stream.job_id]
            status = getattr(status, "value", status)
            entries = [f for _, f in client.xrange(live.stream_key(stream.job_id))]
            starts = sum(1 for f in entries if f.get(b"kind") == live.START)
            ends = [
                f[b"error"].decode(errors="replace") for f in entries if f.get(b"kind") == live.END and f.get(b"error")
            ]
            if starts > 1 or (attempts or 0) > 1:
                reason = f"retried ({attempts} attempts, {starts} live starts)"
            elif ends:
                reason = f"live copy ended with: {ends[0][:120]}"
            elif error:
                reason = f"job {status}: {error[:120]}"
            else:
                copy = (
                    "whole" if any(f.get(b"kind") == live.END for f in entries) else "unfinished" if entries else "gone"
                )
                reason = f"job {status}, live copy {copy}: cut between Redis and the client"
        reasons[reason] = reasons.get(reason, 0) + 1
    return {"streams": len(failed), "reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1]))}


def _ms(v: float | None) -> float | None:
    return None if v is None else round(1000 * v, 1)
