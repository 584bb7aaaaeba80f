"""One chapter of a document: its jobs' audio joined with the pauses between, levelled to the
outline's loudness, and encoded once, into its own file and, for m4b and mp3, the packets the
whole document's file takes of it (its segment, joined by stream copy: join.py).

Levelling takes the chapter's true peak from its jobs' own, which the workers measured as each
job rendered, and meters only its integrated loudness (a few hundredths of the true peak's
cost). Where the gain would lift a peak past the ceiling, what the limiter then takes off the
loudness is measured on a sample of the chapter's jobs (loudness.limited_gain), and the limiter
runs in the encoder's own ffmpeg process: one pass over the chapter's audio.

A long chapter is encoded in parts of about PART_SECONDS, cut in the silence between two jobs,
each part an ffmpeg process of its own, and the parts joined by copy as the chapters are: the
chapter that finishes rendering last is encoded on every core. Where the cuts fall depends on the
audio alone, so the same chapter is the same bytes on any machine.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline import loudness
from pipeline.audio import decode, length
from pipeline.documents.join import (
    JUNCTION_LEAD,
    JUNCTION_SILENCE,
    PIECE_FORMAT,
    ffmpeg,
    frame_samples,
    join_pieces,
    joined_input,
    piece_output,
    truncated,
)
from pipeline.documents.plan import Outline, Place
from pipeline.errors import InputError, PermanentError
from pipeline.storage.base import safe_name


@dataclass(frozen=True)
class Codec:
    container: str  # ffmpeg's muxer
    encoder: tuple[str, ...]
    muxer: tuple[str, ...]  # the container's options
    extension: str  # a chapter file's


# 64 kb/s mono is the usual spoken-word rate. An MP4's index goes first (faststart), so a player or
# a pipe reads it before the audio. ffmpeg's "fast" AAC coder, which its documentation calls the
# better one at 64 kb/s a channel and over: on Piper's speech it encodes 2.7 times as fast as the
# default (twoloop), at a higher SNR (35 against 28 dB), and the AAC encoder was most of a
# chapter's encoding (docs/performance.md, "Assembling a document").
CODECS = {
    "m4b": Codec("mp4", ("-c:a", "aac", "-aac_coder", "fast", "-b:a", "64k"), ("-movflags", "+faststart"), "m4a"),
    "mp3": Codec("mp3", ("-c:a", "libmp3lame", "-b:a", "64k"), ("-id3v2_version", "3", "-write_id3v1", "0"), "mp3"),
    "wav": Codec("wav", ("-c:a", "pcm_s16le"), (), "wav"),
    "flac": Codec("flac", ("-c:a", "flac", "-sample_fmt", "s16"), (), "flac"),
}
# The limiter's cost in loudness is measured on this much of a chapter, its jobs taken evenly.
SAMPLE_SECONDS = 30.0
# A chapter longer than this is encoded in parts, one ffmpeg process each, cut between jobs.
PART_SECONDS = 60.0
WORKERS = max(1, min(16, os.cpu_count() or 1))  # decodes and parts of a chapter at once


@dataclass(frozen=True)
class Piece:
    """One job of the document: where it goes, its audio, its word times if it was checked, and
    the true peak its worker measured (None: measured here)."""

    place: Place
    audio: bytes
    words: list[dict] | None = None
    true_peak_dbtp: float | None = None


@dataclass(frozen=True)
class ChapterAudio:
    """An encoded chapter: its file and segment in a folder, and what the whole needs of it."""

    number: int
    name: str  # the chapter file's name
    rate: int
    samples: int  # its length, its chapter pause included
    gain_db: float
    limited: bool
    file: Path
    segment: Path | None
    spans: list[tuple[int, list[dict]]] = field(default_factory=list)  # each job's offset and words


def chapter_name(outline: Outline, n: int) -> str:
    return f"{n:03d}-{safe_name(outline.chapters[n - 1], 80)}.{CODECS[outline.format].extension}"


def encode_chapter(outline: Outline, n: int, pieces: list[Piece], folder: Path) -> ChapterAudio:
    """Chapter ``n`` (1-based) from its jobs, in any order: its file, and segment where the format
    has one, written in ``folder``."""
    if outline.format not in CODECS:
        raise InputError(f"unknown document format {outline.format!r}; choose one of {', '.join(CODECS)}")
    if not pieces:
        raise PermanentError(f"chapter {n} ({outline.chapters[n - 1]}) has no rendered audio")
    pieces = sorted(pieces, key=lambda p: (p.place.paragraph, p.place.part))
    with ThreadPoolExecutor(WORKERS) as pool:  # each decode is an ffmpeg process
        decoded = list(pool.map(lambda p: decode(p.audio), pieces))
    rate = _one_rate(n, {rate for _, rate in decoded})
    audio = [a for a, _ in decoded]
    layout = _layout(outline, n, pieces, [a.size for a in audio], rate)
    peaks = [p.true_peak_dbtp if p.true_peak_dbtp is not None else loudness.true_peak(a) for p, a in zip(pieces, audio)]
    pcm = np.zeros(layout.samples, np.float32)
    for offset, samples in zip(layout.offsets, audio):
        pcm[offset : offset + samples.size] = samples
    gain, limited = _gain(outline, pcm, audio, peaks, rate)
    pcm *= np.float32(10 ** (gain / 20))
    del audio, decoded
    name = chapter_name(outline, n)
    spans = [(offset, p.words) for offset, p in zip(layout.offsets, pieces) if p.words]
    limiter = loudness.limiter_filter(rate, _ceiling(outline) - loudness.LIMITER_MARGIN_DB) if limited else None
    if outline.format not in PIECE_FORMAT:
        _encode(
            outline,
            pcm,
            rate,
            limiter,
            [*_tags(outline, n), "-f", CODECS[outline.format].container, str(folder / name)],
        )
        return ChapterAudio(n, name, rate, pcm.size, gain, limited, folder / name, None, spans)
    segment = _encode_in_parts(outline, n, pcm, rate, limiter, layout.cuts, folder, name)
    return ChapterAudio(n, name, rate, pcm.size, gain, limited, folder / name, segment, spans)


def chapter_length(outline: Outline, n: int, pieces: list[Piece]) -> tuple[int, int]:
    """Chapter ``n``'s (rate, samples) as encode_chapter() lays it out, from its jobs' lengths
    alone, a few milliseconds a chapter: the whole document's chapter marks, known before the
    chapters that rendered last are encoded (assemble.py)."""
    if not pieces:
        raise PermanentError(f"chapter {n} ({outline.chapters[n - 1]}) has no rendered audio")
    pieces = sorted(pieces, key=lambda p: (p.place.paragraph, p.place.part))
    lengths = [length(p.audio) for p in pieces]
    rate = _one_rate(n, {rate for _, rate in lengths})
    return rate, _layout(outline, n, pieces, [samples for samples, _ in lengths], rate).samples


def _one_rate(n: int, rates: set[int]) -> int:
    if len(rates) > 1:
        raise PermanentError(f"chapter {n}'s jobs were rendered at {' and '.join(map(str, sorted(rates)))} Hz")
    return rates.pop()


@dataclass(frozen=True)
class _Layout:
    offsets: list[int]  # each job's first sample
    samples: int  # the chapter's length
    cuts: list[int]  # where its parts meet


def _layout(outline: Outline, n: int, pieces: list[Piece], sizes: list[int], rate: int) -> _Layout:
    """Where the jobs go, with the pauses between, and the chapter's tail: the chapter pause (none
    after the last). For a format joined by copy, every piece joined after another starts with
    JUNCTION_LEAD samples of silence and every piece joined before another ends with at least
    JUNCTION_SILENCE of it, in whole frames: a chapter but the first opens with the lead, taken
    out of the chapter pause before it, and its parts meet in a pause long enough for both."""
    frame = frame_samples(outline.format, rate)
    lead = JUNCTION_LEAD if frame is not None else 0
    at = lead if n > 1 else 0
    offsets, cuts, part_from = [], [], 0
    previous: Place | None = None
    for piece, samples in zip(pieces, sizes):
        if previous is not None:
            gap_from = at
            at += round(
                (outline.pauses.sentence if piece.place.paragraph == previous.paragraph else outline.pauses.paragraph)
                * rate
            )
            cut = _whole_frames(gap_from + JUNCTION_SILENCE, frame) if frame is not None else None
            if cut is not None and cut <= at - lead and cut - part_from >= PART_SECONDS * rate:
                cuts.append(cut)
                part_from = cut
        offsets.append(at)
        at += samples
        previous = piece.place
    last = n == len(outline.chapters)
    total = at + (0 if last else round(outline.pauses.chapter * rate) - lead)
    if frame is not None and not last:
        total = _whole_frames(max(total, at + JUNCTION_SILENCE), frame)
    elif frame is not None and outline.format == "m4b":  # joined ADTS ends where its last packet does
        total = _whole_frames(total, frame)
    return _Layout(offsets, total, cuts)


def _encode(outline: Outline, pcm: np.ndarray, rate: int, limiter: str | None, output: list[str]) -> None:
    """``pcm`` (gain applied) through the limiter, where it has one, and the encoder; ``output``:
    ffmpeg's output arguments, the file last."""
    chain = f"{limiter},apad=whole_len={pcm.size},atrim=end_sample={pcm.size}" if limiter else None
    ffmpeg(
        [
            "-f",
            "f32le",
            "-ar",
            str(rate),
            "-ac",
            "1",
            "-i",
            "pipe:0",
            *(["-af", chain] if chain else []),
            "-map",
            "0:a",
            *CODECS[outline.format].encoder,
            *output,
        ],
        what=Path(output[-1]).name,
        stdin=pcm.tobytes(),
    )


def _encode_in_parts(
    outline: Outline, n: int, pcm: np.ndarray, rate: int, limiter: str | None, cuts: list[int], folder: Path, name: str
) -> Path:
    """The chapter's parts encoded at once, joined into its file; returns its segment: the
    parts as the whole takes them, the last cut to its whole frames unless it ends the document."""
    fmt = outline.format
    bounds = list(zip([0, *cuts], [*cuts, pcm.size]))
    parts = [folder / f"{n:04d}.part{i:03d}.{PIECE_FORMAT[fmt]}" for i in range(len(bounds))]
    with ThreadPoolExecutor(WORKERS) as pool:
        list(
            pool.map(
                lambda i: _encode(
                    outline, pcm[bounds[i][0] : bounds[i][1]], rate, limiter, piece_output(fmt, parts[i])
                ),
                range(len(bounds)),
            )
        )
        cut = list(
            pool.map(
                lambda i: truncated(fmt, parts[i], bounds[i][1] - bounds[i][0], rate, parts[i].with_suffix(".cut")),
                range(len(bounds) - 1),
            )
        )
    scratch = folder / f"{n:04d}.join"
    ffmpeg(
        [
            *joined_input(fmt, [*cut, parts[-1]], rate, scratch),
            "-map",
            "0:a",
            "-c:a",
            "copy",
            *CODECS[fmt].muxer,
            *_tags(outline, n),
            "-f",
            CODECS[fmt].container,
            str(folder / name),
        ],
        what=name,
    )
    ends = n == len(outline.chapters)
    tail = (
        parts[-1]
        if ends
        else truncated(fmt, parts[-1], bounds[-1][1] - bounds[-1][0], rate, parts[-1].with_suffix(".cut"))
    )
    segment = join_pieces(fmt, [*cut, tail], rate, folder / f"{n:04d}.segment.{PIECE_FORMAT[fmt]}", scratch)
    for leftover in [*parts, *cut, tail, scratch]:
        leftover.unlink(missing_ok=True)
    return segment


def _gain(
    outline: Outline, pcm: np.ndarray, audio: list[np.ndarray], peaks: list[float | None], rate: int
) -> tuple[float, bool]:
    """The chapter's gain in dB, and whether the limiter must hold its peaks. Its true peak is the
    highest of its jobs'; its loudness is metered, gated as BS.1770 gates it, on the chapter as
    joined: a few hundredths of the cost of the true peak, and exact where an average of the
    jobs' own loudness is not (half a LU off where they differ by 6 dB). Where the limiter must
    hold the peaks, the gain is the one level() finds for a sample of the jobs, moved by how far
    the sample's loudness is from the chapter's."""
    ceiling = _ceiling(outline)
    lufs = loudness.integrated(pcm, rate)
    known = [p for p in peaks if p is not None]
    if lufs is None or not known:  # nothing measurable: left as rendered
        return 0.0, False
    plain = outline.loudness - lufs
    if max(known) + plain <= ceiling:
        return plain, False
    sample = np.concatenate([audio[i] for i in _sample(audio, rate)])
    sample_lufs = loudness.integrated(sample, rate)
    target = outline.loudness + (sample_lufs - lufs if sample_lufs is not None else 0.0)
    found = loudness.limited_gain(sample, rate, target, ceiling)
    return (plain if found is None else found), True


def _sample(audio: list[np.ndarray], rate: int) -> list[int]:
    """Every k-th job, about SAMPLE_SECONDS of them, or all of a short chapter."""
    total = sum(a.size for a in audio) / rate
    return list(range(0, len(audio), max(1, int(np.ceil(total / SAMPLE_SECONDS)))))


def _whole_frames(samples: int, frame: int) -> int:
    return -(-samples // frame) * frame


def _ceiling(outline: Outline) -> float:
    return loudness.ceiling_for(outline.true_peak, outline.format in PIECE_FORMAT)


def _tags(outline: Outline, n: int) -> list[str]:
    tags = {
        "title": outline.chapters[n - 1],
        "album": outline.title,
        "artist": outline.author,
        "track": f"{n}/{len(outline.chapters)}",
    }
    return [arg for k, v in tags.items() if v for arg in ("-metadata", f"{k}={v}")]
