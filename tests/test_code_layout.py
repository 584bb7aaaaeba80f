"""The shape of the product code, read from its source (no imports): settings are read from the
environment in one place, and the packages import one another without a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pipeline", "worker", "api", "cli")
SETTINGS = ROOT / "pipeline" / "settings.py"


def modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the product packages."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


# The environment -----------------------------------------------------------------------------


def environment_reads(tree: ast.AST) -> list[int]:
    """Lines that read the environment: ``os.environ`` and ``os.getenv`` in any form, except a
    write (``os.environ[name] = value``, or ``os.environ.setdefault(...)`` as a statement)."""
    writes: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            writes.update(id(t.value) for t in targets if isinstance(t, ast.Subscript))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Attribute) and func.attr == "setdefault":
                writes.add(id(func.value))
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and node.attr in ("environ", "environb", "getenv", "getenvb")
        ):
            if id(node) not in writes:
                lines.append(node.lineno)
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and {a.name for a in node.names} & {"environ", "environb", "getenv", "getenvb"}
        ):
            lines.append(node.lineno)
    return sorted(lines)


def test_environment_reads_are_found_and_writes_are_not():
    tree = ast.parse(
        "import os\nos.environ['A'] = '1'\nos.environ.setdefault('B', '2')\n"
        "x = os.environ.get('C')\ny = os.getenv('D')\nz = dict(os.environ)\n"
        "from os import getenv\n"
    )
    assert environment_reads(tree) == [4, 5, 6, 7]


def test_nothing_below_the_settings_reads_the_environment():
    """pipeline/settings.py reads ``SYNTH_*`` (and the CLI, an edge, may set them); everything else
    in pipeline/, worker/ and api/ is handed its settings."""
    readers = {}
    for name, path in modules().items():
        if name.split(".")[0] == "cli" or path == SETTINGS:
            continue
        lines = environment_reads(ast.parse(path.read_text(), str(path)))
        if lines:
            readers[str(path.relative_to(ROOT))] = lines
    assert readers == {}, f"the environment is read outside pipeline/settings.py: {readers}"


# Imports -------------------------------------------------------------------------------------


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The product modules that ``name`` imports anywhere in its file (at the top, in functions,
    under ``TYPE_CHECKING``); ``from package import module`` counts as the module."""

    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(resolve(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            found.add(resolve(base))
            found.update(resolve(f"{base}.{alias.name}") for alias in node.names)
    found.discard(None)
    found.discard(name)
    # A package's own __init__ is not a dependency of its modules in the sense of a cycle: it is
    # run first by Python whatever the module imports.
    return {m for m in found if not name.startswith(m + ".")}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a path (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_a_cycle_is_found():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_product_packages_import_one_another_without_a_cycle():
    known = modules()
    graph = {name: imported(name, path, known) for name, path in known.items()}
    assert graph["pipeline.engines.orpheus.engine"], "the graph sees no imports: the test is broken"
    cycle = find_cycle(graph)
    assert cycle is None, "an import cycle: " + " -> ".join(cycle)


# The Orpheus engine's layers ----------------------------------------------------------------

ORPHEUS = "pipeline.engines.orpheus"
# Top to bottom; a module imports only from its own layer and those below it. The package's
# root modules not named here (engine, the reference, make-tiny) sit above every layer.
ORPHEUS_LAYERS = ("serving", "model", "codec", "kernels", "shared")
ORPHEUS_SHARED = {"config", "fallbacks", "vocab", "prompt", "rng"}


def orpheus_layer(name: str) -> int | None:
    """The index in ``ORPHEUS_LAYERS`` of an Orpheus module; None above them all or outside."""
    if not name.startswith(ORPHEUS + "."):
        return None
    first = name.removeprefix(ORPHEUS + ".").split(".")[0]
    if first in ORPHEUS_SHARED:
        return ORPHEUS_LAYERS.index("shared")
    return ORPHEUS_LAYERS.index(first) if first in ORPHEUS_LAYERS else None


def test_the_orpheus_layers_import_only_downwards():
    known = modules()
    assert orpheus_layer(f"{ORPHEUS}.serving.loop") == 0 and orpheus_layer(f"{ORPHEUS}.rng") == 4
    upward = []
    for name, path in known.items():
        layer = orpheus_layer(name)
        if layer is None:
            continue
        for dep in imported(name, path, known):
            if dep.startswith(ORPHEUS) and (orpheus_layer(dep) is None or orpheus_layer(dep) < layer):
                upward.append(f"{name} -> {dep}")
    assert upward == [], "an Orpheus layer imports one above it: " + ", ".join(upward)


def test_nothing_the_product_runs_imports_the_orpheus_reference():
    """reference.py is the tests' oracle and the benchmark's baseline, not a way to serve."""
    known = modules()
    users = [name for name, path in known.items() if f"{ORPHEUS}.reference" in imported(name, path, known)]
    assert users == [], f"the Orpheus reference is imported by {users}"


# Sizes ---------------------------------------------------------------------------------------

MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 60


def test_no_product_file_or_function_is_too_long_to_read():
    """Split by concern before a file passes 500 lines or a function 60 (STYLE.md)."""
    long = []
    for path in modules().values():
        source = path.read_text()
        if len(source.splitlines()) > MAX_FILE_LINES:
            long.append(f"{path.relative_to(ROOT)}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source, str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines} lines")
    assert long == [], "too long: " + "; ".join(long)


# Tests, benchmarks and what they share -------------------------------------------------------

# tests/ imports nothing from ops/ and ops/ nothing from tests/: what both use (the webhook
# receiver, the faults, a free port) is in synth_testkit/, below both and outside the product.
# One exception, by name: a file ``test_bench_*.py`` tests a benchmark, and a unit test has to import
# its subject (running each bench as a subprocess would leave only its printed output to assert on).
TREES = {
    "tests": ("ops",),
    "ops": ("tests",),
    "synth_testkit": ("tests", "ops"),
    **{package: ("tests", "ops", "synth_testkit") for package in PACKAGES},
}


def top_level_imports(tree: ast.AST) -> set[str]:
    """The first component of every module a file imports, anywhere in it."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_tests_benchmarks_and_the_testkit_import_only_what_they_may():
    crossing = []
    for tree, forbidden in TREES.items():
        for path in sorted((ROOT / tree).rglob("*.py")):
            if tree == "tests" and path.name.startswith("test_bench_"):
                continue
            bad = top_level_imports(ast.parse(path.read_text(), str(path))) & set(forbidden)
            crossing += [f"{path.relative_to(ROOT)} imports {name}" for name in sorted(bad)]
    assert crossing == [], "; ".join(crossing)


def test_the_testkit_is_not_in_the_wheel():
    import tomllib

    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    assert not any(pattern.startswith(("synth_testkit", "tests", "ops")) for pattern in include), include
