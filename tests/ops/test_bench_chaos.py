"""The chaos run, short: each fault (workers killed, workers sent SIGTERM and replaced, Redis killed
and restarted from its AOF, the database and S3 cut off, every database backend terminated) strikes
while a small corpus renders, and afterwards every job is done or
failed with a reason, each done job has one object and nothing else has one, the manifest equals
the database, and the batch closed."""

import pytest

from ops.bench.chaos import FAULTS, Options, run, table

pytest.importorskip("piper", reason="the workers render with Piper")


@pytest.mark.slow
def test_no_fault_loses_or_strands_a_job(postgres_url):
    rounds = run(
        Options(
            database_url=postgres_url,
            jobs=24,
            workers=2,
            faults=FAULTS,
            fault_seconds=6,
            kills=2,
            visibility_timeout=20,
            settle_timeout=150,
        )
    )
    print(table(rounds))
    assert [r.fault for r in rounds] == list(FAULTS)
    for r in rounds:
        assert not r.problems, f"{r.fault}: {r.problems}"
        assert r.done + r.failed == r.jobs and r.objects == r.done
