"""The README and docs/ say what the code does: the configuration page is the one the settings
write, every setting and route the pages name exists, every benchmark they show runs, and every
link to a heading finds it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.settings import Settings
from pipeline.settings_doc import COMMAND, DOC, render
from tests.conftest import REPO

# The pages this suite keeps true; docs/performance.md among them, so that the commands beside
# its measurements stay ones that run today.
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
ROUTE = re.compile(r"\b(GET|POST|PUT|PATCH|DELETE|OPTIONS)\s+(/[\w/{}.-]*)")


def variables_read_by_the_code() -> set[str]:
    """SYNTH_* names that are not fields of Settings but that the code reads."""
    names = {"SYNTH_CONFIG"}
    for path in (REPO / "pipeline").rglob("*.py"):
        names |= set(re.findall(r"""environ\.get\(\s*["'](SYNTH_\w+)""", path.read_text()))
    return names


def test_the_configuration_page_is_what_the_settings_class_writes():
    assert DOC.read_text() == render(), (
        f"docs/configuration.md differs from pipeline/settings.py: regenerate it with `{COMMAND}`"
    )


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

    app = create_app(Settings(), broker_url="redis://127.0.0.1:1/0")  # built, never started
    served = {
        (method.upper(), re.sub(r"{[^}]*}", "{}", path))
        for path, operations in app.openapi()["paths"].items()
        for method in operations
    }
    named_in = {page: {(m, re.sub(r"{[^}]*}", "{}", p)) for m, p in ROUTE.findall(page.read_text())} for page in PAGES}
    wrong = {page.name: sorted(named - served) for page, named in named_in.items() if named - served}
    assert not wrong, f"routes named in the docs that the API does not serve: {wrong}"
    missing = served - named_in[REPO / "docs" / "api.md"]
    assert not missing, f"routes the API serves that docs/api.md does not name: {sorted(missing)}"


LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_every_relative_link_of_the_pages_leads_to_a_file():
    broken = {}
    for page in [*PAGES, REPO / "ops" / "README.md"]:
        targets = {
            t.split("#", 1)[0] for t in LINK.findall(page.read_text()) if "://" not in t and not t.startswith("#")
        }
        missing = sorted(t for t in targets if t and not (page.parent / t).exists())
        if missing:
            broken[page.relative_to(REPO).as_posix()] = missing
    assert not broken, f"links to files that do not exist: {broken}"


BENCH = re.compile(r"python3? -m (ops\.bench(?:\.\w+)+)(?: ([a-z][\w-]*))?")


def runnable(module: str) -> bool:
    """Whether `python -m module` finds something to run, read from the tree without importing."""
    path = REPO.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()


def test_every_benchmark_the_pages_run_exists():
    """Every ``python -m ops.bench.X`` a page shows is a module that runs, and a kernel benchmark's
    NAME (``python -m ops.bench.kernels NAME``) one of its modules."""
    missing = {}
    for page in [*PAGES, REPO / "ops" / "README.md"]:
        for module, word in BENCH.findall(page.read_text()):
            if module == "ops.bench.kernels" and word:
                module += "." + word.replace("-", "_")
            if not runnable(module):
                missing.setdefault(page.relative_to(REPO).as_posix(), set()).add(module)
    assert not missing, f"benchmarks named in the docs that do not exist: {missing}"


def anchors(page: Path) -> Iterator[str]:
    """The fragments GitHub gives a page's headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated one numbered."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#+\s+(.+?)\s*$", re.sub(r"```.*?```", "", page.read_text(), flags=re.S), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        yield slug if not seen[slug] else f"{slug}-{seen[slug]}"


def test_every_link_to_a_heading_of_another_page_leads_to_one():
    broken = {}
    for page in [*PAGES, REPO / "ops" / "README.md"]:
        for target in LINK.findall(page.read_text()):
            file, _, fragment = target.partition("#")
            if "://" in target or not file.endswith(".md") or not fragment:
                continue
            linked = page.parent / file
            if linked.exists() and fragment not in set(anchors(linked)):
                broken.setdefault(page.relative_to(REPO).as_posix(), []).append(target)
    assert not broken, f"links to headings that do not exist: {broken}"
