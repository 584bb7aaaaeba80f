"""The README and docs/ say what the code does: the configuration page is the one the settings
write, and every setting and route the pages name exists."""

from __future__ import annotations

import re

import pytest

from pipeline.settings import Settings
from pipeline.settings_doc import COMMAND, DOC, render
from tests.conftest import REPO

# The pages this suite keeps true (docs/performance.md records measurements and is kept by hand).
PAGES = [REPO / "README.md", *sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "performance.md")]
ROUTE = re.compile(r"\b(GET|POST|PUT|PATCH|DELETE|OPTIONS)\s+(/[\w/{}.-]*)")


def variables_read_by_the_code() -> set[str]:
    """SYNTH_* names that are not fields of Settings but that the code reads."""
    names = {"SYNTH_CONFIG"}
    for path in (REPO / "pipeline").rglob("*.py"):
        names |= set(re.findall(r"""environ\.get\(\s*["'](SYNTH_\w+)""", path.read_text()))
    return names


def test_the_configuration_page_is_what_the_settings_class_writes():
    assert DOC.read_text() == render(), (
        f"docs/configuration.md differs from pipeline/settings.py: regenerate it with `{COMMAND}`")


def test_every_setting_the_pages_name_exists():
    known = {f"SYNTH_{name.upper()}" for name in Settings.model_fields} | variables_read_by_the_code()
    unknown = {}
    for page in PAGES:
        named = set(re.findall(r"\bSYNTH_[A-Z0-9_]*[A-Z0-9]\b", page.read_text()))
        wrong = sorted(n for n in named if n not in known and not n.startswith("SYNTH_TEST_"))
        if wrong:
            unknown[page.relative_to(REPO).as_posix()] = wrong
    assert not unknown, f"settings named in the docs that the code does not read: {unknown}"


def test_every_route_the_pages_name_is_served_and_docs_api_names_every_route():
    pytest.importorskip("fastapi", reason="the API is the api extra")
    from api.app import create_app

    app = create_app(Settings(), broker_url="redis://127.0.0.1:1/0")     # built, never started
    served = {(method.upper(), re.sub(r"{[^}]*}", "{}", path))
              for path, operations in app.openapi()["paths"].items() for method in operations}
    named_in = {page: {(m, re.sub(r"{[^}]*}", "{}", p)) for m, p in ROUTE.findall(page.read_text())}
                for page in PAGES}
    wrong = {page.name: sorted(named - served) for page, named in named_in.items() if named - served}
    assert not wrong, f"routes named in the docs that the API does not serve: {wrong}"
    missing = served - named_in[REPO / "docs" / "api.md"]
    assert not missing, f"routes the API serves that docs/api.md does not name: {sorted(missing)}"


LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_every_relative_link_of_the_pages_leads_to_a_file():
    broken = {}
    for page in [*PAGES, REPO / "docs" / "performance.md", REPO / "ops" / "README.md"]:
        targets = {t.split("#", 1)[0] for t in LINK.findall(page.read_text()) if "://" not in t and not t.startswith("#")}
        missing = sorted(t for t in targets if t and not (page.parent / t).exists())
        if missing:
            broken[page.relative_to(REPO).as_posix()] = missing
    assert not broken, f"links to files that do not exist: {broken}"
