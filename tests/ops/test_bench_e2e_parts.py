"""The end-to-end bench's own arithmetic: a repeated corpus whose copies never share a line, dry
streams counted for a player that buffers as well as strictly, the checks' CPU counted with the
verify worker's pool, and the server's reason for each stream cut at the client."""

from __future__ import annotations

import subprocess
import sys

import pytest
import redis

from ops.bench.e2e.fleet import LEADS, cpu_seconds, distinct_copies, worker_slots
from ops.bench.e2e.recorded import cut_figures
from ops.bench.e2e.streams import PCM_BYTES_PER_S, Stream, summarize
from ops.bench.e2e.verifying import require_recognizer, tree_cpu_seconds
from pipeline import live
from pipeline.db.models import Batch, Job, JobStatus


def test_copies_of_a_corpus_are_distinct_lines_and_the_first_is_the_corpus():
    lines = ["Hello there.", "The meeting moved to noon.", "Hello there."[:5]]
    copies = distinct_copies(lines, 2 * len(LEADS) + 3)
    assert copies[: len(lines)] == lines
    per_copy = [copies[i : i + len(lines)] for i in range(0, len(copies), len(lines))]
    firsts = [copy[0] for copy in per_copy]
    assert len(set(firsts)) == len(firsts)  # past the single words too, no two copies alike
    assert per_copy[1] == [f"{LEADS[0]}, hello there.", f"{LEADS[0]}, the meeting moved to noon.", f"{LEADS[0]}, hello"]


def test_a_later_run_continues_where_the_batch_copies_ended():
    lines = ["One line.", "Another line."]
    first, later = distinct_copies(lines, 3), distinct_copies(lines, 2, first=3)
    assert not set(first) & set(later)


def test_worker_slots_follow_gpus_then_gpu_or_count_cpu_workers():
    assert worker_slots("0, 1,2,3", 0, False, 1) == ["0", "1", "2", "3"]
    assert worker_slots(None, 2, False, 1) == ["2"]
    assert worker_slots("0,1", 0, True, 3) == ["0", "1", "2"]


def _stream(*arrivals: tuple[float, float]) -> Stream:
    """Chunks as (arrival s, audio s)."""
    s = Stream(0)
    s.arrivals = [(t, round(audio * PCM_BYTES_PER_S)) for t, audio in arrivals]
    return s


def test_a_gap_shorter_than_the_buffer_is_dry_only_for_the_strict_player():
    gap = _stream((0.0, 0.1), (0.15, 0.1))  # the second chunk 50 ms after the first ran out
    assert gap.underruns()[0] == 1
    assert abs(gap.underruns()[1] - 0.05) < 1e-9
    assert gap.underruns(0.1) == (0, 0.0)
    late = _stream((0.0, 0.1), (0.45, 0.1))  # 350 ms late: dry behind either buffer
    assert late.underruns(0.1)[0] == late.underruns(0.2)[0] == 1
    assert abs(late.underruns(0.2)[1] - 0.15) < 1e-9
    on_time = _stream((0.0, 0.1), (0.05, 0.1))
    summary = summarize([gap, late, on_time])
    assert (summary["streams_dry"], summary["streams_dry_100ms"], summary["streams_dry_200ms"]) == (2, 1, 1)


def test_checks_need_their_recognizer_before_the_bench_starts_anything():
    with pytest.raises(SystemExit, match="--verify-workers: .*cannot be loaded"):
        require_recognizer("no_such_package.module:Recognizer")


def test_the_verify_workers_cpu_counts_their_pool_processes():
    """A parent that spends nothing, its child one CPU-bound fifth of a second: the tree has both."""
    child = "import time\nwhile time.process_time() < 0.2: pass\nprint('done', flush=True)\ntime.sleep(60)"
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}])"],
        stdout=subprocess.PIPE,
    )
    try:
        assert parent.stdout.readline() == b"done\n"
        assert tree_cpu_seconds(parent.pid) >= 0.2 > cpu_seconds(parent.pid)
    finally:
        parent.kill()
        parent.wait()


def test_streams_cut_at_the_client_are_counted_by_the_servers_reason(database_url, sessions, redis_url):
    client = redis.Redis.from_url(live.redis_client_url(redis_url))
    with sessions() as s:
        batch = Batch(name="streams", voice="tara", format="wav")
        s.add(batch)
        s.flush()

        def job(name: str, **fields) -> Job:
            return Job(batch_id=batch.id, client_id=name, text=name, voice="tara", format="wav", **fields)

        rows = {
            "retried": job("retried", attempts=2),
            "failed": job("failed", attempts=1, status=JobStatus.FAILED, error="the engine failed"),
            "ended": job("ended", attempts=1),
            "whole": job("whole", attempts=1, status=JobStatus.DONE),
        }
        s.add_all(rows.values())
        s.commit()
        ids = {name: job.id for name, job in rows.items()}
    entries = {
        "retried": [{"kind": live.START}, {"kind": live.PCM, "data": b"\0\0"}, {"kind": live.START}],
        "ended": [{"kind": live.START}, {"kind": live.END, "error": "out of device memory"}],
        "whole": [{"kind": live.START}, {"kind": live.PCM, "data": b"\0\0"}, {"kind": live.END, "error": ""}],
    }
    for name, fields in entries.items():
        for f in fields:
            client.xadd(live.stream_key(ids[name]), f)
    cut = "RemoteProtocolError: peer closed connection without sending complete message body"
    streams = [Stream(i, error=cut, job_id=job_id) for i, job_id in enumerate(ids.values())]
    streams += [Stream(8, error="APIStatusError: 503"), Stream(9, job_id=ids["whole"])]  # the last one played

    figures = cut_figures(database_url, client, streams)

    assert figures["streams"] == 5
    assert figures["reasons"] == {
        "retried (2 attempts, 2 live starts)": 1,
        "job failed: the engine failed": 1,
        "live copy ended with: out of device memory": 1,
        "job done, live copy whole: cut between Redis and the client": 1,
        "no job named in a response: APIStatusError: 503": 1,
    }
