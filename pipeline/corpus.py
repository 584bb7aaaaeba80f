"""Reading a corpus: one job per non-empty line, validated before anything is written."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.errors import InputError
from pipeline.text import normalize


@dataclass
class Corpus:
    lines: list[tuple[int, str]]                             # (1-based line number, text)
    empty_lines: list[int] = field(default_factory=list)


def client_id_for(line_no: int) -> str:
    """Stable per corpus line: re-submitting the same file gives the same ids and object names."""
    return f"line-{line_no:06d}"


def parse_corpus(data: bytes, *, source: str, max_line_chars: int) -> Corpus:
    """Decode and validate a whole corpus. Raises InputError with a one-line reason."""
    if not data.strip():
        raise InputError(f"{source}: the corpus is empty")
    nul = data.find(b"\x00")
    if nul >= 0:  # the whole file: text SQL cannot store must not get past here, wherever it is
        line = data[:nul].count(b"\n") + 1
        raise InputError(f"{source}: looks like a binary file (a NUL byte on line {line}), not text")
    try:
        decoded = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise InputError(f"{source}: not UTF-8 text (bad byte 0x{data[e.start]:02x} on line {line})") from e
    corpus = Corpus(lines=[])
    for line_no, raw in enumerate(decoded.splitlines(), start=1):
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
        raise InputError(f"{source}: no text: all {len(corpus.empty_lines)} lines are empty")
    return corpus
