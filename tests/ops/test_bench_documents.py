"""The documents bench: a book of the size asked for whose paragraphs are all distinct however
often the corpus repeats, the synth processes' environment built from its options alone, and a
short book through the real `synth submit -o` (Piper on the CPU) with those options."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ops.bench.e2e.fleet import LEADS
from ops.bench.documents import DEFAULT_LINES, book, paragraphs, parse, synth_env

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "examples" / "corpus.txt"


def test_a_book_past_the_corpus_repeats_it_with_every_paragraph_distinct(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The first line.\n\nA second line, longer.\nThe first line.\nNow, the first line.\n")
    text = paragraphs(corpus, words=60)
    # the corpus as it is, but its own repeat, which takes the first lead that makes no line it has
    assert text[:4] == [
        "The first line.",
        "A second line, longer.",
        f"{LEADS[1]}, the first line.",
        "Now, the first line.",
    ]
    assert len(set(text)) == len(text)
    words = [len(line.split()) for line in text]
    assert sum(words) >= 60 and sum(words[:-1]) < 60  # stops at the paragraph that reaches the size
    assert len(paragraphs(corpus, lines=7)) == 7


def test_the_book_spreads_its_paragraphs_over_the_chapters() -> None:
    markdown = book([f"Line {n}." for n in range(5)], 2)
    assert markdown.count("## Chapter ") == 2
    assert markdown.index("Line 2.") < markdown.index("## Chapter 2") < markdown.index("Line 3.")


def test_the_synth_processes_get_the_engine_the_gpu_and_env_and_nothing_else_of_synth(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("SYNTH_QUANTIZATION", "nf4")  # the caller's own: never reaches the bench's synth
    args = parse(
        [
            "--engine",
            "orpheus",
            "--model",
            "/tmp/ckpt",
            "--gpu",
            "3",
            "--env",
            "SYNTH_MAX_BATCH=64",
            "--env",
            "SYNTH_REUSE=on",
        ]
    )  # --env comes last: it overrides the bench's own
    env = synth_env(args, tmp_path)
    assert {k: v for k, v in env.items() if k.startswith("SYNTH_")} == {
        "SYNTH_DATA_DIR": str(tmp_path),
        "SYNTH_ENGINE": "orpheus",
        "SYNTH_MODEL": "/tmp/ckpt",
        "SYNTH_REUSE": "on",
        "SYNTH_DEVICE": "cuda",
        "SYNTH_MAX_BATCH": "64",
    }
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    assert parse([]).lines == DEFAULT_LINES and parse(["--words", "9"]).lines is None


@pytest.mark.parametrize(
    "argv", [["--engine", "orpheus"], ["--gpu", "0"], ["--env", "NOEQUALS"], ["--lines", "3", "--words", "9"]]
)
def test_options_that_cannot_run_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse(argv)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_short_book_through_synth_submit_reports_its_size_and_times(tmp_path: Path) -> None:
    pytest.importorskip("piper", reason="the embedded default renders with synth[piper]")
    out = tmp_path / "result.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYNTH_")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ops.bench.documents",
            "--corpus",
            str(CORPUS),
            "--words",
            "30",
            "--chapters",
            "2",
            "--engine",
            "piper",
            "--env",
            "SYNTH_ENGINE_THREADS=1",
            "--json",
            str(out),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert result["words"] >= 30 and result["chapters"] == 2 and result["engine"] == "piper"
    assert result["env"] == {"SYNTH_ENGINE_THREADS": "1"}
    assert result["audio_s"] > 1 and result["x_real_time"] > 0 and result["command_x_real_time"] > 0
    assert 0 <= result["first_start_s"] <= result["render_s"] and result["assembly_share"] >= 0
    # each chapter encoded (its cache written) after its last job, and the join after the last
    assert len(result["chapters_encoded_s"]) == 2 and result["join_s"] >= 0
    assert all(e >= d for e, d in zip(result["chapters_encoded_s"], result["chapters_done_s"]))
    assert 1 <= len(result["slowest_jobs"]) <= 5 and all(d >= 0 for _, d in result["slowest_jobs"])
    assert "x real time" in proc.stdout
