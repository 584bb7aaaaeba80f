"""Lexicons in the database (SQLite and PostgreSQL): every change a new version, the old ones kept
as they were, nothing half-applied, and each owner seeing only its own."""

from __future__ import annotations

import pytest

from pipeline.errors import InputError
from pipeline.lexicon import store
from pipeline.lexicon.entries import Entry

CHECK = store.Checker("piper", lambda: frozenset("ŋwɪn"))


def test_changes_make_versions_old_versions_stay_and_a_bad_change_writes_nothing(sessions):
    with sessions() as s:
        lexicon = store.create(s, CHECK, owner="a", name="default", entries=[Entry("SQL", alias="sequel")])
        assert store.change(s, CHECK, lexicon, added=[Entry("ICU", alias="intensive care unit")])
        assert not store.change(s, CHECK, lexicon, added=[Entry("ICU", alias="intensive care unit")])
        with pytest.raises(InputError, match="would match"):
            store.change(s, CHECK, lexicon, added=[Entry("GIF", alias="jif"), Entry("*", alias="x", pattern=True)])
        with pytest.raises(InputError, match="no entry for 'SQLX'"):
            store.change(s, CHECK, lexicon, removed=["SQL", "SQLX"])
        assert store.change(s, CHECK, lexicon, removed=["sql"])
        s.commit()
        lexicon_id = lexicon.id
    with sessions() as s:
        found = store.find(s, owner="a", ref="default")
        assert (found.id, found.version, found.entry_count) == (lexicon_id, 3, 1)
        assert [e.written for e in store.entries_at(s, lexicon_id, 1)] == ["SQL"]
        assert [e.written for e in store.entries_at(s, lexicon_id, 2)] == ["SQL", "ICU"]
        assert [e.written for e in store.entries_at(s, lexicon_id, 3)] == ["ICU"]
        assert store.pin(s, owner="a", ref=None) == store.Pin(lexicon_id, 3)
        assert store.pin(s, owner="a", ref="default", version=1) == store.Pin(lexicon_id, 1)
        with pytest.raises(InputError, match="has versions 1 to 3, not 4"):
            store.pin(s, owner="a", ref="default", version=4)


def test_another_owner_neither_finds_nor_defaults_to_the_lexicon(sessions):
    with sessions() as s:
        lexicon = store.create(s, CHECK, owner="a", name="default", entries=[])
        s.commit()
        for ref in ("default", lexicon.id):
            with pytest.raises(store.NotFound):
                store.find(s, owner="b", ref=ref)
        assert store.pin(s, owner="b", ref=None) is None
        with pytest.raises(InputError, match="exists already"):
            store.create(s, CHECK, owner="a", name="default", entries=[])
