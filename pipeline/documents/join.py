"""Encoded audio joined by stream copy: the parts of a chapter into its file, and the chapters into
the whole document's, never decoded and encoded again (m4b and mp3).

An encoder starts a stream with its priming (AAC 1024 samples, LAME 1105), and a decoder makes
each packet's samples together with the packet before. So every piece joined before another is
a whole number of frames long and ends in at least JUNCTION_SILENCE samples of digital silence,
and only the packets up to its length are taken of it (truncated()); every piece joined after
another starts with JUNCTION_LEAD samples of silence, so its priming, which stands in for the
samples of the packets left out, decodes to silence too. The join then decodes to each piece's
own samples at the offset the lengths before it give.

AAC pieces are ADTS streams, whose frames carry their own headers: joined as bytes they are one
stream, whose timestamps are moved a priming earlier so that the MP4's edit list skips it. mp3
pieces keep their Xing/LAME frame and go through ffmpeg's concat demuxer; the mp3 muxer takes
the whole's priming from the first packet and its end padding from the last.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from pipeline.audio import ffmpeg_exe
from pipeline.errors import PermanentError

# ffmpeg's AAC encoder opens every stream with this many samples of priming (the edit list of an
# MP4 it writes skips them); a join read from ADTS is told the same.
AAC_PRIMING = 1024
# Silence a piece ends in before the next follows: the packet left out and the one before it (an
# AAC window spans two frames) hold nothing but zeros. 4096 covers both codecs at any rate.
JUNCTION_SILENCE = 4096
# Silence a piece starts with after another: its priming's frames (AAC's window of 2048 samples,
# LAME's 1105 and a granule) hold nothing but zeros.
JUNCTION_LEAD = 2048
# The muxer of a piece, and the arguments that keep an mp3 piece's Xing/LAME frame and no ID3 tag.
PIECE_FORMAT = {"m4b": "adts", "mp3": "mp3"}
_PIECE_DEMUXER = {"m4b": "aac", "mp3": "mp3"}
_PIECE_ARGS = {"m4b": (), "mp3": ("-id3v2_version", "0", "-write_id3v1", "0")}


def frame_samples(fmt: str, rate: int) -> int | None:
    """Samples per coded frame, for the formats joined by copy: AAC's 1024; MPEG-1 layer III's 1152
    at 32 kHz and over, and MPEG-2's 576 under it."""
    if fmt == "m4b":
        return 1024
    if fmt == "mp3":
        return 1152 if rate >= 32000 else 576
    return None


def piece_output(fmt: str, out: Path) -> list[str]:
    """ffmpeg output arguments that write a piece of ``fmt`` to ``out``."""
    return [*_PIECE_ARGS[fmt], "-f", PIECE_FORMAT[fmt], str(out)]


def truncated(fmt: str, piece: Path, samples: int, rate: int, out: Path) -> Path:
    """``piece`` cut to the packets of its first ``samples`` (whole frames): what a join takes of a
    piece that another follows."""
    frame = frame_samples(fmt, rate)
    assert frame is not None  # a format joined by copy
    ffmpeg(
        [
            "-f",
            _PIECE_DEMUXER[fmt],
            "-i",
            str(piece),
            "-map",
            "0:a",
            "-c",
            "copy",
            "-frames:a",
            str(samples // frame),
            *piece_output(fmt, out),
        ],
        what=out.name,
    )
    return out


def joined_input(fmt: str, pieces: list[Path], rate: int, scratch: Path) -> list[str]:
    """ffmpeg input arguments that read ``pieces`` (every one but the last truncated()) as one
    stream; ``scratch`` is a file name it may write."""
    if fmt == "m4b":
        with open(scratch, "wb") as f:
            for piece in pieces:
                with open(piece, "rb") as src:
                    shutil.copyfileobj(src, f, 1 << 20)
        return ["-itsoffset", f"{-AAC_PRIMING / rate:.9f}", "-f", "aac", "-i", str(scratch)]
    return concat_input(pieces, scratch)


def streamed_input(rate: int) -> list[str]:
    """ffmpeg input arguments that read AAC pieces (every one but the last truncated()) from its
    standard input, written there one after another (FfmpegWriter), as joined_input() reads them
    from a file."""
    return ["-itsoffset", f"{-AAC_PRIMING / rate:.9f}", "-f", "aac", "-i", "pipe:0"]


def concat_input(files: list[Path], scratch: Path) -> list[str]:
    """ffmpeg input arguments that read ``files`` one after another (the concat demuxer), listed
    in ``scratch``."""
    scratch.write_text("".join(f"file '{_quoted(p)}'\n" for p in files), encoding="utf-8")
    return ["-f", "concat", "-safe", "0", "-i", str(scratch)]


def join_pieces(fmt: str, pieces: list[Path], rate: int, out: Path, scratch: Path) -> Path:
    """``pieces`` as one piece of ``fmt``: for AAC their bytes, for mp3 a remux."""
    if fmt == "m4b" or len(pieces) == 1:
        with open(out, "wb") as f:
            for piece in pieces:
                with open(piece, "rb") as src:
                    shutil.copyfileobj(src, f, 1 << 20)
        return out
    ffmpeg(
        [*joined_input(fmt, pieces, rate, scratch), "-map", "0:a", "-c", "copy", *piece_output(fmt, out)], what=out.name
    )
    scratch.unlink(missing_ok=True)
    return out


def _quoted(path: Path) -> str:
    return str(path.resolve()).replace("'", "'\\''")


def ffmpeg(args: list[str], *, what: str, stdin: bytes | None = None) -> None:
    """Run ffmpeg (bit-exact output, so the same input writes the same bytes); PermanentError
    naming ``what`` where it fails."""
    done = subprocess.run(_command(args, stdin=stdin is not None), input=stdin, capture_output=True, check=False)
    if done.returncode != 0:
        raise _failed(what, done.stderr)


class FfmpegWriter:
    """ffmpeg reading its input from a pipe that is written as the input comes to be: the whole
    document's join started once its chapter marks are known, fed each chapter as it is encoded.
    Used as a context manager: leaving it waits for ffmpeg and raises its error (PermanentError
    naming ``what``); leaving it on an exception stops ffmpeg, so no process outlives the join."""

    def __init__(self, args: list[str], *, what: str) -> None:
        self.what = what
        self._errors = tempfile.TemporaryFile()  # a pipe could fill while no one reads it
        self._proc = subprocess.Popen(
            _command(args, stdin=True), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._errors
        )

    def feed(self, path: Path) -> None:
        """Write ``path``'s bytes to ffmpeg's input."""
        assert self._proc.stdin is not None
        try:
            with open(path, "rb") as src:
                shutil.copyfileobj(src, self._proc.stdin, 1 << 20)
        except BrokenPipeError:  # ffmpeg stopped: its own error says why
            self._wait()
            raise _failed(self.what, self._stderr()) from None

    def end_input(self) -> None:
        """No more input: ffmpeg finishes the file (its index, the move to the front) meanwhile."""
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            try:
                self._proc.stdin.close()
            except BrokenPipeError:
                pass

    def __enter__(self) -> FfmpegWriter:
        return self

    def __exit__(self, kind, value, tb) -> None:
        try:
            if kind is not None:
                self._proc.kill()
                self._proc.wait()
                return
            self.end_input()
            if self._wait() != 0:
                raise _failed(self.what, self._stderr())
        finally:
            self.end_input()
            self._errors.close()

    def _wait(self) -> int:
        self.end_input()
        return self._proc.wait()

    def _stderr(self) -> bytes:
        self._errors.seek(0)
        return self._errors.read()


def _command(args: list[str], *, stdin: bool) -> list[str]:
    return [
        ffmpeg_exe(),
        "-hide_banner",
        "-loglevel",
        "error",
        "-y",
        *([] if stdin else ["-nostdin"]),
        *args[:-1],
        "-fflags",
        "+bitexact",
        args[-1],
    ]


def _failed(what: str, stderr: bytes) -> PermanentError:
    return PermanentError(f"ffmpeg could not write {what}: {stderr.decode(errors='replace').strip()[-400:]}")
