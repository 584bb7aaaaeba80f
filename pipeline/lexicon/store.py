"""Lexicons in the database. Every lookup is scoped to the owner (an API key's id, or LOCAL_OWNER
in embedded mode), so another key's lexicon is simply not found. Every change writes a new version
holding all the entries; versions are never changed, so a job pinned to one renders the same
words however the lexicon changes after it was made."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import overload

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pipeline.db.models import utcnow
from pipeline.db.models_lexicons import LOCAL_OWNER, Lexicon, LexiconVersion  # noqa: F401 - re-exported
from pipeline.errors import InputError
from pipeline.lexicon.apply import Compiled
from pipeline.lexicon.entries import Entry, check_entry, check_lexicon, merge

DEFAULT_NAME = "default"  # the lexicon every new job of its owner uses unless told otherwise
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


class NotFound(InputError):
    """No lexicon (or batch) of that name or id for this owner (the API answers 404)."""


@dataclass(frozen=True)
class Pin:
    """The lexicon version a batch or job renders with."""

    lexicon_id: str
    version: int


@dataclass(frozen=True)
class Checker:
    """What entries are checked against: the engine's name and the phoneme symbols its voices
    say (``phonemes()``: None where it takes no phonemes), read only when an entry has phonemes.
    Built at the edge from the settings (``checker_for``)."""

    engine: str
    phonemes: Callable[[], frozenset[str] | None]

    def entries(self, entries: list[Entry]) -> list[Entry]:
        phonemes = self.phonemes() if any(e.phoneme is not None for e in entries) else None
        return [check_entry(e, phonemes, self.engine) for e in entries]


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InputError(
            f"lexicon name {str(name)[:60]!r}: use 1 to 100 ASCII letters, digits, _ . or -, "
            "starting with a letter or digit"
        )
    return name


def create(session: Session, checker: Checker, *, owner: str, name: str, entries: list[Entry]) -> Lexicon:
    """A new lexicon at version 1; the caller commits. InputError for a name in use or a bad entry."""
    checked = merge([], checker.entries(entries), [])
    check_lexicon(checked)
    lexicon = Lexicon(
        owner=owner,
        name=check_name(name),
        version=1,
        entry_count=len(checked),
        created_at=utcnow(),
        updated_at=utcnow(),
    )
    session.add(lexicon)
    try:
        session.flush()
    except IntegrityError as e:  # the unique (owner, name): the name is taken, perhaps a moment ago
        session.rollback()
        raise InputError(f"a lexicon named {name!r} exists already") from e
    session.add(LexiconVersion(lexicon_id=lexicon.id, version=1, entries=[e.to_dict() for e in checked]))
    session.flush()
    return lexicon


def find(session: Session, *, owner: str, ref: str) -> Lexicon:
    """The owner's lexicon with this id or name, or NotFound."""
    if not _NAME.fullmatch(ref):  # no name or id looks like this (nor may reach the database: NUL)
        raise NotFound(f"lexicon {ref[:100]!r} not found")
    found = (
        session.scalars(select(Lexicon).where(Lexicon.owner == owner, Lexicon.id == ref)).first()
        or session.scalars(select(Lexicon).where(Lexicon.owner == owner, Lexicon.name == ref)).first()
    )
    if found is None:
        raise NotFound(f"lexicon {ref[:100]!r} not found")
    return found


def find_or_new(session: Session, *, owner: str, ref: str) -> Lexicon | None:
    """The owner's lexicon with this id or name; None where ``ref`` is free to name a new one.
    Another owner's lexicon id is NotFound, as everywhere: it must not become a name of this owner's."""
    try:
        return find(session, owner=owner, ref=ref)
    except NotFound:
        if session.scalars(select(Lexicon.id).where(Lexicon.id == ref)).first() is not None:
            raise
        return None


def list_for(session: Session, *, owner: str) -> list[Lexicon]:
    return list(session.scalars(select(Lexicon).where(Lexicon.owner == owner).order_by(Lexicon.name)))


def change(
    session: Session,
    checker: Checker,
    lexicon: Lexicon,
    *,
    added: Sequence[Entry] = (),
    removed: Sequence[str] = (),
    replace: bool = False,
) -> bool:
    """A new version with ``added`` put in and ``removed`` taken out (``replace``: ``added`` is the
    whole lexicon). Everything is checked before anything is written; the caller commits. False,
    and no version, when nothing changes. A written form to remove that no entry has is an error:
    a typo must not pass as a change."""
    current = entries_at(session, lexicon.id, lexicon.version)
    present = {e.written.lower() for e in current}
    missing = [w for w in removed if w.strip().lower() not in present]
    if missing:
        raise InputError(f"no entry for {missing[0][:60]!r} in lexicon {lexicon.name!r}")
    entries = merge([] if replace else current, checker.entries(list(added)), list(removed))
    check_lexicon(entries)
    if set(entries) == set(current):
        return False
    lexicon.version += 1
    lexicon.entry_count = len(entries)
    lexicon.updated_at = utcnow()
    session.add(LexiconVersion(lexicon_id=lexicon.id, version=lexicon.version, entries=[e.to_dict() for e in entries]))
    session.flush()
    return True


def delete(session: Session, lexicon: Lexicon) -> None:
    """Remove a lexicon and its versions; the caller commits. A job still to render with it fails
    with that reason (pipeline/render.py)."""
    session.delete(lexicon)
    session.flush()


def entries_at(session: Session, lexicon_id: str, version: int) -> list[Entry]:
    row = session.get(LexiconVersion, (lexicon_id, version))
    if row is None:
        raise NotFound(f"lexicon {lexicon_id} version {version} no longer exists: the lexicon was deleted")
    return [Entry.from_dict(d) for d in row.entries]


@overload
def pin(session: Session, *, owner: str, ref: str, version: int | None = None) -> Pin: ...
@overload
def pin(session: Session, *, owner: str, ref: str | None, version: int | None = None) -> Pin | None: ...


def pin(session: Session, *, owner: str, ref: str | None, version: int | None = None) -> Pin | None:
    """The version a new batch renders with: ``ref``'s (at ``version``, else its latest), or the
    owner's default lexicon's latest where ``ref`` is None and it has one."""
    if ref is None:
        if version is not None:
            raise InputError("a lexicon version needs a lexicon")
        default = session.scalars(select(Lexicon).where(Lexicon.owner == owner, Lexicon.name == DEFAULT_NAME)).first()
        return Pin(default.id, default.version) if default is not None else None
    lexicon = find(session, owner=owner, ref=ref)
    if version is not None and not 1 <= version <= lexicon.version:
        raise InputError(f"lexicon {lexicon.name!r} has versions 1 to {lexicon.version}, not {version}")
    return Pin(lexicon.id, version or lexicon.version)


def changed_between(old: list[Entry], new: list[Entry]) -> list[Entry]:
    """The entries added, removed or changed from ``old`` to ``new``: a text that none of them
    matches reads the same with either version."""
    before, after = set(old), set(new)
    return [e for e in old + new if (e in before) != (e in after)]


class Versions:
    """Lexicon versions compiled for the front end, the most recent few kept: versions never
    change, and a worker renders many jobs of one version in a row."""

    SIZE = 32

    def __init__(self) -> None:
        self._kept: dict[tuple[str, int], Compiled] = {}
        self._lock = threading.Lock()

    def get(self, session: Session, pin: Pin) -> Compiled:
        """NotFound where the lexicon was deleted since the job was made."""
        key = (pin.lexicon_id, pin.version)
        with self._lock:
            found = self._kept.get(key)
        if found is None:
            found = Compiled(entries_at(session, pin.lexicon_id, pin.version))
            with self._lock:
                if len(self._kept) >= self.SIZE:
                    self._kept.pop(next(iter(self._kept)))
                self._kept[key] = found
        return found


def job_lexicon(sessions, versions: Versions, lexicon_id: str | None, version: int | None) -> Compiled | None:
    """A job's lexicon version, compiled, for checking its audio; None for a job without one, or
    one whose lexicon was deleted since it rendered (its check then reads the text as written)."""
    if lexicon_id is None or version is None:
        return None
    try:
        with sessions() as session:
            return versions.get(session, Pin(lexicon_id, version))
    except NotFound:
        return None


def checker_for(engine_settings) -> Checker:
    """The Checker of the engine the settings name (engines/registry.py)."""
    from pipeline.engines.registry import engine_phonemes

    return Checker(engine_settings.engine, lambda: engine_phonemes(engine_settings))
