"""The continuous-batching scheduler, on the CPU and without torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipeline.engines.orpheus.serving.scheduler import Plan, Scheduler, SchedulerConfig, Seq, SeqState

STOP = 99


def run_step(s: Scheduler, produce) -> tuple:
    """One step with a fake device: ``produce(seq)`` gives the token each row draws."""
    plan = s.schedule()
    tokens = {seq.row: [produce(seq)] for seq in plan.decode}
    for c in plan.prefill:
        if c.last:
            tokens.setdefault(c.seq.row, []).append(produce(c.seq))
    finished = s.postprocess(plan, tokens)
    return plan, finished


def test_importing_the_scheduler_does_not_import_torch():
    code = "import sys, pipeline.engines.orpheus.serving.scheduler; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_finished_sequence_frees_its_row_and_the_next_one_is_admitted_at_the_next_step():
    s = Scheduler(rows=2, max_context=100)
    a, b, c = (Seq(k, [1, 2, 3], budget=5, stop_token=STOP) for k in "abc")
    for q in (a, b, c):
        s.add(q)

    def produce(q):  # a ends on its second token
        return STOP if q is a and q.generated + q.inflight >= 2 else 7

    plan, _ = run_step(s, produce)
    assert [ch.seq.key for ch in plan.prefill] == ["a", "b"] and c.state is SeqState.WAITING
    plan, finished = run_step(s, produce)
    assert finished == [a] and a.finish_reason == "eos"
    plan, _ = run_step(s, produce)
    # b moved down into a's row and c took the next one, in the same step a finished after
    assert [ch.seq.key for ch in plan.prefill] == ["c"]
    assert plan.moves == [(1, 0, b.context - 1)] and b.row == 0 and c.row == 1


def test_a_piece_asked_again_takes_the_next_free_row_before_the_batch_work_waiting():
    s = Scheduler(rows=2, max_context=100)
    for key in ("a", "b", "c", "d"):
        s.add(Seq(key, [1, 2, 3], budget=1))
    run_step(s, lambda q: 7)  # a and b run their one token and finish; c and d wait
    s.add(Seq("again", [1, 2, 3], budget=1, again=True))  # a silent piece, asked again
    s.add(Seq("again too", [1, 2, 3], budget=1, again=True))  # another, after it
    plan, _ = run_step(s, lambda q: 7)
    assert [ch.seq.key for ch in plan.prefill] == ["again", "again too"]
    plan, _ = run_step(s, lambda q: 7)
    assert [ch.seq.key for ch in plan.prefill] == ["c", "d"]


def test_rows_stay_compact_when_a_low_row_finishes():
    s = Scheduler(rows=3, max_context=100)
    seqs = [Seq(k, [1, 2], budget=n, stop_token=STOP) for k, n in (("a", 50), ("b", 50), ("c", 50))]
    for q in seqs:
        s.add(q)
    run_step(s, lambda q: 7)
    _plan, finished = run_step(s, lambda q: STOP if q.key == "a" else 7)
    assert finished == [seqs[0]] and seqs[0].finish_reason == "eos"
    plan = s.schedule()
    c = seqs[2]
    assert plan.moves == [(2, 0, 2 + 2)] and c.row == 0  # its prompt and 2 tokens move
    assert c.inflight == 1 and c.context == 2 + 2 + 1  # this plan decodes one more
    assert sorted(q.row for q in plan.decode) == [0, 1] and plan.rows == 2


def test_realtime_goes_first_and_batch_work_leaves_reserved_rows_free():
    s = Scheduler(rows=4, max_context=100, config=SchedulerConfig(reserved=1))
    batch = [Seq(f"b{i}", [1], budget=50) for i in range(5)]
    for q in batch:
        s.add(q)
    plan, _ = run_step(s, lambda q: 7)
    assert len(plan.prefill) == 3  # one row kept for realtime
    rt = Seq("rt", [1], budget=50, realtime=True)
    s.add(rt)
    plan, _ = run_step(s, lambda q: 7)
    assert [ch.seq.key for ch in plan.prefill] == ["rt"]


def test_realtime_flood_cannot_take_the_batch_floor():
    s = Scheduler(rows=4, max_context=100, config=SchedulerConfig(reserved=1, batch_floor=1))
    for i in range(6):
        s.add(Seq(f"rt{i}", [1], budget=50, realtime=True))
    s.add(Seq("b", [1], budget=50))
    plan, _ = run_step(s, lambda q: 7)
    keys = [ch.seq.key for ch in plan.prefill]
    assert keys == ["rt0", "rt1", "rt2", "b"]


def test_long_prompts_are_prefilled_in_chunks_within_the_token_budget():
    s = Scheduler(rows=2, max_context=100, config=SchedulerConfig(prefill_tokens=4))
    long = Seq("long", list(range(10)), budget=5)
    s.add(long)
    spans = []
    for _ in range(3):
        plan, _ = run_step(s, lambda q: 7)
        spans += [(c.start, c.end, c.last) for c in plan.prefill]
    assert spans == [(0, 4, False), (4, 8, False), (8, 10, True)]
    assert long.state is SeqState.RUNNING and long.generated == 1


def test_running_streams_keep_decoding_while_a_long_prompt_is_prefilled():
    s = Scheduler(rows=2, max_context=100, config=SchedulerConfig(prefill_tokens=3))
    short = Seq("short", [1, 2], budget=20)
    s.add(short)
    run_step(s, lambda q: 7)
    s.add(Seq("long", list(range(9)), budget=5))
    for _ in range(3):
        plan, _ = run_step(s, lambda q: 7)
        assert short in plan.decode


def test_budget_is_cut_to_the_row_and_oversized_prompts_are_refused():
    s = Scheduler(rows=1, max_context=10)
    q = Seq("a", [1] * 6, budget=100)
    s.add(q)
    assert q.budget == 4
    with pytest.raises(ValueError, match="does not fit"):
        s.add(Seq("b", [1] * 10, budget=1))


def test_cancel_a_waiting_and_a_running_sequence():
    s = Scheduler(rows=1, max_context=50)
    a, b = Seq("a", [1], budget=9), Seq("b", [1], budget=9)
    s.add(a)
    s.add(b)
    run_step(s, lambda q: 7)
    assert s.cancel("b") is b and b.finish_reason == "cancelled"
    assert s.cancel("a") is a and a.state is SeqState.FINISHED
    plan = s.schedule()
    assert plan.empty and s.idle


def test_batch_work_is_admitted_every_few_steps_and_realtime_at_once():
    s = Scheduler(rows=8, max_context=100, config=SchedulerConfig(admit_every=4))
    s.add(Seq("b0", [1], budget=50))
    plan, _ = run_step(s, lambda q: 7)  # nothing running: admitted at once
    assert [c.seq.key for c in plan.prefill] == ["b0"]
    s.add(Seq("b1", [1], budget=50))
    s.add(Seq("rt", [1], budget=50, realtime=True))
    plan, _ = run_step(s, lambda q: 7)
    assert [c.seq.key for c in plan.prefill] == ["rt"]
    plan, _ = run_step(s, lambda q: 7)
    assert plan.prefill == []
    plan, _ = run_step(s, lambda q: 7)
    plan, _ = run_step(s, lambda q: 7)  # the 5th step: a batch turn
    assert [c.seq.key for c in plan.prefill] == ["b1"]


def test_realtime_preempts_young_batch_work_which_resumes_with_what_it_had():
    s = Scheduler(rows=4, max_context=100, config=SchedulerConfig(batch_floor=1, realtime_max_rows=3))
    batch = [Seq(f"b{i}", [1, 2], budget=40) for i in range(4)]
    for q in batch:
        s.add(q)
    for _ in range(3):
        run_step(s, lambda q: 7)
    assert s.running_rows == 4
    s.add(Seq("rt0", [1], budget=40, realtime=True))
    s.add(Seq("rt1", [1], budget=40, realtime=True))
    plan, _ = run_step(s, lambda q: 7)
    # 2 realtime + 1 batch floor = 3 rows: three batch sequences gave their rows back
    assert sorted(c.seq.key for c in plan.prefill) == ["rt0", "rt1"]
    assert s.running_rows == 3 and s.preempted == 3
    parked = [q for q in batch if q.state is SeqState.WAITING]
    assert len(parked) == 3 and all(q.generated == 3 and q.preemptions == 1 for q in parked)
    # once the realtime streams end, the parked ones come back and prefill prompt + tokens
    s.cancel("rt0")
    s.cancel("rt1")
    plan, _ = run_step(s, lambda q: 7)
    resumed = [c for c in plan.prefill if c.seq in parked]
    assert resumed and all(c.end == 2 + 3 and c.last for c in resumed)


def overlapped(s: Scheduler, produce, steps: int, finished: list | None = None) -> list:
    """Steps as the GPU loop runs them: plan N+1 is made before N's tokens are post-processed.
    Returns each step's plan; what postprocess reports finished is appended to ``finished``."""
    plans, pending, finished = [], None, [] if finished is None else finished
    for _ in range(steps):
        plan = s.schedule()
        plans.append(plan)
        tokens = {seq.row: [produce(seq)] for seq in plan.decode}
        for c in plan.prefill:
            if c.last:
                tokens.setdefault(c.seq.row, []).append(produce(c.seq))
        if pending:
            finished += s.postprocess(*pending)
        pending = (plan, tokens)
    if pending:
        finished += s.postprocess(*pending)
    return plans


def test_overlapped_steps_drop_the_token_drawn_after_an_end():
    s = Scheduler(rows=2, max_context=100)
    a = Seq("a", [1, 2], budget=50, stop_token=STOP)
    s.add(a)
    # a's first token (from the prefill) is drawn at step 1, the decode steps draw the next ones;
    # the 3rd token is the end, but step 4 was planned before that was known
    finished = []
    plans = overlapped(s, lambda q: STOP if q.generated + q.inflight == 3 else 7, 5, finished)
    assert finished == [a]  # once: the dropped token does not end it again
    assert [a in p.decode for p in plans] == [False, True, True, True, False]
    assert a.tokens == [7, 7, STOP] and a.finish_reason == "eos" and a.generated == 3
    assert plans[4].empty and s.idle


def test_overlapped_steps_never_run_past_the_budget():
    s = Scheduler(rows=1, max_context=100)
    a = Seq("a", [1], budget=3)
    s.add(a)
    plans = overlapped(s, lambda q: 7, 5)
    assert sum(a in p.decode for p in plans) == 2  # 1 token from the prefill + 2 decode steps
    assert a.tokens == [7, 7, 7] and a.finish_reason == "budget"


def test_tokens_in_flight_at_a_preemption_are_drawn_again_after_it():
    s = Scheduler(rows=2, max_context=100, config=SchedulerConfig(batch_floor=0, realtime_max_rows=1))
    b = Seq("b", [1, 2], budget=40)
    s.add(b)
    overlapped(s, lambda q: 7, 3)  # b: one token back, one in flight
    s.add(Seq("rt", [1], budget=40, realtime=True))
    plan = s.schedule()  # b gives its row to the realtime stream
    assert b.state is SeqState.WAITING and b.epoch == 1 and b.inflight == 0
    s.postprocess(plan, {})
    generated = b.generated
    # the step that was in flight when b was preempted comes back: its token is stale
    stale = Plan(owners={0: (b, 0)})
    s.postprocess(stale, {0: [123]})
    assert b.generated == generated and 123 not in b.tokens


def tiers_hold(s: Scheduler) -> int:
    """Rows are compact, realtime below batch, and every sequence knows its row; returns r."""
    r = sum(1 for q in s.by_row if q.realtime)
    assert [q.realtime for q in s.by_row] == [True] * r + [False] * (len(s.by_row) - r)
    assert all(q.row == i and q.state is not SeqState.WAITING for i, q in enumerate(s.by_row))
    return r


def test_a_realtime_arrival_takes_the_lowest_batch_row_which_moves_to_the_end():
    s = Scheduler(rows=6, max_context=100)
    batch = [Seq(f"b{i}", [1, 2], budget=40) for i in range(3)]
    for q in batch:
        s.add(q)
    for _ in range(2):
        run_step(s, lambda q: 7)
    rt = Seq("rt", [1, 2, 3], budget=40, realtime=True)
    s.add(rt)
    plan, _ = run_step(s, lambda q: 7)
    # b0 (prompt 2 + 2 tokens in the cache) goes to row 3; the stream prefills into row 0
    assert plan.moves == [(0, 3, 4)] and rt.row == 0 and batch[0].row == 3
    assert tiers_hold(s) == 1


@pytest.mark.parametrize("playing_every,pause", [(1, False), (3, False), (1, True), (3, True)])
def test_tiers_hold_through_arrivals_finishes_and_preemptions(playing_every, pause):
    import random

    rng = random.Random(7)
    s = Scheduler(
        rows=8,
        max_context=200,
        config=SchedulerConfig(
            batch_floor=1,
            realtime_max_rows=6,
            admit_every=2,
            batch_every=2,
            batch_every_starting=3,
            first_tokens=4,
            playing_every=playing_every,
            pause_batch=pause,
        ),
    )
    made = 0
    for step in range(300):
        if rng.random() < 0.3:
            realtime = rng.random() < 0.4
            s.add(
                Seq(
                    f"{'rt' if realtime else 'b'}{made}",
                    [1] * rng.randint(1, 9),
                    budget=rng.randint(2, 30),
                    realtime=realtime,
                    stop_token=STOP,
                )
            )
            made += 1
        plan, _ = run_step(s, lambda q: STOP if rng.random() < 0.05 else 7)
        r = tiers_hold(s)
        rows_decoded = sorted(q.row for q in plan.decode)
        assert len(set(rows_decoded)) == len(rows_decoded)
        assert all(row < plan.rows for row in rows_decoded)
        if plan.realtime_only:  # the bottom tier alone
            assert all(q.realtime for q in plan.decode) and plan.rows <= r
        elif plan.rows < len(s.by_row):  # batch rows over the cap wait (pause_batch)
            assert pause and plan.rows <= 6 and r <= plan.rows
        if plan.starting_only:  # streams short of their first 4 tokens (this step's included)
            assert plan.decode and all(q.realtime and len(q.tokens) <= 4 for q in plan.decode)
    assert s.idle or made
    assert (s.starting_steps > 0) == (playing_every > 1)


def test_realtime_only_steps_between_full_ones_while_streams_run():
    s = Scheduler(
        rows=8, max_context=200, config=SchedulerConfig(batch_every=2, batch_every_starting=4, first_tokens=3)
    )
    batch = [Seq(f"b{i}", [1, 2], budget=100) for i in range(3)]
    for q in batch:
        s.add(q)
    plan, _ = run_step(s, lambda q: 7)
    assert not plan.decode  # prompts only
    assert len(run_step(s, lambda q: 7)[0].decode) == 3  # no stream: every step is full
    rt = Seq("rt", [1, 2], budget=100, realtime=True)
    s.add(rt)
    kinds = []
    for _ in range(12):
        plan, _ = run_step(s, lambda q: 7)
        kinds.append("full" if len(plan.decode) == 4 or any(not q.realtime for q in plan.decode) else "rt")
        if kinds[-1] == "rt":
            assert [q.key for q in plan.decode] in ([], ["rt"]) and plan.rows == 1
    # its prompt and first 3 tokens: one full step in 4; after that one in 2
    assert kinds[:4] == ["rt", "rt", "rt", "full"]
    assert kinds[4:] == ["rt", "full"] * 4
    assert s.realtime_steps == kinds.count("rt")
    assert rt.generated == 12 and all(q.generated == 2 + kinds.count("full") for q in batch)


def test_batch_prompts_wait_for_a_full_step_while_streams_run():
    s = Scheduler(
        rows=8, max_context=200, config=SchedulerConfig(batch_every=3, batch_every_starting=3, first_tokens=1)
    )
    s.add(Seq("b0", [1, 2], budget=100))
    run_step(s, lambda q: 7)
    s.add(Seq("rt", [1], budget=100, realtime=True))
    run_step(s, lambda q: 7)
    late = Seq("b1", [1, 2, 3], budget=100)
    s.add(late)
    admitted_at = None
    for step in range(6):
        plan, _ = run_step(s, lambda q: 7)
        if any(c.seq is late for c in plan.prefill):
            admitted_at = step
            assert any(not q.realtime for q in plan.decode)  # on a full step
            break
    assert admitted_at is not None


def test_batch_work_keeps_its_floor_under_a_steady_flood_of_streams():
    """Streams fill the realtime cap before any batch job starts, and more keep coming: batch jobs
    are still admitted up to the floor, and finish."""
    s = Scheduler(
        rows=8,
        max_context=200,
        config=SchedulerConfig(
            batch_floor=2, realtime_max_rows=4, batch_every=2, batch_every_starting=2, first_tokens=2
        ),
    )
    made = 0
    for _ in range(6):
        s.add(Seq(f"rt{made}", [1], budget=20, realtime=True))
        made += 1
    jobs = [Seq(f"b{i}", [1, 2], budget=10) for i in range(4)]
    for q in jobs:
        s.add(q)
    for step in range(200):
        if step % 3 == 0:  # a new stream every third step, for good
            s.add(Seq(f"rt{made}", [1], budget=20, realtime=True))
            made += 1
        run_step(s, lambda q: 7)
        assert sum(1 for q in s.by_row if not q.realtime) <= max(2, 8 - sum(q.realtime for q in s.by_row))
    assert all(q.finish_reason == "budget" for q in jobs)


def test_starting_only_steps_decode_the_new_stream_alone_between_the_others():
    """With ``playing_every=2``, while a stream waits for its first chunk, every other step over the
    realtime rows decodes it alone (at the realtime tier's batch, the playing stream's row idle);
    once it has its first tokens, the steps are as before."""
    s = Scheduler(
        rows=8,
        max_context=400,
        config=SchedulerConfig(batch_every=2, batch_every_starting=4, first_tokens=6, playing_every=2),
    )
    s.add(Seq("b", [1, 2], budget=300))
    s.add(Seq("old", [1], budget=300, realtime=True))
    for _ in range(12):  # "old" is past its first tokens
        run_step(s, lambda q: 7)
    new = Seq("new", [1], budget=300, realtime=True)
    s.add(new)
    kinds = []
    while new.generated < 6:
        plan, _ = run_step(s, lambda q: 7)
        keys = sorted(q.key for q in plan.decode)
        kinds.append("start" if plan.starting_only else "rt" if plan.realtime_only else "full")
        if plan.starting_only:
            assert keys == ["new"] and plan.realtime_only and plan.rows == 2
        elif plan.realtime_only:
            assert set(keys) <= {"new", "old"} and plan.rows == 2
    # after the prompt's step (an ordinary one: the stream has no token yet), the steps over the
    # realtime rows alternate between the starting stream alone and both, with a full step among
    # every 4 (as without starting-only steps)
    between = [k for k in kinds[1:] if k != "full"]
    assert between == ["start", "rt"] * (len(between) // 2) + ["start"] * (len(between) % 2)
    assert all("full" in kinds[i : i + 4] for i in range(len(kinds) - 3))
    assert s.starting_steps == kinds.count("start") > 0
    after = [run_step(s, lambda q: 7)[0] for _ in range(6)]
    assert not any(p.starting_only for p in after)
    assert [p.realtime_only for p in after] in ([True, False] * 3, [False, True] * 3)


def test_starting_only_steps_without_batch_work():
    """Streams alone: every step is a full one over the realtime rows, and with ``playing_every``
    every other one decodes the starting stream alone."""
    s = Scheduler(
        rows=4,
        max_context=200,
        config=SchedulerConfig(batch_every=2, batch_every_starting=4, first_tokens=4, playing_every=2),
    )
    s.add(Seq("old", [1], budget=100, realtime=True))
    for _ in range(8):
        run_step(s, lambda q: 7)
    new = Seq("new", [1], budget=100, realtime=True)
    s.add(new)
    plans = []
    while new.generated < 4:
        plans.append(run_step(s, lambda q: 7)[0])
    starting = [p for p in plans if p.starting_only]
    assert starting and all([q.key for q in p.decode] == ["new"] for p in starting)
    assert all(len(p.decode) == 2 for p in plans[1:] if not p.starting_only)


def test_a_playing_stream_low_on_audio_joins_the_starting_only_steps_until_it_is_ahead_again():
    """With ``low_lead_s``, a playing stream whose audio runs less than that ahead of its player
    (started at its first chunk, playing ``playback_tokens_per_s``) decodes in the starting-only
    steps too; a stream well ahead does not, and neither does the low one once it is ahead."""
    now = [0.0]
    s = Scheduler(
        rows=8,
        max_context=400,
        config=SchedulerConfig(
            first_tokens=4,
            playing_every=2,
            frame_tokens=2,
            playback_tokens_per_s=10.0,
            low_lead_s=0.3,
            clock=lambda: now[0],
        ),
    )
    ahead = Seq("ahead", [1], budget=300, realtime=True)
    s.add(ahead)
    for _ in range(20):
        run_step(s, lambda q: 7)
    assert ahead.first_chunk_at == 0.0
    now[0] = 1.0  # its audio: 1.8 s made, 1.0 s played
    low = Seq("low", [1], budget=300, realtime=True)
    s.add(low)
    while low.generated < 4:
        run_step(s, lambda q: 7)
    assert low.first_chunk_at == 1.0
    now[0] = 1.1  # its audio: 0.2 s made, 0.1 s played

    def lead(q: Seq) -> float:
        return (q.generated - 2) / 10.0 - (now[0] - q.first_chunk_at)

    new = Seq("new", [1], budget=300, realtime=True)
    s.add(new)
    seen = []
    while new.generated < 4:
        was_low = lead(low) < 0.3
        plan, _ = run_step(s, lambda q: 7)
        if plan.starting_only:
            seen.append(sorted(q.key for q in plan.decode))
            assert seen[-1] == (["low", "new"] if was_low else ["new"])
    assert ["low", "new"] in seen and ["new"] in seen  # low, then ahead again
    assert lead(ahead) > 0.3 and all("ahead" not in k for k in seen)


def test_leads_are_not_tracked_without_a_playback_rate():
    s = Scheduler(rows=4, max_context=200, config=SchedulerConfig(first_tokens=4, playing_every=2, low_lead_s=0.3))
    assert s.config.low_lead_s == 0.0


@pytest.mark.parametrize("pause", [False, True], ids=["preempt", "pause"])
def test_the_realtime_cap_preempts_or_pauses_batch_work(pause):
    """Six batch jobs run in eight rows; two streams arrive under a cap of four decoding rows.
    Preempting gives the youngest batch rows back (they prefill again later); pausing keeps every
    row (two are free for the streams) and full steps decode the streams and the two lowest batch
    rows, the others waiting where they are, and finishing once the streams have."""
    s = Scheduler(
        rows=8,
        max_context=200,
        config=SchedulerConfig(
            realtime_max_rows=4, batch_floor=1, batch_every=2, batch_every_starting=2, first_tokens=2, pause_batch=pause
        ),
    )
    jobs = [Seq(f"b{i}", [1, 2], budget=40) for i in range(6)]
    for q in jobs:
        s.add(q)
    for _ in range(3):
        run_step(s, lambda q: 7)
    streams = [Seq(f"rt{i}", [1], budget=12, realtime=True) for i in range(2)]
    for q in streams:
        s.add(q)
    held = {q.key: q.generated for q in jobs}
    for _ in range(4):
        plan, _ = run_step(s, lambda q: 7)
        if not plan.realtime_only:
            assert plan.rows == 4 and len(plan.decode) <= 4
    if pause:
        assert s.preempted == 0 and all(q.row >= 0 for q in jobs)
        moved = [q for q in jobs if q.generated > held[q.key]]
        assert len(moved) == 2 and all(q.row in (2, 3) for q in moved)  # the lowest batch rows
    else:
        assert s.preempted >= 4
    while not s.idle:
        run_step(s, lambda q: 7)
    assert all(q.finish_reason == "budget" and len(q.tokens) == 40 for q in jobs)
    assert all(q.finish_reason == "budget" for q in streams)
    assert (s.preempted == 0) == pause


def test_a_short_realtime_job_takes_the_next_free_row_before_a_long_jobs_waiting_pieces():
    s = Scheduler(rows=4, max_context=100)
    long = [Seq(("long", i), [1, 2], budget=3 if i == 0 else 50, realtime=True, group="long") for i in range(8)]
    for q in long:
        s.add(q)
    run_step(s, lambda q: 7)  # four of the long job's pieces hold every row
    short = Seq(("short", 0), [1, 2], budget=50, realtime=True, group="short")
    s.add(short)
    admitted: list = []
    while not admitted:
        plan, _ = run_step(s, lambda q: 7)
        admitted = [c.seq.key for c in plan.prefill if c.start == 0]
    # The first row the long job gives back goes to the short one, ahead of its own four waiting
    # pieces, while the long job's other pieces still run.
    assert admitted == [("short", 0)]
    assert sum(q.state is SeqState.RUNNING for q in long) == 3
    assert long[0].state is SeqState.FINISHED and len(s.waiting_rt) == 4


def test_batch_work_is_admitted_longest_first_and_equals_in_the_order_they_came():
    s = Scheduler(rows=3, max_context=100)
    for key, budget in (("short", 2), ("long", 9), ("middle", 5), ("long too", 9)):
        s.add(Seq(key, [1, 2, 3], budget=budget))
    plan, _ = run_step(s, lambda q: 7)
    assert [ch.seq.key for ch in plan.prefill] == ["long", "long too", "middle"]


def test_a_short_piece_is_passed_over_at_most_as_many_times_as_there_are_rows():
    s = Scheduler(rows=2, max_context=100)
    s.add(Seq("short", [1, 2, 3], budget=1))
    admitted = []
    for step in range(4):
        for k in "ab":  # two rows' worth of longer ones come every step
            s.add(Seq(f"long {step}{k}", [1, 2, 3], budget=50))
        plan, _ = run_step(s, lambda q: STOP)
        admitted += [ch.seq.key for ch in plan.prefill]
        for seq in list(s.by_row):
            if seq.state is SeqState.RUNNING:
                s.cancel(seq.key)  # free the rows: only the order of admission matters here
    assert admitted[:3] == ["long 0a", "long 0b", "short"]  # passed over twice, then first


def test_a_preempted_piece_at_the_head_goes_before_longer_ones():
    s = Scheduler(rows=1, max_context=100)
    s.add(Seq("long", [1, 2, 3], budget=50))
    again = Seq("again", [1, 2, 3], budget=1, again=True)
    s.add(again)
    assert s._next_batch() is again


def test_a_filling_batch_is_admitted_at_every_step_and_a_full_one_every_admit_every():
    config = SchedulerConfig(admit_every=4, prefill_tokens=3)  # one 3-token prompt a step
    s = Scheduler(rows=8, max_context=100, config=config)
    for i in range(12):
        s.add(Seq(f"p{i}", [1, 2, 3], budget=40))
    admitted = []
    for _ in range(8):
        plan, _ = run_step(s, lambda q: 7)
        admitted.append(len(plan.prefill))
    # every step while 4 or more rows are free (8, 7, 6, 5, 4), then every 4th step
    assert admitted == [1, 1, 1, 1, 1, 0, 0, 0]
    s.add(Seq("rt", [1, 2, 3], budget=40, realtime=True))
    plan, _ = run_step(s, lambda q: 7)  # a stream: the realtime arrival, and no filling
    assert [ch.seq.key for ch in plan.prefill] == ["rt"]
