"""Assembly on its own, from tones in place of speech: the pauses at each boundary, the chapter
files summing to the whole sample for sample (the m4b and mp3 joined by copy at several rates, a
long chapter in parts), the levelling, the chapters JSON, the cover in m4b and mp3, and an m4b
joined through a pipe as its chapters come, the same bytes as the join of the finished ones."""

import json
import subprocess

import numpy as np
import pytest

from pipeline.audio import encode, ffmpeg_exe
from pipeline.documents.assemble import Piece, assemble
from pipeline.documents.chapter import chapter_length
from pipeline.documents.join import JUNCTION_LEAD, FfmpegWriter, streamed_input
from pipeline.errors import PermanentError
from pipeline.documents.plan import Outline, Pauses, Place
from pipeline.loudness import measure

RATE = 22050
PAUSES = Pauses(sentence=0.25, paragraph=0.5, chapter=1.5)


def tone(seconds: float, hz: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.2 * np.sin(2 * np.pi * hz * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 2 * t))).astype(np.float32)


# Chapter 1: a paragraph split in two parts, then a second paragraph; chapters 2 and 3: one each.
PIECES = {
    1: [(Place(1, 1, 1), 1.0), (Place(1, 1, 2), 0.8), (Place(1, 2, 1), 1.2)],
    2: [(Place(2, 1, 1), 1.5)],
    3: [(Place(3, 1, 1), 0.9)],
}


def pieces(n: int) -> list[Piece]:
    return [Piece(place, encode(tone(s, 220 + 40 * i), RATE, "flac")) for i, (place, s) in enumerate(PIECES[n])]


def outline(fmt: str) -> Outline:
    return Outline(
        title="Tones",
        author="A. Tester",
        chapters=["One", "Two", "Three"],
        format=fmt,
        loudness=-18.0,
        true_peak=-1.0,
        pauses=PAUSES,
    )


def red_png() -> bytes:
    """A 32x32 red PNG, the cover's stand-in."""
    return subprocess.run(
        [ffmpeg_exe(), "-v", "error", "-f", "lavfi", "-i", "color=c=red:s=32x32", "-frames:v", "1", "-f", "image2pipe"]
        + ["-c:v", "png", "-"],
        capture_output=True,
        check=True,
    ).stdout


def samples(path) -> int:
    done = subprocess.run(
        [ffmpeg_exe(), "-v", "error", "-i", str(path), "-f", "s16le", "-ac", "1", "-"], capture_output=True, check=True
    )
    return len(done.stdout) // 2


def test_pauses_sit_at_each_boundary_and_the_chapter_files_are_the_whole(tmp_path):
    done = assemble(outline("wav"), pieces, tmp_path)
    lengths = [samples(f) for f in done.chapter_files]
    expect = [
        round(1.0 * RATE)
        + round(0.8 * RATE)
        + round(1.2 * RATE)
        + round(0.25 * RATE)
        + round(0.5 * RATE)
        + round(1.5 * RATE),
        round(1.5 * RATE) + round(1.5 * RATE),
        round(0.9 * RATE),
    ]
    assert lengths == expect
    assert samples(done.whole) == sum(lengths)
    listed = json.loads((tmp_path / "chapters.json").read_text())
    assert [c["start"] for c in listed["chapters"]] == [0, lengths[0] / RATE, (lengths[0] + lengths[1]) / RATE]
    assert listed["file"] == "Tones.wav" and listed["author"] == "A. Tester"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "001-One.wav",
        "002-Two.wav",
        "003-Three.wav",
        "Tones.wav",
        "chapters.json",
    ]


@pytest.mark.parametrize("fmt", ["m4b", "mp3"])
def test_the_cover_goes_into_the_whole_file(tmp_path, fmt):
    cover = red_png()
    done = assemble(outline(fmt), pieces, tmp_path, cover=cover)
    probe = subprocess.run([ffmpeg_exe(), "-hide_banner", "-i", str(done.whole)], capture_output=True, text=True)
    assert "Video: png" in probe.stderr and "attached pic" in probe.stderr, probe.stderr
    assert not list(tmp_path.glob("cover.*")) and not (tmp_path / ".synth-assembly").exists()


def long_pieces(rate: int):
    """Chapter 1 longer than a part (PART_SECONDS), so it is encoded in parts; chapter 3 quiet
    with loud blips, so levelling it lifts its peaks past the ceiling and the limiter holds them.
    Tones, not noise: AAC codes noise as noise (PNS), which each decoder draws afresh."""

    def sound(seconds: float, hz: float, gain: float = 0.2) -> np.ndarray:
        t = np.arange(int(seconds * rate)) / rate
        return (gain * np.sin(2 * np.pi * hz * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 2 * t))).astype(np.float32)

    clicks = sound(6.0, 300, 0.1)
    burst = (0.6 * np.hanning(rate // 50) * np.sin(2 * np.pi * 500 * np.arange(rate // 50) / rate)).astype(np.float32)
    for at in range(rate // 10, clicks.size - burst.size, rate // 2):
        clicks[at : at + burst.size] += burst
    chapters = {
        1: [(Place(1, p, 1), sound(30.0, 200 + 30 * p)) for p in (1, 2, 3)],
        2: [(Place(2, 1, 1), sound(4.0, 440))],
        3: [(Place(3, 1, 1), clicks)],
    }
    return lambda n: [Piece(place, encode(audio, rate, "flac")) for place, audio in chapters[n]]


def decoded(path) -> np.ndarray:
    """What a player plays: from the file, so the decoder trims the priming and padding it declares."""
    done = subprocess.run(
        [ffmpeg_exe(), "-v", "error", "-i", str(path), "-f", "f32le", "-ac", "1", "-"], capture_output=True, check=True
    )
    return np.frombuffer(done.stdout, dtype="<f4")


@pytest.mark.parametrize("rate", [16000, 22050, 48000])
@pytest.mark.parametrize("fmt", ["m4b", "mp3"])
def test_the_whole_file_is_the_chapters_packets_each_at_its_mark(tmp_path, fmt, rate):
    """The whole m4b or mp3 is the chapter files' packets joined by copy: decoded, it is as long as
    they are together to the sample, each chapter's audio sits at its mark as its own file decodes
    it, and every chapter is levelled, the one with loud peaks under the ceiling."""
    done = assemble(outline(fmt), long_pieces(rate), tmp_path)
    whole = decoded(done.whole)
    parts = [decoded(f) for f in done.chapter_files]
    assert whole.size == sum(p.size for p in parts)
    frame = 1024 if fmt == "m4b" else 1152 if rate >= 32000 else 576
    speech = 3 * int(30.0 * rate) + 2 * round(0.5 * rate)
    # Whole frames, its pause in, less the lead of silence the next chapter opens with.
    assert parts[0].size == -(-(speech + round(1.5 * rate) - JUNCTION_LEAD) // frame) * frame
    assert not np.any(np.abs(parts[1][: JUNCTION_LEAD // 2]) > 1e-3)  # the codec spreads its onset a little
    at = 0
    for chapter, part in zip(done.chapters, parts):
        assert chapter["start"] == at / rate
        assert np.max(np.abs(whole[at : at + part.size] - part)) < 0.005, chapter["title"]
        assert measure(part, rate).lufs == pytest.approx(-18.0, abs=1.0), chapter["title"]
        at += part.size
    assert measure(parts[2], rate).true_peak_dbtp <= -1.0 + 0.5  # held under the ceiling, the codec's rise allowed


@pytest.mark.parametrize("rate", [16000, 48000])
def test_an_m4b_joined_as_its_chapters_come_is_the_same_file(tmp_path, rate):
    """With each chapter's length known before it is encoded (``lengths``, as a document encoded
    while it renders has them), the whole m4b is joined through a pipe as its chapters come: the
    same bytes, marks, chapter files and captions as the join of the finished chapters."""
    voiced = long_pieces(rate)

    def get(n: int) -> list[Piece]:
        return [Piece(p.place, p.audio, [{"word": f"w{n}", "start": 0.1, "end": 0.4}]) for p in voiced(n)]

    cover = red_png()
    asked = []

    def lengths(n: int) -> tuple[int, int]:
        asked.append(n)
        return chapter_length(outline("m4b"), n, get(n))

    plain = assemble(outline("m4b"), get, tmp_path / "plain", cover=cover)
    streamed = assemble(outline("m4b"), get, tmp_path / "streamed", cover=cover, lengths=lengths)
    assert sorted(asked) == [1, 2, 3]
    assert streamed.whole.read_bytes() == plain.whole.read_bytes()
    assert streamed.chapters == plain.chapters and streamed.duration_s == plain.duration_s
    assert [f.read_bytes() for f in streamed.chapter_files] == [f.read_bytes() for f in plain.chapter_files]
    listed = sorted(p.name for p in (tmp_path / "plain").iterdir())
    assert sorted(p.name for p in (tmp_path / "streamed").iterdir()) == listed
    for name in listed:
        if not name.endswith((".m4a", ".m4b")):
            assert (tmp_path / "streamed" / name).read_text() == (tmp_path / "plain" / name).read_text(), name


def test_a_chapter_longer_than_its_marks_fails_the_assembly_and_leaves_no_file(tmp_path):
    """A chapter that comes out another length than the marks the join started with is an error,
    not a book with its marks wrong: the join is stopped and no file is left under its name."""

    def lengths(n: int) -> tuple[int, int]:
        rate, samples = chapter_length(outline("m4b"), n, pieces(n))
        return rate, samples - (1024 if n == 2 else 0)

    with pytest.raises(PermanentError, match="chapter 2 came out"):
        assemble(outline("m4b"), pieces, tmp_path, lengths=lengths)
    assert not list(tmp_path.glob("*.m4b"))


def test_ffmpeg_fed_through_a_pipe_says_why_it_failed(tmp_path):
    junk = tmp_path / "junk.aac"
    junk.write_bytes(bytes(200_000))
    out = tmp_path / "out.m4a"
    with pytest.raises(PermanentError, match="could not write out.m4a"):
        with FfmpegWriter([*streamed_input(24000), "-c:a", "copy", "-f", "mp4", str(out)], what=out.name) as writer:
            writer.feed(junk)
