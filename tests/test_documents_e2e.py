"""A document through `synth submit` as a user runs it (embedded, Piper on the CPU): one file with
chapter marks, a file per chapter, levelled loudness, captions with the right offsets, and an
assembly killed half way that leaves nothing under a final name and runs again to the same file."""

import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess

import pytest

import numpy as np

from pipeline.audio import ffmpeg_exe
from pipeline.loudness import measure
from tests.cli_helpers import start_synth, synth, synth_env
from tests.documents import CHAPTERS, epub_book, markdown_book
from tests.test_cli import batches_in
from tests.waiting import eventually

TITLES = [t for t, _ in CHAPTERS]
TARGET = -18.0  # SYNTH_DOCUMENT_LOUDNESS's default
pytestmark = pytest.mark.slow


def chapter_marks(path) -> list[tuple[str, float, float]]:
    """The chapters a player reads from the file: ffmpeg's demuxers, which ffprobe's are, written
    out as an FFMETADATA file (imageio-ffmpeg ships ffmpeg but not ffprobe)."""
    meta = subprocess.run(
        [ffmpeg_exe(), "-v", "error", "-i", str(path), "-f", "ffmetadata", "-"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    marks = []
    for block in meta.split("[CHAPTER]")[1:]:
        fields = dict(line.split("=", 1) for line in block.strip().splitlines() if "=" in line)
        num, den = map(int, fields["TIMEBASE"].split("/"))
        marks.append((fields["title"], int(fields["START"]) * num / den, int(fields["END"]) * num / den))
    return marks


def id3_chapter_starts(path) -> list[float]:
    """The start of each ID3v2 CHAP frame (element id, NUL, start ms, end ms, ...), as written."""
    data = path.read_bytes()
    starts, at = [], data.find(b"CHAP")
    while at >= 0:
        body = data[at + 10 :]
        element_end = body.index(b"\0")
        starts.append(struct.unpack(">I", body[element_end + 1 : element_end + 5])[0] / 1000)
        at = data.find(b"CHAP", at + 1)
    return starts


def tags(path) -> dict[str, str]:
    meta = subprocess.run(
        [ffmpeg_exe(), "-v", "error", "-i", str(path), "-f", "ffmetadata", "-"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("[CHAPTER]")[0]
    return dict(line.split("=", 1) for line in meta.splitlines() if "=" in line)


def decoded(path) -> tuple[np.ndarray, int]:
    """What a player plays, the encoder's priming and padding taken off. From the file, not a pipe:
    ffmpeg trims an mp3's end padding only where it can read the LAME tag's totals first."""
    done = subprocess.run(
        [ffmpeg_exe(), "-hide_banner", "-i", str(path), "-f", "f32le", "-ac", "1", "-"], capture_output=True, check=True
    )
    rate = int(re.search(r"Audio: .*?(\d+) Hz", done.stderr.decode()).group(1))
    return np.frombuffer(done.stdout, dtype="<f4"), rate


def seconds(path) -> float:
    samples, rate = decoded(path)
    return samples.size / rate


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """The Markdown book as m4b and the EPUB as mp3, each through one `synth submit -o`."""
    root = tmp_path_factory.mktemp("documents")
    env = synth_env(SYNTH_DATA_DIR=str(root / "data"))
    (root / "voyage.md").write_text(markdown_book())
    (root / "voyage.epub").write_bytes(epub_book())
    out = {}
    for name, fmt in (("voyage.md", "m4b"), ("voyage.epub", "mp3")):
        done = synth(
            "submit",
            str(root / name),
            "--format",
            fmt,
            "--author",
            "Ann Writer",
            "-o",
            str(root / fmt),
            env=env,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr.decode()
        out[fmt] = (root / fmt, done.stderr.decode())
    return root, env, out


@pytest.mark.parametrize("fmt", ["m4b", "mp3"])
def test_a_three_chapter_document_is_one_file_with_its_chapters_and_a_file_per_chapter(rendered, fmt):
    root, _, out = rendered
    folder, stderr = out[fmt]
    assert "chapter 3/3 rendered" in stderr and "3 chapters" in stderr
    whole = folder / f"A_Short_Voyage.{fmt}"
    files = [
        folder / f"{n:03d}-{t.replace(' ', '_')}.{'m4a' if fmt == 'm4b' else 'mp3'}" for n, t in enumerate(TITLES, 1)
    ]
    lengths = [seconds(f) for f in files]
    marks = chapter_marks(whole)
    assert [t for t, _, _ in marks] == TITLES
    # ffmpeg's mp3 reader moves the ID3 chapter times back by the encoder's delay (1105 samples,
    # 50 ms at Piper's 22,050 Hz); the CHAP frames hold the times as written. mp4 is exact.
    slack = 0.06 if fmt == "mp3" else 0.001
    starts = [sum(lengths[:i]) for i in range(3)]
    assert all(abs(start - want) <= slack for (_, start, _), want in zip(marks, starts)), (marks, starts)
    if fmt == "mp3":
        written = id3_chapter_starts(whole)
        # ``starts`` sums the chapter mp3 files' decoded lengths, each off by up to a couple of ms
        # where the decoder trims the encoder's padding; the frames hold the sample-exact marks.
        assert len(written) == 3 and all(abs(a - b) <= 0.005 for a, b in zip(written, starts)), (written, starts)
    assert abs(seconds(whole) - sum(lengths)) <= 0.05, (seconds(whole), lengths)
    for f in files:
        samples, rate = decoded(f)
        assert abs(measure(samples, rate).lufs - TARGET) <= 1.0, (f.name, measure(samples, rate))
    assert tags(whole)["title"] == "A Short Voyage" and tags(whole)["artist"] == "Ann Writer"
    listed = json.loads((folder / "chapters.json").read_text())
    assert [c["title"] for c in listed["chapters"]] == TITLES and listed["file"] == whole.name
    assert len((folder / "manifest.jsonl").read_text().splitlines()) == 7


def test_the_whole_document_captions_place_each_word_in_its_chapter(rendered):
    _, _, out = rendered
    folder, _ = out["m4b"]
    words = json.loads((folder / "A_Short_Voyage.words.json").read_text())["words"]
    chapters = json.loads((folder / "chapters.json").read_text())["chapters"]
    for word, chapter in (("harbour", 0), ("storm", 1), ("island", 2)):
        times = [w["start"] for w in words if w["word"].lower() == word]
        assert times and all(chapters[chapter]["start"] <= t < chapters[chapter]["end"] for t in times), (word, times)
    assert re.search(r"^00:00:\d\d,\d{3} --> ", (folder / "A_Short_Voyage.srt").read_text(), re.M)


def test_a_killed_assembly_leaves_no_file_and_runs_again_to_the_same_file(rendered, tmp_path):
    root, env, out = rendered
    batch = json.loads(synth("status", "--json", batches_newest(root), env=env).stdout)["batch_id"]
    # The chapters `synth submit` encoded are kept in the store (pipeline/documents/cache.py):
    # without them, this assembly encodes every chapter again and is killed while it does.
    shutil.rmtree(root / "data" / "objects" / "batches" / batch / "document" / "chapters")
    target = tmp_path / "again"
    proc = start_synth("assemble", batch, "-o", str(target), env=env, log=tmp_path / "log")
    try:
        eventually(lambda: list((target / ".synth-assembly").glob("001-*")), 60, "the first chapter's file")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not [p for p in target.iterdir() if p.name != ".synth-assembly"]
    done = synth("assemble", batch, "-o", str(target), env=env)
    assert done.returncode == 0, done.stderr.decode()
    assert not (target / ".synth-assembly").exists()
    first, again = (
        hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (out["m4b"][0] / "A_Short_Voyage.m4b", target / "A_Short_Voyage.m4b")
    )
    assert first == again


def test_the_same_text_in_another_container_and_an_edited_book_render_only_what_changed(rendered, tmp_path):
    root, env, out = rendered
    assert "reused: 7 jobs" in out["mp3"][1]  # the EPUB says what the Markdown book said
    edited = [CHAPTERS[0], ("The Storm", ["By noon the sky had turned black."]), CHAPTERS[2]]
    (tmp_path / "voyage.md").write_text(markdown_book(chapters=edited))
    done = synth(
        "submit",
        str(tmp_path / "voyage.md"),
        "--name",
        "edited",
        "--author",
        "Ann Writer",
        "-o",
        str(tmp_path / "out"),
        env=env,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert "reused: 6 jobs" in done.stderr.decode()
    status = json.loads(synth("status", "edited", "--json", env=env).stdout)
    assert status["reused"] == 6 and status["counts"]["done"] == 7 and status["reused_s"] > 0
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    first = sorted(out["m4b"][0].glob("00*.m4a"))
    second = sorted((tmp_path / "out").glob("00*.m4a"))
    assert [digest(a) == digest(b) for a, b in zip(first, second)] == [True, False, True]


def batches_newest(root) -> str:
    """The Markdown book's batch: the first of the two submitted, found by its source file."""
    import sqlite3

    with sqlite3.connect(root / "data" / "synth.db") as db:
        return db.execute("SELECT id FROM batches WHERE source LIKE '%voyage.md'").fetchone()[0]


@pytest.mark.parametrize(
    "body,reason",
    [
        (
            epub_book(
                extra={
                    "META-INF/encryption.xml": '<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:'
                    'container" xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>'
                    '<enc:EncryptionMethod Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/>'
                    "</enc:EncryptedData></encryption>"
                }
            ),
            "encrypted (DRM",
        ),
        (epub_book()[:-300], "malformed or truncated zip"),
    ],
    ids=["drm", "truncated"],
)
def test_a_bad_document_exits_2_and_writes_nothing(tmp_path, body, reason):
    env = synth_env(SYNTH_DATA_DIR=str(tmp_path / "data"))
    (tmp_path / "book.epub").write_bytes(body)
    done = synth("submit", str(tmp_path / "book.epub"), "-o", str(tmp_path / "out"), env=env)
    assert done.returncode == 2 and reason in done.stderr.decode()
    assert batches_in(tmp_path / "data") == 0 and not (tmp_path / "out").exists()
