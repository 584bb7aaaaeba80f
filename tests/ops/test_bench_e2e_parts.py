"""The end-to-end bench's own arithmetic: a repeated corpus whose copies never share a line, and dry
streams counted for a player that buffers as well as strictly."""

from __future__ import annotations

from ops.bench.e2e.fleet import LEADS, distinct_copies, worker_slots
from ops.bench.e2e.streams import PCM_BYTES_PER_S, Stream, summarize


def test_copies_of_a_corpus_are_distinct_lines_and_the_first_is_the_corpus():
    lines = ["Hello there.", "The meeting moved to noon.", "Hello there."[:5]]
    copies = distinct_copies(lines, 2 * len(LEADS) + 3)
    assert copies[: len(lines)] == lines
    per_copy = [copies[i: i + len(lines)] for i in range(0, len(copies), len(lines))]
    firsts = [copy[0] for copy in per_copy]
    assert len(set(firsts)) == len(firsts)   # past the single words too, no two copies alike
    assert per_copy[1] == [f"{LEADS[0]}, hello there.", f"{LEADS[0]}, the meeting moved to noon.",
                           f"{LEADS[0]}, hello"]


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
    gap = _stream((0.0, 0.1), (0.15, 0.1))          # the second chunk 50 ms after the first ran out
    assert gap.underruns()[0] == 1
    assert abs(gap.underruns()[1] - 0.05) < 1e-9
    assert gap.underruns(0.1) == (0, 0.0)
    late = _stream((0.0, 0.1), (0.45, 0.1))         # 350 ms late: dry behind either buffer
    assert late.underruns(0.1)[0] == late.underruns(0.2)[0] == 1
    assert abs(late.underruns(0.2)[1] - 0.15) < 1e-9
    on_time = _stream((0.0, 0.1), (0.05, 0.1))
    summary = summarize([gap, late, on_time])
    assert (summary["streams_dry"], summary["streams_dry_100ms"], summary["streams_dry_200ms"]) == (2, 1, 1)
