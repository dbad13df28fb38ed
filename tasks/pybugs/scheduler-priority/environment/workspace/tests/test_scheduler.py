import pytest

from jobq import EmptySchedulerError, Job, Scheduler


def test_higher_priority_first():
    s = Scheduler([Job("low", 1), Job("high", 10), Job("mid", 5)])
    assert len(s) == 3
    assert s.peek().name == "high"
    assert [j.name for j in s.drain()] == ["high", "mid", "low"]
    assert not s


def test_run_all_returns_results():
    s = Scheduler()
    s.submit(Job("add", 2, action=lambda a, b: a + b, payload={"a": 1, "b": 2}))
    s.submit(Job("noop", 1))
    assert s.run_all() == [3, None]


def test_empty():
    s = Scheduler()
    with pytest.raises(EmptySchedulerError):
        s.pop()
    with pytest.raises(EmptySchedulerError):
        s.peek()
