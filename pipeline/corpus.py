"""Reading a corpus: one job per non-empty line, validated before anything is written."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pipeline.errors import InputError
from pipeline.text import normalize

# What str.splitlines() also ends a line at. Here a line ends only at "\n" ("\r\n" too), so the client
# id stays the line number an editor shows; inside a line these are whitespace.
_OTHER_SEPARATORS = re.compile("[\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


@dataclass
class Corpus:
    lines: list[tuple[int, str]]  # (1-based line number, text)
    empty_lines: list[int] = field(default_factory=list)


def client_id_for(line_no: int) -> str:
    """Stable per corpus line: re-submitting the same file gives the same ids and object names."""
    return f"line-{line_no:06d}"


def split_lines(decoded: str) -> list[str]:
    """The lines of a text as numbered by ``\\n`` alone (a final newline ends the last line, it does
    not start another); ``\\r\\n`` is accepted, and every other separator is a space."""
    lines = decoded.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [_OTHER_SEPARATORS.sub(" ", line.removesuffix("\r")) for line in lines]


def check_no_nul(data: bytes, source: str) -> None:
    """The whole file, not a prefix: a NUL byte anywhere is refused with its line number (the
    database refuses NUL in text, and a file with one is not a corpus)."""
    at = data.find(b"\x00")
    if at >= 0:
        line = data[:at].count(b"\n") + 1
        raise InputError(f"{source}: looks like a binary file (a NUL byte on line {line}), not text")


def parse_corpus(data: bytes, *, source: str, max_line_chars: int) -> Corpus:
    """Decode and validate a whole corpus. Raises InputError with a one-line reason."""
    if not data.strip():
        raise InputError(f"{source}: the corpus is empty")
    check_no_nul(data, source)
    try:
        decoded = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise InputError(f"{source}: not UTF-8 text (bad byte 0x{data[e.start]:02x} on line {line})") from e
    corpus = Corpus(lines=[])
    for line_no, raw in enumerate(split_lines(decoded), start=1):
        if len(raw) > max_line_chars:
            raise InputError(
                f"{source}: line {line_no} has {len(raw):,} characters; the limit is {max_line_chars:,} "
                "(split it, or raise SYNTH_MAX_LINE_CHARS)"
            )
        if normalize(raw):
            corpus.lines.append((line_no, raw.strip()))
        else:
            corpus.empty_lines.append(line_no)
    if not corpus.lines:
        empty = len(corpus.empty_lines)
        raise InputError(
            f"{source}: no text: " + ("its only line is empty" if empty == 1 else f"all {empty:,} lines are empty")
        )
    return corpus
