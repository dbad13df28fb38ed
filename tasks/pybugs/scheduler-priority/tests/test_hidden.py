import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

from jobq import Job, Scheduler


def names(jobs):
    return [j.name for j in jobs]


def test_equal_priority_does_not_crash_and_is_fifo():
    s = Scheduler()
    s.submit(Job("send-email", priority=1))
    s.submit(Job("resize-image", priority=1))
    assert plain(names(s.drain())) == ["send-email", "resize-image"]


def test_many_equal_priority_jobs_keep_submission_order():
    order = [f"job-{i:02d}" for i in range(30)][::-1]  # deliberately not alphabetical
    s = Scheduler()
    for name in order:
        s.submit(Job(name))  # default priority 0
    assert len(s) == 30
    assert plain(names(s.drain())) == plain(order)


def test_mixed_priorities_fifo_within_priority():
    s = Scheduler()
    for name, prio in [("a", 1), ("b", 2), ("c", 1), ("d", 2), ("e", 1)]:
        s.submit(Job(name, prio))
    assert plain(names(s.drain())) == ["b", "d", "a", "c", "e"]


def test_negative_and_zero_priorities():
    s = Scheduler([Job("z1", 0), Job("n1", -3), Job("z2", 0), Job("n2", -3), Job("p", 4)])
    assert plain(names(s.drain())) == ["p", "z1", "z2", "n1", "n2"]


def test_interleaved_submit_and_pop():
    s = Scheduler()
    s.submit(Job("x", 1))
    s.submit(Job("y", 1))
    assert plain(s.pop().name) == "x"
    s.submit(Job("z", 1))
    s.submit(Job("w", 1))
    assert plain(s.peek().name) == "y"
    assert plain(s.pop().name) == "y"
    s.submit(Job("urgent", 9))
    assert plain(names(s.drain())) == ["urgent", "z", "w"]


def test_same_name_and_unorderable_payloads():
    s = Scheduler()
    first = Job("sync", 2, action=lambda **kw: ("first", kw), payload={"n": 1})
    second = Job("sync", 2, action=lambda **kw: ("second", kw), payload={"n": 2})
    third = Job("sync", 2, payload={"n": 3})
    for job in (first, second, third):
        s.submit(job)
    assert s.peek() is first
    popped = s.drain()
    assert popped[0] is first and popped[1] is second and popped[2] is third


def test_run_all_respects_fifo():
    ran = []

    def record(item):
        ran.append(item)
        return item

    s = Scheduler()
    for i in range(5):
        s.submit(Job("step", 0, action=record, payload={"item": i}))
    s.submit(Job("setup", 1, action=record, payload={"item": "setup"}))
    assert plain(s.run_all()) == ["setup", 0, 1, 2, 3, 4]
    assert plain(ran) == ["setup", 0, 1, 2, 3, 4]
    assert plain(len(s)) == 0 and not s
