"""docs/configuration.md, written from the ``Settings`` class: every field's variable, type, default
and the comments beside and above it in pipeline/settings.py (a field's ``description``, where one
is set, comes first). A comment that opens a blank-line-separated group of fields with a short
title ("Engine.", "REST API (api/). ...") becomes that group's heading.

    python -m pipeline.settings_doc        # rewrites docs/configuration.md
    python -m pipeline.settings_doc -      # prints it

tests/test_docs.py fails while the file differs from what this writes.
"""

from __future__ import annotations

import ast
import inspect
import io
import json
import re
import sys
import tokenize
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic_core import PydanticUndefined

from pipeline.settings import Settings

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
COMMAND = "python -m pipeline.settings_doc"
TITLE_WORDS = 3  # a group's opening sentence of at most this many words (outside brackets) is its title

PREAMBLE = f"""\
# Configuration

<!-- Written by `{COMMAND}` from pipeline/settings.py: edit the comments there, not this file. -->

synth has one settings object, `Settings` in [pipeline/settings.py](../pipeline/settings.py). The
CLI, a worker's boot and the API factory build it and pass its parts down. Each setting is read
from, highest first:

1. the environment variable `SYNTH_<NAME>`, e.g. `SYNTH_REDIS_URL`;
2. a TOML file named by `synth --config FILE` or `SYNTH_CONFIG`, with the names in lower case
   (`redis_url = "redis://cache:6379/0"`);
3. the default below.

Lists and maps are JSON in the environment (`SYNTH_BUCKET_SECONDS='[10, 30, 120]'`) and arrays and
tables in TOML. "Unset" services are embedded: SQLite and an object folder under the data folder,
and a private redis-server. How the Orpheus engine uses its settings: [orpheus.md](orpheus.md).
"""


@dataclass
class Entry:
    name: str
    kind: str
    default: str
    text: str


@dataclass
class Group:
    title: str | None
    entries: list[Entry] = field(default_factory=list)


def render() -> str:
    parts = [PREAMBLE]
    for group in groups():
        if group.title:
            parts.append(f"## {group.title}\n")
        rows = ["| variable | type | default | meaning |", "|---|---|---|---|"]
        rows += [f"| `SYNTH_{e.name.upper()}` | {e.kind} | {e.default} | {_cell(e.text)} |" for e in group.entries]
        parts.append("\n".join(rows) + "\n")
    return "\n".join(parts)


def groups() -> list[Group]:
    """The fields in the order the class declares them, grouped as its blank lines group them."""
    path = inspect.getsourcefile(Settings)
    assert path is not None  # a module read from its .py file
    source = Path(path).read_text()
    lines = source.splitlines()
    comments = {
        tok.start[0]: (tok.start[1], tok.string.lstrip("#").strip())
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }
    cls = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == Settings.__name__)
    result: list[Group] = []
    taken: set[int] = set()  # comment lines that continue an earlier field's inline comment
    for stmt in cls.body:
        if not (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and stmt.target.id in Settings.model_fields
        ):
            continue
        first = stmt.lineno - 1  # 0-based index of the field's line
        while first > 0 and lines[first - 1].strip().startswith("#") and first not in taken:
            first -= 1
        above = " ".join(comments[i + 1][1] for i in range(first, stmt.lineno - 1))
        opens_group = not result or not lines[first - 1].strip()
        title = None
        if opens_group and above:
            title, above = _title(above)
        if opens_group:
            result.append(Group(title))
        result[-1].entries.append(_entry(stmt.target.id, above, _inline(stmt, lines, comments, taken)))
    declared = {e.name for group in result for e in group.entries}
    inherited = [_entry(name) for name in Settings.model_fields if name not in declared]
    return result + ([Group("Other settings", inherited)] if inherited else [])


def _entry(name: str, *comments: str) -> Entry:
    info = Settings.model_fields[name]
    text = " ".join(_sentence(t) for t in (info.description or "", *comments) if t)
    return Entry(name, _kind(info.annotation, info.metadata), _default(info), text)


def _inline(stmt: ast.AnnAssign, lines: list[str], comments: dict, taken: set[int]) -> str:
    """The comment at the end of the field's lines, and the comment lines under it that start in
    the same column (their line numbers go into ``taken``)."""
    end = stmt.end_lineno or stmt.lineno  # set on every node ast.parse makes
    found = [comments[n] for n in range(stmt.lineno, end + 1) if n in comments]
    if not found:
        return ""
    column, text = found[-1]
    n = end + 1
    while n in comments and comments[n][0] == column and lines[n - 1].strip().startswith("#"):
        text += " " + comments[n][1]
        taken.add(n)
        n += 1
    return text


def _title(lead: str) -> tuple[str | None, str]:
    """("Engine", "") from "Engine."; (None, lead) when the first sentence is more than a title."""
    match = re.match(r"(.+?)\.(?:\s+(?=[A-Z])|$)", lead)
    if not match:
        return None, lead
    sentence = match.group(1)
    if len(re.sub(r"\([^)]*\)", "", sentence).split()) > TITLE_WORDS:
        return None, lead
    return sentence, lead[match.end() :].strip()


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


def _kind(annotation: Any, metadata: list) -> str:
    kind = _type(annotation)
    bounds = [f">= {m.ge}" for m in metadata if hasattr(m, "ge")] + [f"<= {m.le}" for m in metadata if hasattr(m, "le")]
    return ", ".join([kind, *bounds])


def _type(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(_type(a) for a in args if a is not type(None))
    if origin in (tuple, list, set, frozenset):
        return f"list of {_type(args[0])}" if args else "list"
    if origin is dict:
        return f"map to {_type(args[1])}" if len(args) == 2 else "map"
    names = {str: "text", int: "integer", float: "number", bool: "boolean", Path: "path"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default(info: Any) -> str:
    if info.default is PydanticUndefined and info.default_factory is not None:
        factory = info.default_factory
        if factory in (dict, list, tuple, set):
            return f"`{json.dumps(factory())}`"
        return (inspect.getdoc(factory) or "computed").splitlines()[0]
    value = info.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (tuple, list, dict)):
        return f"`{json.dumps(value if isinstance(value, dict) else list(value), default=str)}`"
    if value == "":
        return '`""`'
    return f"`{value}`"


def _cell(text: str) -> str:
    """Table-safe: pipes escaped, and outside `code` a "<" that would open an HTML tag."""
    parts = text.replace("|", "\\|").split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(parts))


def main(argv: list[str]) -> int:
    text = render()
    if argv == ["-"]:
        sys.stdout.write(text)
    else:
        DOC.parent.mkdir(exist_ok=True)
        DOC.write_text(text)
        print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
