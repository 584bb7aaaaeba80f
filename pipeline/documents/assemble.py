"""Assembly: a rendered document's chapters -> one file per chapter and the whole document with
chapter marks (m4b, mp3), or wav/flac with a chapters JSON, plus the whole document's captions
where its jobs have word times.

Each chapter is encoded once (chapter.py): its jobs joined with silence at their boundaries
(Pauses), levelled as one to the outline's loudness, the chapter pause between it and the next
(in m4b and mp3 a sliver of that pause opens the next chapter: join.py), so the chapter files
played in order are the whole file. The chapters come from ``chapters(n, folder)``: encoded here
by default, a few at a time (CHAPTERS_AT_ONCE), or from a cache the caller keeps, where they were
put while the rest of the document still rendered (cache.py, ahead.py). The whole file is then
the chapters joined by stream copy, never encoded again: for m4b and mp3 their encoded packets
(join.py), for wav the chapter files themselves; flac alone is encoded again, since its header
holds its length and checksum. ffmpeg's muxers write the chapter marks, title, author and cover
from an FFMETADATA file (MP4 chapter atoms, ID3v2 CHAP/CTOC frames). Everything is written in a
hidden folder beside the output and moved into place when whole, so a killed assembly leaves no
file under a final name; the next run removes what it left and writes the same files again.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pipeline.documents.chapter import CODECS, ChapterAudio, Piece, chapter_name, encode_chapter
from pipeline.documents.join import (
    PIECE_FORMAT,
    FfmpegWriter,
    concat_input,
    ffmpeg,
    joined_input,
    streamed_input,
)
from pipeline.documents.plan import Outline
from pipeline.errors import InputError, PermanentError
from pipeline.storage.base import safe_name

__all__ = ["Assembled", "Piece", "assemble"]

PARTIAL_DIR = ".synth-assembly"
# Chapters encoded at once where none was cached: each is an ffmpeg process beside the
# interpreter, with its audio in memory.
CHAPTERS_AT_ONCE = max(1, min(4, os.cpu_count() or 1))

ChapterSource = Callable[[int, Path], ChapterAudio]  # chapter n's audio, its files put in the folder
ChapterLength = Callable[[int], tuple[int, int]]  # chapter n's (rate, samples), before it is encoded
# The formats whose whole file is joined while the chapters are still coming (a pipe of ADTS):
# mp3 pieces each keep their Xing/LAME frame, which only the concat demuxer, reading files, drops.
STREAMED_FORMATS = ("m4b",)


@dataclass(frozen=True)
class Assembled:
    whole: Path
    chapter_files: list[Path]
    chapters: list[dict]  # title, start, end (seconds), file
    duration_s: float


def assemble(
    outline: Outline,
    pieces: Callable[[int], list[Piece]],
    output: Path,
    *,
    cover: bytes | None = None,
    chapters: ChapterSource | None = None,
    lengths: ChapterLength | None = None,
) -> Assembled:
    """``pieces(n)``: chapter ``n``'s jobs (1-based), in any order; called from several threads.
    ``chapters``: where the encoded chapters come from, if not encoded here from ``pieces``.
    ``lengths``: each chapter's (rate, samples), known before it is encoded (where the chapters
    still encoding are slow to come, as the ones that rendered last are): with it, an m4b's whole
    file is joined as its chapters come, in order, the join's packet copying, some 6 s for an
    11-hour book, beside their encoding rather than after it."""
    fmt = outline.format
    if fmt not in CODECS:
        raise InputError(f"unknown document format {fmt!r}; choose one of {', '.join(CODECS)}")
    output.mkdir(parents=True, exist_ok=True)
    work = output / PARTIAL_DIR
    shutil.rmtree(work, ignore_errors=True)  # what a killed run left
    work.mkdir()
    source = chapters or (lambda n, folder: encode_chapter(outline, n, pieces(n), folder))
    base = safe_name(outline.title, 100)
    whole_name = f"{base}.{fmt}"
    meta = work / "whole.ffmeta"
    cover_file = _cover(work, cover) if fmt in PIECE_FORMAT else None
    if lengths is not None and fmt in STREAMED_FORMATS:
        rate, parts, marks = _streamed(
            outline,
            lambda n: source(n, work),
            lengths,
            (work / whole_name, meta, cover_file),
            lambda duration_s, marks, words: _write_listing(work, outline, whole_name, duration_s, marks, base, words),
        )
        start = sum(chapter.samples for chapter in parts)
    else:
        rate, parts, marks, words = _gather(outline, lambda n: source(n, work))
        start = sum(chapter.samples for chapter in parts)
        meta.write_text(_ffmetadata(outline, marks), encoding="utf-8")
        # The join is ffmpeg's, a few microseconds a packet (some 6 s for an 11-hour book); the
        # captions of a book's 100,000 words are the interpreter's: they are written beside it.
        with ThreadPoolExecutor(1, thread_name_prefix="synth-join") as pool:
            joined = pool.submit(_join, outline, parts, rate, work, work / whole_name, meta, cover_file)
            try:
                _write_listing(work, outline, whole_name, start / rate, marks, base, words)
            finally:
                joined.result()  # the join's error, where it failed, is the one said
    for chapter in parts:
        if chapter.segment is not None:
            chapter.segment.unlink(missing_ok=True)
    for leftover in [*work.glob("cover.*"), meta]:
        leftover.unlink(missing_ok=True)
    for f in sorted(work.iterdir()):  # the whole file last: its presence means all is there
        if f.name != whole_name:
            os.replace(f, output / f.name)
    os.replace(work / whole_name, output / whole_name)
    work.rmdir()
    return Assembled(output / whole_name, [output / m["file"] for m in marks], marks, start / rate)


def _write_listing(
    work: Path, outline: Outline, whole_name: str, duration_s: float, marks: list[dict], base: str, words: list[dict]
) -> None:
    """chapters.json, and the whole document's captions where its jobs have word times."""
    (work / "chapters.json").write_text(
        json.dumps(
            {
                "title": outline.title,
                "author": outline.author,
                "file": whole_name,
                "duration_s": duration_s,
                "chapters": marks,
                "skipped_chapters": outline.skipped,
            },
            ensure_ascii=False,
            indent=1,
        )
        + "\n"
    )
    if words:
        _write_captions(work, base, words)


def _gather(outline: Outline, source: Callable[[int], ChapterAudio]) -> tuple[int, list, list[dict], list[dict]]:
    """Every chapter's audio from ``source(n)``, a few at once, in order: (their sample rate, the
    chapters, their marks, their words with times from the document's start)."""
    rate = None
    marks: list[dict] = []
    words: list[dict] = []
    parts: list[ChapterAudio] = []
    start = 0
    with ThreadPoolExecutor(CHAPTERS_AT_ONCE) as pool:
        for n, chapter in enumerate(_in_order(pool, source, len(outline.chapters)), start=1):
            if rate is not None and chapter.rate != rate:
                raise PermanentError(f"chapter {n} was rendered at {chapter.rate} Hz, the ones before at {rate}")
            rate = chapter.rate
            parts.append(chapter)
            marks.append(
                {
                    "title": outline.chapters[n - 1],
                    "start": start / rate,
                    "end": (start + chapter.samples) / rate,
                    "file": chapter.name,
                }
            )
            words.extend(_words(chapter, start))
            start += chapter.samples
    assert rate is not None  # a document has a chapter (pipeline/documents/plan.py)
    return rate, parts, marks, words


def _streamed(
    outline: Outline,
    source: Callable[[int], ChapterAudio],
    lengths: ChapterLength,
    whole: tuple[Path, Path, Path | None],
    listing: Callable[[float, list[dict], list[dict]], None],
) -> tuple[int, list[ChapterAudio], list[dict]]:
    """The whole file joined as its chapters come: the marks from ``lengths``, ffmpeg started on
    them, and each chapter's segment written to it in order as ``source`` gives it (a few at
    once, as _gather). ``whole``: the file, its FFMETADATA file and the cover. ``listing`` is
    called with the duration, marks and words once the last segment is written, while ffmpeg
    ends the file. Returns (the rate, the chapters, their marks)."""
    out, meta, cover = whole
    count = len(outline.chapters)
    with ThreadPoolExecutor(CHAPTERS_AT_ONCE) as pool:
        known = list(pool.map(lengths, range(1, count + 1)))
    rates = {rate for rate, _ in known}
    if len(rates) > 1:
        raise PermanentError(f"the chapters were rendered at {' and '.join(map(str, sorted(rates)))} Hz")
    rate = rates.pop()
    marks: list[dict] = []
    start = 0
    for n, (_, samples) in enumerate(known, start=1):
        marks.append(
            {
                "title": outline.chapters[n - 1],
                "start": start / rate,
                "end": (start + samples) / rate,
                "file": chapter_name(outline, n),
            }
        )
        start += samples
    meta.write_text(_ffmetadata(outline, marks), encoding="utf-8")
    words: list[dict] = []
    parts: list[ChapterAudio] = []
    offset = 0
    with (
        ThreadPoolExecutor(CHAPTERS_AT_ONCE) as pool,
        FfmpegWriter([*streamed_input(rate), *_whole_output(outline, meta, cover, out)], what=out.name) as writer,
    ):
        for n, chapter in enumerate(_in_order(pool, source, count), start=1):
            if (chapter.rate, chapter.samples) != known[n - 1]:
                raise PermanentError(
                    f"chapter {n} came out {chapter.samples} samples at {chapter.rate} Hz, where its "
                    f"marks were set for {known[n - 1][1]} at {known[n - 1][0]} Hz"
                )
            assert chapter.segment is not None  # encode_chapter writes one for each format joined by copy
            writer.feed(chapter.segment)
            chapter.segment.unlink()
            parts.append(chapter)
            words.extend(_words(chapter, offset))
            offset += chapter.samples
        writer.end_input()
        listing(offset / rate, marks, words)
    return rate, parts, marks


def _words(chapter: ChapterAudio, start: int) -> Iterator[dict]:
    """The chapter's words, their times from the document's start (``start``, in samples)."""
    for offset, job_words in chapter.spans:
        at = (start + offset) / chapter.rate
        for w in job_words:
            yield {**w, "start": w["start"] + at, "end": w["end"] + at}


def _in_order(pool: ThreadPoolExecutor, work: Callable, count: int) -> Iterator:
    """``work(n)`` for n = 1..count, run on the pool, yielded in order, with no more than the
    pool's size started ahead of the one yielded: that many chapters are in memory at once."""
    ahead: deque[Future] = deque()
    for n in range(1, count + 1):
        ahead.append(pool.submit(work, n))
        if len(ahead) >= CHAPTERS_AT_ONCE:
            yield ahead.popleft().result()
    while ahead:
        yield ahead.popleft().result()


def _join(
    outline: Outline, parts: list[ChapterAudio], rate: int, work: Path, out: Path, meta: Path, cover: Path | None
) -> None:
    """The whole file from the chapters by stream copy (join.py), with the marks and tags of
    ``meta`` and the cover. wav and flac join the chapter files through the concat demuxer."""
    fmt = outline.format
    scratch = work / "whole.join"
    if fmt in PIECE_FORMAT:
        segments = [c.segment for c in parts if c.segment is not None]
        assert len(segments) == len(parts)  # encode_chapter writes one for each format joined by copy
        inputs = joined_input(fmt, segments, rate, scratch)
    else:
        inputs = concat_input([c.file for c in parts], scratch)
    ffmpeg([*inputs, *_whole_output(outline, meta, cover, out)], what=out.name)
    scratch.unlink()


def _whole_output(outline: Outline, meta: Path, cover: Path | None, out: Path) -> list[str]:
    """ffmpeg's arguments after the audio's input (input 0): the marks and tags of ``meta``, the
    cover, the codec and the container, into ``out``."""
    inputs = ["-f", "ffmetadata", "-i", str(meta)]
    maps = ["-map", "0:a", "-map_metadata", "1", "-map_chapters", "1"]
    if cover is not None:
        inputs += ["-i", str(cover)]
        maps += ["-map", "2:v", "-c:v", "copy", "-disposition:v", "attached_pic"]
    codec = CODECS[outline.format]
    # FLAC's header holds its length and checksum, which a copy would take from the first chapter:
    # the whole is encoded again from the decoded chapters, lossless, at over 1000x real time.
    audio = list(codec.encoder) if outline.format == "flac" else ["-c:a", "copy"]
    return [*inputs, *maps, *audio, *codec.muxer, "-f", codec.container, str(out)]


def _ffmetadata(outline: Outline, marks: list[dict]) -> str:
    """ffmpeg's metadata file: the document's tags and one [CHAPTER] per chapter, in ms."""
    lines = [";FFMETADATA1", f"title={_escape(outline.title)}", f"album={_escape(outline.title)}", "genre=Audiobook"]
    if outline.author:
        lines += [f"artist={_escape(outline.author)}", f"album_artist={_escape(outline.author)}"]
    for mark in marks:
        lines += [
            "[CHAPTER]",
            "TIMEBASE=1/1000",
            f"START={round(mark['start'] * 1000)}",
            f"END={round(mark['end'] * 1000)}",
            f"title={_escape(mark['title'])}",
        ]
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    for c in "\\=;#\n":
        value = value.replace(c, "\\" + c)
    return value


def _cover(work: Path, cover: bytes | None) -> Path | None:
    if not cover:
        return None
    kind = "png" if cover.startswith(b"\x89PNG") else "jpg" if cover.startswith(b"\xff\xd8") else None
    if kind is None:
        raise InputError("the cover must be a JPEG or PNG image")
    path = work / f"cover.{kind}"
    path.write_bytes(cover)
    return path


def _write_captions(work: Path, base: str, words: list[dict]) -> None:
    from pipeline.verify import captions
    from pipeline.verify.recognizer import Word

    timed = [Word(w["word"], w["start"], w["end"], w.get("confidence")) for w in words]
    for fmt in captions.FORMATS:
        suffix = "words.json" if fmt == "json" else fmt
        (work / f"{base}.{suffix}").write_text(captions.render(timed, fmt), encoding="utf-8")
