"""The admission controller (harness/admission): limits from sequences of the server's scrapes.

Each sequence is what the scraper records (running, waiting, KV usage, the preemption counter),
fed with the episodes in flight as a thread executor would have them; the controller must grow,
hold, shed, recover, ignore bad scrapes and never pass its caps.
"""

import math

import pytest

from harness.admission.controller import AdmissionController, AdmissionPolicy, LoadSample
from harness.admission.start import HostRoom, auto_start, sandbox_capacity


def sample(t: float, kv: float, waiting: float = 0, running: float = 1, pre: float = 0) -> LoadSample:
    return LoadSample(t=t, running=running, waiting=waiting, kv_cache_usage=kv, preemptions=pre)


def feed(ctl: AdmissionController, rows: list[tuple[float, float, float]], full: bool = True) -> list[int]:
    """Rows of (kv, waiting, preemption counter); ``full``: every slot of the limit is taken
    (a queue of episodes longer than the limit). The limits after each row."""
    limits = []
    for i, (kv, waiting, pre) in enumerate(rows):
        admitted = ctl.limit if full else 1
        limits.append(ctl.decide(admitted, sample(2.0 * i, kv, waiting, admitted, pre)).limit)
    return limits


def test_grows_one_at_a_time_while_the_cache_has_room_and_nothing_waits() -> None:
    ctl = AdmissionController(start=1, cap=8)
    rows = [(0.05 * (i + 1), 0, 0) for i in range(5)]  # KV rises as episodes join
    assert feed(ctl, rows) == [2, 3, 4, 5, 6]


def test_does_not_grow_an_unused_limit() -> None:
    ctl = AdmissionController(start=3, cap=8)
    assert feed(ctl, [(0.1, 0, 0)] * 4, full=False) == [3, 3, 3, 3]


def test_holds_in_the_band_and_when_one_more_would_fill_it() -> None:
    ctl = AdmissionController(start=4, cap=16)
    assert feed(ctl, [(0.65, 0, 0), (0.75, 0, 0), (0.85, 0, 0)]) == [4, 4, 4]
    # 0.5 with 2 in flight: a third of the same size would take it to 0.75, under 0.8: grow.
    two = AdmissionController(start=2, cap=16)
    assert two.decide(2, sample(0, 0.5, running=2)).action == "grow"
    # 0.55 with 2: a third would take it to 0.825: hold.
    two = AdmissionController(start=2, cap=16)
    d = two.decide(2, sample(0, 0.55, running=2))
    assert (d.action, d.limit) == ("hold", 2) and "~82%" in d.reason


def test_does_not_grow_ahead_of_load_it_has_not_seen() -> None:
    """Five episodes just admitted, one request under way: 0.14 of the cache now, but five (and one
    more) of that size would be 0.84; no request at all: nothing to size one by."""
    ctl = AdmissionController(start=5, cap=8)
    d = ctl.decide(5, sample(0, 0.14, running=1))
    assert (d.action, d.limit) == ("hold", 5) and "6 requests of the average size" in d.reason
    d = ctl.decide(5, sample(2, 0.0, running=0))
    assert (d.action, d.limit) == ("hold", 5) and "no request running" in d.reason
    assert ctl.decide(5, sample(4, 0.3, running=5)).action == "grow"  # all five seen: 0.36 with a sixth


def test_sheds_on_a_preemption_and_recovers_once_the_queue_drains() -> None:
    ctl = AdmissionController(start=6, cap=16)
    rows = [
        (0.62, 0, 0),  # hold: in the band
        (0.88, 1, 0),
        (0.97, 2, 3),  # 3 preemptions: shed below the 6 in flight
        (0.93, 2, 3),  # still full: hold (no new preemption, no second shed)
        (0.95, 1, 5),  # new preemptions: shed again
        (0.70, 0, 5),  # drained: nothing waits, under 0.8
        (0.50, 0, 5),  # room again: grow (4 running: 0.125 each, 0.625 with a fifth)
    ]
    decisions = []
    admitted = 6
    for i, (kv, waiting, pre) in enumerate(rows):
        d = ctl.decide(admitted, sample(2.0 * i, kv, waiting, 4, pre))  # 4 requests running
        decisions.append((d.action, d.limit))
        admitted = min(admitted, d.limit) if d.action == "drained" else admitted
    assert decisions == [
        ("hold", 6),
        ("hold", 6),
        ("shed", 5),
        ("hold", 5),
        ("shed", 4),
        ("drained", 4),
        ("grow", 5),
    ]


def test_sheds_on_a_full_cache_and_on_a_persistent_queue() -> None:
    full = AdmissionController(start=8, cap=8)
    d = full.decide(8, sample(0, 0.92, running=8))
    assert (d.action, d.limit) == ("shed", 7) and "92%" in d.reason
    queue = AdmissionController(start=8, cap=8)
    actions = [queue.decide(8, sample(2.0 * i, 0.4, waiting=2, running=6)).action for i in range(4)]
    assert actions == ["hold", "hold", "shed", "hold"]  # the third scrape in a row with a queue
    assert queue.limit == 7
    # A queue that comes and goes is no reason to shed.
    brief = AdmissionController(start=4, cap=8)
    assert [brief.decide(4, sample(2.0 * i, 0.3, waiting=i % 2)).action for i in range(6)].count("shed") == 0


def test_never_below_one_and_never_above_the_cap() -> None:
    ctl = AdmissionController(start=2, cap=3)
    limits = feed(ctl, [(0.01, 0, 0)] * 10)
    assert max(limits) == 3 and limits[-1] == 3
    for i in range(10):
        ctl.decide(1, sample(100 + i, 0.99, waiting=5, pre=i + 1))
    assert ctl.limit == 1
    assert AdmissionController(start=50, cap=4).limit == 4
    assert AdmissionController(start=0, cap=4).limit == 1


@pytest.mark.parametrize(
    "bad",
    [
        None,
        sample(0, math.nan),
        sample(0, 1.7),
        sample(0, 0.2, waiting=-1),
        sample(0, 0.2, pre=math.inf),
        LoadSample(t=math.nan, running=0, waiting=0, kv_cache_usage=0.1, preemptions=0),
    ],
)
def test_ignores_a_missing_or_malformed_scrape(bad: LoadSample | None) -> None:
    ctl = AdmissionController(start=3, cap=8)
    ctl.decide(3, sample(0, 0.95, pre=0))  # shed to 2, draining
    d = ctl.decide(3, bad)
    assert (d.action, d.limit, ctl.draining) == ("ignore", 2, True)
    # ... and the next good scrape counts from the last good one (no phantom preemption).
    assert ctl.decide(3, sample(4, 0.5, pre=0)).action == "drained"


def test_a_restarted_server_is_a_new_baseline_not_a_preemption() -> None:
    ctl = AdmissionController(start=4, cap=8)
    assert ctl.decide(4, sample(0, 0.3, running=4, pre=7)).action == "grow"  # counts from before it watched
    d = ctl.decide(5, sample(2, 0.3, running=5, pre=0))  # the counter reset: a new server
    assert d.action == "grow" and d.preemptions == 0
    assert ctl.decide(6, sample(4, 0.3, running=6, pre=2)).action == "shed"


def test_policy_thresholds_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="ordered"):
        AdmissionPolicy(grow_below=0.9, shed_at=0.5)


def test_start_and_cap_from_the_plan_max_num_seqs_and_the_memory() -> None:
    """The cores count nothing (a sandbox's CPU limit caps it, see test_admission_host.py); the
    start is the plan's sequences, --max-num-seqs and the sandboxes the memory holds at their
    limits; the cap is --max-concurrency, else 64. sandbox_capacity (cores and memory) still
    sizes verification, whose tests do use their CPUs."""
    n, why = sandbox_capacity(HostRoom(cores=16, memory_gib=100), cpus=2, memory_gib=4)
    assert n == 8 and "16 cores / 2 per episode = 8" in why and "cores decide" in why
    n, why = sandbox_capacity(HostRoom(cores=16, memory_gib=10), cpus=1, memory_gib=4)
    assert n == 2 and "memory decide" in why
    assert sandbox_capacity(HostRoom(cores=1, memory_gib=1), cpus=2, memory_gib=4)[0] == 1
    s = auto_start(sandboxes=8, sandbox_why="8 sandboxes", full_sequences=5, max_num_seqs=16)
    assert (s.start, s.cap) == (5, 64) and s.why.startswith("5 full-length sequences fit")
    s = auto_start(sandboxes=8, sandbox_why="8 sandboxes", full_sequences=40, max_num_seqs=30)
    assert (s.start, s.cap) == (8, 64)
    s = auto_start(sandboxes=8, sandbox_why="8 sandboxes", max_concurrency=2)
    assert (s.start, s.cap) == (2, 2) and "--max-concurrency 2" in s.why
