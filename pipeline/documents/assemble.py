"""Assembly: a rendered document's job audio -> one file per chapter and the whole document with
chapter marks (m4b, mp3), or wav/flac with a chapters JSON, plus the whole document's captions
where its jobs have word times.

Each chapter is joined with silence at its boundaries (Pauses), levelled as one to the outline's
loudness (pipeline/loudness.py), and ends with the chapter pause, but the last: the chapter files
played in order are the whole file. A few chapters are in hand at a time (CHAPTERS_AT_ONCE, each
worked on a thread of its own, its time mostly in ffmpeg and numpy); the whole document
goes to a 16-bit file on disk, which one ffmpeg run encodes with the chapter marks, title, author
and cover from an FFMETADATA file (ffmpeg's muxers write the MP4 chapter atoms and the ID3v2
CHAP/CTOC frames). Everything is written in a hidden folder beside the output and moved into
place when whole, so a killed assembly leaves no file under a final name; the next run removes
what it left and writes the same files again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from pipeline import loudness
from pipeline.audio import decode, ffmpeg_exe, silence, to_int16
from pipeline.documents.plan import Outline, Place
from pipeline.errors import InputError, PermanentError
from pipeline.storage.base import safe_name

PARTIAL_DIR = ".synth-assembly"
# (container, codec arguments, chapter file extension). 64 kb/s mono is the usual spoken-word
# rate. An MP4's index goes first (faststart), so a player or a pipe reads it before the audio.
_CODECS = {
    "m4b": ("mp4", ["-c:a", "aac", "-b:a", "64k", "-movflags", "+faststart"], "m4a"),
    "mp3": ("mp3", ["-c:a", "libmp3lame", "-b:a", "64k", "-id3v2_version", "3", "-write_id3v1", "0"], "mp3"),
    "wav": ("wav", ["-c:a", "pcm_s16le"], "wav"),
    "flac": ("flac", ["-c:a", "flac"], "flac"),
}
_LOSSY = {"m4b", "mp3"}
# Chapters decoded, levelled and encoded at once: most of that time is in ffmpeg's processes and
# numpy, which run beside the interpreter; each chapter in hand is its audio in memory.
CHAPTERS_AT_ONCE = max(1, min(4, os.cpu_count() or 1))


@dataclass(frozen=True)
class Piece:
    """One job of the document: where it goes, its audio, and its word times if it was checked."""

    place: Place
    audio: bytes
    words: list[dict] | None = None


@dataclass(frozen=True)
class Assembled:
    whole: Path
    chapter_files: list[Path]
    chapters: list[dict]           # title, start, end (seconds), file
    duration_s: float


def assemble(outline: Outline, pieces: Callable[[int], list[Piece]], output: Path,
             *, cover: bytes | None = None) -> Assembled:
    """``pieces(n)``: chapter ``n``'s jobs (1-based), in any order; called from several threads."""
    fmt = outline.format
    if fmt not in _CODECS:
        raise InputError(f"unknown document format {fmt!r}; choose one of {', '.join(_CODECS)}")
    output.mkdir(parents=True, exist_ok=True)
    work = output / PARTIAL_DIR
    shutil.rmtree(work, ignore_errors=True)      # what a killed run left
    work.mkdir()
    container, codec, _ = _CODECS[fmt]
    base = safe_name(outline.title, 100)
    whole_pcm = work / "whole.s16"
    rate = None
    marks: list[dict] = []
    words: list[dict] = []
    start = 0
    with open(whole_pcm, "wb") as pcm_out, ThreadPoolExecutor(CHAPTERS_AT_ONCE) as pool:
        chapter = partial(_chapter_file, outline, pieces, work)
        for n, (pcm, rate_n, spans, name) in enumerate(_in_order(pool, chapter, len(outline.chapters)), start=1):
            if rate is not None and rate_n != rate:
                raise PermanentError(f"chapter {n} was rendered at {rate_n} Hz, the ones before at {rate}")
            rate = rate_n
            pcm_out.write(pcm.tobytes())
            marks.append({"title": outline.chapters[n - 1], "start": start / rate, "end": (start + pcm.size) / rate,
                          "file": name})
            words.extend({**w, "start": w["start"] + (start + offset) / rate, "end": w["end"] + (start + offset) / rate}
                         for offset, job_words in spans for w in job_words)
            start += pcm.size
    assert rate is not None   # a document has a chapter (pipeline/documents/plan.py)
    whole_name = f"{base}.{fmt}"
    meta = work / "whole.ffmeta"
    meta.write_text(_ffmetadata(outline, marks, rate), encoding="utf-8")
    _encode(_pcm_input(rate, str(whole_pcm)), work / whole_name, container, codec, [], ffmeta=meta,
            cover=_cover(work, cover) if fmt in _LOSSY else None)
    whole_pcm.unlink()
    meta.unlink()
    (work / "chapters.json").write_text(json.dumps(
        {"title": outline.title, "author": outline.author, "file": whole_name, "duration_s": start / rate,
         "chapters": marks, "skipped_chapters": outline.skipped}, ensure_ascii=False, indent=1) + "\n")
    if words:
        _write_captions(work, base, words)
    for leftover in work.glob("cover.*"):
        leftover.unlink()
    for f in sorted(work.iterdir()):       # the whole file last: its presence means all is there
        if f.name != whole_name:
            os.replace(f, output / f.name)
    os.replace(work / whole_name, output / whole_name)
    work.rmdir()
    return Assembled(output / whole_name, [output / m["file"] for m in marks], marks, start / rate)


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


def _chapter_file(outline: Outline, pieces: Callable[[int], list[Piece]], work: Path, n: int):
    """Chapter ``n``: its 16-bit audio, rate, word spans, and its own file written in ``work``."""
    container, codec, chapter_ext = _CODECS[outline.format]
    audio, rate, spans = _chapter(outline, pieces(n), n, last=n == len(outline.chapters))
    pcm = to_int16(audio)
    title = outline.chapters[n - 1]
    name = f"{n:03d}-{safe_name(title, 80)}.{chapter_ext}"
    _encode(_pcm_input(rate, "pipe:0"), work / name, container, codec,
            _metadata(outline, title=title, track=f"{n}/{len(outline.chapters)}"), stdin=pcm.tobytes())
    return pcm, rate, spans, name


def _chapter(outline: Outline, pieces: list[Piece], n: int, *, last: bool
             ) -> tuple[np.ndarray, int, list[tuple[int, list[dict]]]]:
    """A chapter's audio: its jobs in order with the pauses between, levelled, and its chapter
    pause after unless it is the last. Also each job's word times with its offset in samples."""
    if not pieces:
        raise PermanentError(f"chapter {n} ({outline.chapters[n - 1]}) has no rendered audio")
    pieces = sorted(pieces, key=lambda p: (p.place.paragraph, p.place.part))
    parts: list[np.ndarray] = []
    spans: list[tuple[int, list[dict]]] = []
    rate = None
    at = 0
    previous: Place | None = None
    for piece in pieces:
        audio, rate_p = decode(piece.audio)
        if rate is not None and rate_p != rate:
            raise PermanentError(f"chapter {n}'s jobs were rendered at {rate} and {rate_p} Hz")
        rate = rate_p
        if previous is not None:
            gap = silence(outline.pauses.sentence if piece.place.paragraph == previous.paragraph
                          else outline.pauses.paragraph, rate)
            parts.append(gap)
            at += gap.size
        if piece.words:
            spans.append((at, piece.words))
        parts.append(audio)
        at += audio.size
        previous = piece.place
    assert rate is not None   # a chapter has a job
    speech = np.concatenate(parts)
    ceiling = loudness.ceiling_for(outline.true_peak, outline.format in _LOSSY)
    levelled, _ = loudness.level(speech, rate, outline.loudness, ceiling)
    tail = silence(0 if last else outline.pauses.chapter, rate)
    return np.concatenate([levelled, tail]), rate, spans


def _pcm_input(rate: int, source: str) -> list[str]:
    return ["-f", "s16le", "-ar", str(rate), "-ac", "1", "-i", source]


def _encode(inputs: list[str], out: Path, container: str, codec: list[str], metadata: list[str], *,
            stdin: bytes | None = None, ffmeta: Path | None = None, cover: Path | None = None) -> None:
    cmd = [ffmpeg_exe(), "-hide_banner", "-loglevel", "error", "-y", *([] if stdin else ["-nostdin"]), *inputs]
    maps = ["-map", "0:a"]
    if ffmeta is not None:
        cmd += ["-f", "ffmetadata", "-i", str(ffmeta)]
        maps += ["-map_metadata", "1", "-map_chapters", "1"]
    if cover is not None:
        cmd += ["-i", str(cover)]
        maps += ["-map", f"{2 if ffmeta else 1}:v", "-c:v", "copy", "-disposition:v", "attached_pic"]
    cmd += [*maps, *codec, *metadata, "-fflags", "+bitexact", "-f", container, str(out)]
    done = subprocess.run(cmd, input=stdin, capture_output=True, check=False)
    if done.returncode != 0:
        raise PermanentError(f"ffmpeg could not write {out.name}: "
                             f"{done.stderr.decode(errors='replace').strip()[-400:]}")


def _metadata(outline: Outline, *, title: str, track: str) -> list[str]:
    tags = {"title": title, "album": outline.title, "artist": outline.author, "track": track}
    return [arg for k, v in tags.items() if v for arg in ("-metadata", f"{k}={v}")]


def _ffmetadata(outline: Outline, marks: list[dict], rate: int) -> str:
    """ffmpeg's metadata file: the document's tags and one [CHAPTER] per chapter, in ms."""
    lines = [";FFMETADATA1", f"title={_escape(outline.title)}", f"album={_escape(outline.title)}",
             "genre=Audiobook"]
    if outline.author:
        lines += [f"artist={_escape(outline.author)}", f"album_artist={_escape(outline.author)}"]
    for mark in marks:
        lines += ["[CHAPTER]", "TIMEBASE=1/1000", f"START={round(mark['start'] * 1000)}",
                  f"END={round(mark['end'] * 1000)}", f"title={_escape(mark['title'])}"]
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
