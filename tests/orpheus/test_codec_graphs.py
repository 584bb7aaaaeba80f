"""How a codec call's windows are split over the captured graphs (codec/graphs.py)."""

from __future__ import annotations

import bisect

import pytest

from pipeline.engines.orpheus.codec.graphs import BATCHES, REPLAY_COST_FRAMES, split


def cost(plan, w):
    return sum(plan) + len(plan) * REPLAY_COST_FRAMES / w


def padded_to_the_ladder(g):
    """The plan of a call padded up to the next captured count, in calls of the largest."""
    plan = [BATCHES[-1]] * (g // BATCHES[-1])
    if g % BATCHES[-1]:
        plan.append(BATCHES[bisect.bisect_left(BATCHES, g % BATCHES[-1])])
    return plan


@pytest.mark.parametrize("w", [3, 4, 7, 19])
def test_a_split_covers_the_call_at_no_more_cost_than_padding(w):
    for g in range(1, 200):
        plan = split(g, w, BATCHES)
        assert sum(plan) >= g and all(b in BATCHES for b in plan)
        assert list(plan) == sorted(plan, reverse=True)
        assert sum(plan) - g < plan[-1]  # no replay is padding alone
        assert cost(plan, w) <= cost(padded_to_the_ladder(g), w) + 1e-9


def test_batch_windows_just_past_a_graph_take_one_more_small_replay():
    # 19-frame windows: a replay costs about 1.1 windows, so 17 is 16 + 1, not 24 padded
    assert split(17, 19, BATCHES) == (16, 1)
    assert split(33, 19, BATCHES) == (32, 1)
    assert split(23, 19, BATCHES) == (24,)  # one window of padding is cheaper than two replays
    assert split(64, 19, BATCHES) == (64,)


def test_short_windows_pad_rather_than_replay_again():
    # 3-frame windows: a replay costs 7 windows, so padding 5 up to 8 wins
    assert split(5, 3, BATCHES) == (8,)
    assert split(12, 3, (1, 2, 4, 8, 16)) == (16,)
