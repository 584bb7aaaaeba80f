"""How long the text front end's lexicon step takes on one long line.

    python -m ops.bench.lexicon_apply [--entries 10000] [--chars 20000]

A lexicon of ``--entries`` made-up words (one in ten case-sensitive, one in a hundred of two
words, plus ten patterns), and a line of ``--chars`` characters in which about one word in five
is an entry. Prints the median and the slowest of the runs, in milliseconds.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from pipeline.lexicon.apply import Compiled
from pipeline.lexicon.entries import Entry


def lexicon(n: int, rng: random.Random) -> list[Entry]:
    entries = []
    for i in range(n):
        word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(4, 9)))
        written = f"{word} {word[::-1]}" if i % 100 == 0 else f"{word}{i}"
        entries.append(Entry(written, alias=f"said {i}", case_sensitive=i % 10 == 0))
    entries += [Entry(f"zq{i}*", alias="pattern", pattern=True) for i in range(10)]
    return entries


def line(entries: list[Entry], chars: int, rng: random.Random) -> str:
    words: list[str] = []
    while sum(map(len, words)) + len(words) < chars:
        words.append(
            rng.choice(entries).written
            if rng.random() < 0.2
            else rng.choice(["the", "quick", "brown", "fox,", "jumps", "over", "a", "lazy", "dog.", "Synth", "reads"])
        )
    return " ".join(words)[:chars]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--chars", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    rng = random.Random(0)
    entries = lexicon(args.entries, rng)
    text = line(entries, args.chars, rng)
    t0 = time.perf_counter()
    compiled = Compiled(entries)
    compile_ms = (time.perf_counter() - t0) * 1000
    times = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        applied = compiled.apply(text, takes_phonemes=True)
        times.append((time.perf_counter() - t0) * 1000)
    print(
        f"{len(entries):,} entries, {len(text):,} characters, {applied.replaced:,} replaced: "
        f"apply median {statistics.median(times):.2f} ms, slowest {max(times):.2f} ms "
        f"(compile {compile_ms:.1f} ms, once per lexicon version)"
    )


if __name__ == "__main__":
    main()
