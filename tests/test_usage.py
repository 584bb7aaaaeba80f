"""A job is counted in its key's usage once: in the transaction that marks it done, so a worker
that dies before committing counts nothing, and a redelivered or repeated finish counts nothing
more. Both databases (the upsert is written per dialect)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from pipeline import api_keys, usage
from pipeline.db import jobs as db
from pipeline.db.models import Job
from pipeline.errors import IllegalTransitionError, InputError
from pipeline.submit import BatchOptions, Item, create_item_batch

METRICS = {"audio_s": 1.5, "synth_s": 0.1}


def today(sessions, key_id: str) -> usage.Counts:
    with sessions() as s:
        return usage.counts(s, [key_id], usage.utc_day(), usage.utc_day()).get(key_id, usage.Counts())


def test_a_job_is_counted_once_however_often_its_finish_is_tried(sessions, settings):
    with sessions() as s:
        key_id = api_keys.create_key(s, name="t").key.id
        batch = create_item_batch(
            s,
            settings,
            [Item(text="Four words here."), Item(text="Two.")],
            BatchOptions(),
            source="api",
            owner_key_id=key_id,
        )
        s.commit()
        job_ids = list(s.scalars(select(Job.id).where(Job.batch_id == batch.id).order_by(Job.client_id)))
    with sessions() as s:
        first, second = db.claim(s, job_ids)
        db.finish(s, first, object_key="a.wav", metrics=METRICS)
        s.rollback()  # the worker died before its commit
    assert today(sessions, key_id) == usage.Counts()
    with sessions() as s:
        first, second = db.claim(s, job_ids)  # redelivered: both run again
        db.finish(s, first, object_key="a.wav", metrics=METRICS)
        s.commit()
        db.finish(s, second, object_key="b.wav", metrics=METRICS)
        s.commit()
    with sessions() as s:
        assert db.claim(s, job_ids) == []  # a late redelivery claims nothing
        done = s.get(Job, job_ids[0])
        with pytest.raises(IllegalTransitionError):
            db.finish(s, done, object_key="a.wav", metrics=METRICS)
        s.rollback()
    assert today(sessions, key_id) == usage.Counts(jobs=2, chars=len("Four words here.") + len("Two."), audio_s=3.0)


@pytest.mark.parametrize(
    "name, value",
    [
        ("chars_per_day", 10**23),
        ("audio_s_per_day", float("nan")),
        ("audio_s_per_day", float("inf")),
        ("live_streams", 2**31),
    ],
)
def test_a_quota_the_column_cannot_hold_is_refused(sessions, name, value):
    with sessions() as s:
        key_id = api_keys.create_key(s, name="q").key.id
        with pytest.raises(InputError, match=f"{name} .*give a number from 0 to"):
            usage.set_quotas(s, key_id, {name: value})
