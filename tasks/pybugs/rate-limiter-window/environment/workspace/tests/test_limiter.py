import pytest

from throttle import SlidingWindowLimiter


class FakeClock:
    def __init__(self, start=0.0):
        self.now = start

    def __call__(self):
        return self.now


def test_allows_up_to_limit_then_blocks():
    clock = FakeClock()
    limiter = SlidingWindowLimiter(max_calls=2, period=1.0, clock=clock)
    assert limiter.allow()
    assert limiter.allow()
    assert not limiter.allow()
    assert limiter.remaining() == 0


def test_keys_are_independent():
    limiter = SlidingWindowLimiter(max_calls=1, period=60, clock=FakeClock())
    assert limiter.allow("alice")
    assert limiter.allow("bob")
    assert not limiter.allow("alice")


def test_reset():
    limiter = SlidingWindowLimiter(max_calls=1, period=60, clock=FakeClock())
    assert limiter.allow("alice")
    limiter.reset("alice")
    assert limiter.allow("alice")


@pytest.mark.parametrize("kwargs", [{"max_calls": 0, "period": 1}, {"max_calls": 1, "period": 0}])
def test_invalid_configuration(kwargs):
    with pytest.raises(ValueError):
        SlidingWindowLimiter(**kwargs)
