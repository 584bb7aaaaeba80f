import pytest

from pipeline.corpus import Corpus
from pipeline.db import jobs as db
from pipeline.db.models import TRANSITIONS, Job, JobStatus
from pipeline.errors import IllegalTransitionError, InputError, UnknownVoiceError
from pipeline.settings import Settings
from pipeline.submit import BatchOptions, create_batch


def make_batch(sessions, n=3, settings=None):
    corpus = Corpus(lines=[(i + 1, f"Line number {i}.") for i in range(n)])
    with sessions() as s:
        batch = create_batch(s, settings or Settings(), corpus, BatchOptions(name="t"), source="t.txt")
        s.commit()
        return batch.id, [j for j in db.job_ids_by_queue(s, batch.id).values()][0]


def status_of(sessions, job_id):
    with sessions() as s:
        return s.get(Job, job_id).status


def test_terminal_states_go_nowhere():
    for state in (JobStatus.DONE, JobStatus.CANCELLED):
        assert TRANSITIONS[state] == frozenset()


def test_lifecycle_and_illegal_moves(sessions):
    batch_id, ids = make_batch(sessions)
    with sessions() as s:
        assert db.mark_batch_queued(s, batch_id) == 3
        s.commit()
        claimed = db.claim(s, ids[:2])
        assert [j.id for j in claimed] == ids[:2] and all(j.attempts == 1 for j in claimed)
        db.finish(s, claimed[0], object_key="k", metrics={"audio_s": 1.0})
        s.commit()
        # a finished job cannot be claimed again: a redelivered message is harmless
        assert db.claim(s, ids[:1]) == []
        assert db.transition(s, ids[:1], JobStatus.QUEUED) == 0
        with pytest.raises(IllegalTransitionError):
            db.finish(s, claimed[0], object_key="k2", metrics={})
        s.rollback()
        # a running job redelivered after a lost worker is claimed again, attempts counted
        again = db.claim(s, ids[1:2])
        assert again[0].attempts == 2
        assert db.fail(s, ids[2], "bad") == 1
        s.commit()
    assert [status_of(sessions, i) for i in ids] == [JobStatus.DONE, JobStatus.RUNNING, JobStatus.FAILED]
    with sessions() as s:
        counts = db.status_counts(s, batch_id)
        assert counts[JobStatus.DONE] == 1 and not db.batch_finished(s, batch_id)


def test_batch_lookup_by_prefix_and_name(sessions):
    batch_id, _ = make_batch(sessions, n=1)
    with sessions() as s:
        assert db.find_batch(s, batch_id[:8]).id == batch_id
        assert db.find_batch(s, "t").id == batch_id
        assert db.find_batch(s, "nope") is None


def test_unknown_voice_and_rate_are_refused_before_writing(sessions):
    corpus = Corpus(lines=[(1, "x")])
    with sessions() as s:
        with pytest.raises(UnknownVoiceError, match="choose one of joe"):
            create_batch(s, Settings(), corpus, BatchOptions(voice="nobody"), source="-")
        with pytest.raises(InputError, match="sample rate"):
            create_batch(s, Settings(), corpus, BatchOptions(sample_rate=12345), source="-")
