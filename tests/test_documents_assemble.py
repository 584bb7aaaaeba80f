"""Assembly on its own, from tones in place of speech: the pauses at each boundary, the chapter
files summing to the whole sample for sample, the chapters JSON, and the cover in m4b and mp3."""

import json
import subprocess

import numpy as np
import pytest

from pipeline.audio import encode, ffmpeg_exe
from pipeline.documents.assemble import Piece, assemble
from pipeline.documents.plan import Outline, Pauses, Place

RATE = 22050
PAUSES = Pauses(sentence=0.25, paragraph=0.5, chapter=1.5)


def tone(seconds: float, hz: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.2 * np.sin(2 * np.pi * hz * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 2 * t))).astype(np.float32)


# Chapter 1: a paragraph split in two parts, then a second paragraph; chapters 2 and 3: one each.
PIECES = {1: [(Place(1, 1, 1), 1.0), (Place(1, 1, 2), 0.8), (Place(1, 2, 1), 1.2)],
          2: [(Place(2, 1, 1), 1.5)], 3: [(Place(3, 1, 1), 0.9)]}


def pieces(n: int) -> list[Piece]:
    return [Piece(place, encode(tone(s, 220 + 40 * i), RATE, "flac")) for i, (place, s) in enumerate(PIECES[n])]


def outline(fmt: str) -> Outline:
    return Outline(title="Tones", author="A. Tester", chapters=["One", "Two", "Three"], format=fmt,
                   loudness=-18.0, true_peak=-1.0, pauses=PAUSES)


def samples(path) -> int:
    done = subprocess.run([ffmpeg_exe(), "-v", "error", "-i", str(path), "-f", "s16le", "-ac", "1", "-"],
                          capture_output=True, check=True)
    return len(done.stdout) // 2


def test_pauses_sit_at_each_boundary_and_the_chapter_files_are_the_whole(tmp_path):
    done = assemble(outline("wav"), pieces, tmp_path)
    lengths = [samples(f) for f in done.chapter_files]
    expect = [round(1.0 * RATE) + round(0.8 * RATE) + round(1.2 * RATE) + round(0.25 * RATE) + round(0.5 * RATE)
              + round(1.5 * RATE), round(1.5 * RATE) + round(1.5 * RATE), round(0.9 * RATE)]
    assert lengths == expect
    assert samples(done.whole) == sum(lengths)
    listed = json.loads((tmp_path / "chapters.json").read_text())
    assert [c["start"] for c in listed["chapters"]] == [0, lengths[0] / RATE, (lengths[0] + lengths[1]) / RATE]
    assert listed["file"] == "Tones.wav" and listed["author"] == "A. Tester"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["001-One.wav", "002-Two.wav", "003-Three.wav",
                                                          "Tones.wav", "chapters.json"]


@pytest.mark.parametrize("fmt", ["m4b", "mp3"])
def test_the_cover_goes_into_the_whole_file(tmp_path, fmt):
    cover = subprocess.run([ffmpeg_exe(), "-v", "error", "-f", "lavfi", "-i", "color=c=red:s=32x32", "-frames:v", "1",
                            "-f", "image2", "-c:v", "png", "-"], capture_output=True, check=True).stdout
    done = assemble(outline(fmt), pieces, tmp_path, cover=cover)
    probe = subprocess.run([ffmpeg_exe(), "-hide_banner", "-i", str(done.whole)], capture_output=True, text=True)
    assert "Video: png" in probe.stderr and "attached pic" in probe.stderr, probe.stderr
    assert not list(tmp_path.glob("cover.*")) and not (tmp_path / ".synth-assembly").exists()
