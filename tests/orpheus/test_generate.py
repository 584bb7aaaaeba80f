"""The batched KV-cache loop against transformers ``generate()``, batch independence, and seeds."""

from __future__ import annotations

import pytest

from pipeline.engines.orpheus.reference import GenJob, generate_batched, reference_generate
from pipeline.engines.orpheus.model.sampling import SamplingParams
from pipeline.engines.orpheus.prompt import prompt_ids
from pipeline.engines.orpheus.vocab import END_OF_HUMAN, END_OF_SPEECH, START_OF_HUMAN, audio_range

TEXTS = [
    "Hello there.",
    "A much longer sentence, so that the left padding of the batch matters for its neighbours.",
    "Hi!",
    "Numbers 1, 2 and 3; and some punctuation?",
]
GREEDY = SamplingParams(temperature=0.0, repetition_penalty=1.1)
SAMPLED = SamplingParams(temperature=0.8, top_p=0.9, top_k=200, repetition_penalty=1.1)
BUDGETS = [42, 35, 49, 28]


def run(model, jobs, params):
    out = {j.key: [] for j in jobs}
    for step in generate_batched(model, jobs, params):
        for key, token in step.tokens:
            out[key].append(token)
    return out


def jobs_for(tiny, idx, seed=0):
    return [GenJob(i, prompt_ids(tiny.tokenizer, TEXTS[i], "tara"), BUDGETS[i], seed + i) for i in idx]


def test_prompt_is_orpheus_format(tiny):
    ids = prompt_ids(tiny.tokenizer, "Hi", "leo")
    assert ids[0] == START_OF_HUMAN and ids[1] == 128000  # BOS from the tokenizer
    assert ids[-4:] == [128009, END_OF_HUMAN, 128261, 128257]
    assert tiny.tokenizer.decode(ids[2:-4]) == "leo: Hi"


def test_greedy_batched_equals_reference_generate_token_for_token(tiny):
    batched = run(tiny.model, jobs_for(tiny, range(4)), GREEDY)
    for i in range(4):
        ref = reference_generate(tiny.model, [jobs_for(tiny, [i])[0].prompt], GREEDY, [BUDGETS[i]])[0]
        assert batched[i] == ref, f"job {i}"


def test_reference_static_batch_matches_one_at_a_time(tiny):
    prompts = [j.prompt for j in jobs_for(tiny, range(4))]
    static = reference_generate(tiny.model, prompts, GREEDY, BUDGETS)
    single = [reference_generate(tiny.model, [p], GREEDY, [b])[0] for p, b in zip(prompts, BUDGETS)]
    assert static == single


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_tokens_do_not_depend_on_batch_neighbours(tiny, params):
    together = run(tiny.model, jobs_for(tiny, range(4)), params)
    for i in range(4):
        alone = run(tiny.model, jobs_for(tiny, [i]), params)
        assert alone[i] == together[i], f"job {i}"
    pair = run(tiny.model, jobs_for(tiny, [3, 1]), params)
    assert pair[1] == together[1] and pair[3] == together[3]


def test_seed_makes_a_job_reproducible(tiny):
    a = run(tiny.model, jobs_for(tiny, [0], seed=5), SAMPLED)[0]
    b = run(tiny.model, jobs_for(tiny, [0], seed=5), SAMPLED)[0]
    c = run(tiny.model, jobs_for(tiny, [0], seed=6), SAMPLED)[0]
    assert a == b and a != c


def test_constrained_tokens_sit_in_their_frame_position(tiny):
    tokens = run(tiny.model, jobs_for(tiny, [1]), SAMPLED)[1]
    assert len(tokens) == BUDGETS[1]  # budget stop
    for i, t in enumerate(tokens):
        lo, hi = audio_range(i % 7)
        assert lo <= t < hi or (t == END_OF_SPEECH and i % 7 == 0)
