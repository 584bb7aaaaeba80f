"""The schema check that every command makes at start reads the head from the migration files'
names (pipeline/db/migrate.py), without alembic: these keep that reading equal to alembic's."""

from __future__ import annotations

import re

from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

from pipeline.db import migrate


def test_the_head_read_from_file_names_is_alembics_head(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    scripts = ScriptDirectory.from_config(migrate.alembic_config(engine))
    assert migrate.head_revision() == scripts.get_current_head()


def test_each_revision_is_its_file_prefix_and_the_chain_is_linear():
    files = sorted((migrate.MIGRATIONS_DIR / "versions").glob("*.py"))
    previous = None
    for path in files:
        source = path.read_text()
        revision = re.search(r"^revision\s*=\s*['\"]([^'\"]+)['\"]", source, re.M).group(1)
        down = re.search(r"^down_revision\s*=\s*(?:['\"]([^'\"]+)['\"]|None)", source, re.M).group(1)
        assert revision == path.name.split("_", 1)[0], path.name
        assert down == previous, f"{path.name} follows {down}, not the file before it ({previous})"
        previous = revision


def test_a_database_is_current_only_at_the_head(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    assert migrate.current_revision(engine) is None and not migrate.is_current(engine)
    migrate.upgrade(engine, "0001")
    assert migrate.current_revision(engine) == "0001" and not migrate.is_current(engine)
    migrate.upgrade(engine)
    assert migrate.is_current(engine)
