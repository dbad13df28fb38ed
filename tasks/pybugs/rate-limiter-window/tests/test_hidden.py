import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

import pytest  # noqa: E402

from throttle import SlidingWindowLimiter  # noqa: E402


class FakeClock:
    def __init__(self, start=0.0):
        self.now = start

    def __call__(self):
        return self.now


@pytest.fixture
def clock():
    return FakeClock(1000.0)


def make(clock, max_calls=3, period=10.0):
    return SlidingWindowLimiter(max_calls=max_calls, period=period, clock=clock)


def test_recovers_after_window_passes(clock):
    limiter = make(clock)
    for offset in (0.0, 1.0, 2.0):
        clock.now = 1000.0 + offset
        assert plain(limiter.allow("api"))
    clock.now = 1005.0
    assert not plain(limiter.allow("api"))
    clock.now = 1060.0
    assert plain(limiter.allow("api"))
    assert plain(limiter.remaining("api")) == 2


def test_slots_free_up_one_by_one(clock):
    limiter = make(clock)
    for offset in (0.0, 1.0, 2.0):
        clock.now = 1000.0 + offset
        assert plain(limiter.allow())
    clock.now = 1009.5
    assert not plain(limiter.allow())
    # the call made at 1000.0 stops counting at exactly 1010.0
    clock.now = 1010.0
    assert plain(limiter.allow())
    assert not plain(limiter.allow())
    clock.now = 1011.0
    assert plain(limiter.allow())
    assert not plain(limiter.allow())


def test_rejected_calls_do_not_extend_the_block(clock):
    limiter = make(clock, max_calls=2, period=5.0)
    assert plain(limiter.allow())
    assert plain(limiter.allow())
    for step in range(1, 10):
        clock.now = 1000.0 + step * 0.5  # hammering while blocked
        assert not plain(limiter.allow())
    clock.now = 1005.0
    assert plain(limiter.allow())


def test_remaining_reflects_expiry(clock):
    limiter = make(clock)
    assert plain(limiter.remaining("k")) == 3
    limiter.allow("k")
    clock.now += 4.0
    limiter.allow("k")
    assert plain(limiter.remaining("k")) == 1
    clock.now += 6.0  # first call has aged out
    assert plain(limiter.remaining("k")) == 2
    clock.now += 100.0
    assert plain(limiter.remaining("k")) == 3


def test_retry_after_agrees_with_allow(clock):
    limiter = make(clock, max_calls=2, period=10.0)
    assert plain(limiter.retry_after()) == 0.0
    limiter.allow()
    clock.now = 1003.0
    limiter.allow()
    clock.now = 1004.0
    assert plain(limiter.retry_after()) == pytest.approx(6.0)
    assert not plain(limiter.allow())
    clock.now = 1010.0
    assert plain(limiter.retry_after()) == 0.0
    assert plain(limiter.allow())
    assert plain(limiter.retry_after()) == pytest.approx(3.0)  # oldest now is the one at 1003


def test_steady_rate_never_blocked(clock):
    limiter = make(clock, max_calls=2, period=1.0)
    for i in range(200):
        clock.now = 1000.0 + i * 0.5
        assert plain(limiter.allow("steady")), i


def test_keys_expire_independently(clock):
    limiter = make(clock, max_calls=1, period=10.0)
    assert plain(limiter.allow("a"))
    clock.now = 1005.0
    assert plain(limiter.allow("b"))
    clock.now = 1010.0
    assert plain(limiter.allow("a"))
    assert not plain(limiter.allow("b"))
    clock.now = 1015.0
    assert plain(limiter.allow("b"))
