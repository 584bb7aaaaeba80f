"""The admission model (ops/bench/orpheus/admission_model.py): the engine's scheduler over a
batch workload, with a step-time model in place of the device."""

from __future__ import annotations

from ops.bench.orpheus import admission_model

LINES = [
    "A short line.",
    "A line of a middling length, with a clause or two in it, and a full stop at the end.",
    "The longest line of this small corpus runs on and on, through commas and clauses, so that its "
    "token budget is several times any other's, and a batch that started it last would end with it "
    "decoding alone at a row or two while every other row of the cache sat idle.",
]


def test_the_model_runs_every_chunk_and_stays_under_its_ceiling(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(LINES * 20) + "\n")
    out = admission_model.run(admission_model.parse(_argv(corpus)))
    assert out["chunks"] == 80  # the long line in two chunks
    assert 0 < out["mean_rows"] <= 16 - 2  # the rows less those kept for realtime arrivals
    assert 0 < out["x_real_time"] < out["ceiling_x_real_time"]
    # a cheaper row a step is a faster batch, by the model's own arithmetic
    cheaper = admission_model.run(admission_model.parse([*_argv(corpus), "--row-ms", "0.014"]))
    assert cheaper["steps"] == out["steps"] and cheaper["x_real_time"] > out["x_real_time"]


def _argv(corpus):
    return ["--corpus", str(corpus), "--lines", "60", "--rows", "16"]
