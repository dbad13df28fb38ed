"""runtime/warm.py: sandboxes started ahead of the episodes that take them (pure logic: the
sandboxes here are strings, started by a function that records what it was asked)."""

import threading
import time

import pytest

from harness.runtime.warm import WarmPool


class Recorder:
    """make/drop/spec for a pool of fake sandboxes; ``gate`` holds every make until it is set."""

    def __init__(self, fail: set[str] | None = None, gate: threading.Event | None = None) -> None:
        self.made: list[str] = []
        self.dropped: list[str] = []
        self.fail = fail or set()
        self.gate = gate
        self.lock = threading.Lock()

    def make(self, item: str) -> str:
        if self.gate is not None:
            assert self.gate.wait(10)
        if item in self.fail:
            raise RuntimeError(f"cannot start {item}")
        with self.lock:
            self.made.append(item)
        return f"sandbox-for-{item}"

    def drop(self, sandbox: str) -> None:
        with self.lock:
            self.dropped.append(sandbox)

    @staticmethod
    def spec(item: str) -> str | None:
        """Items are "<spec>:<name>"; spec "none" cannot be pooled."""
        kind = item.split(":")[0]
        return None if kind == "none" else kind


def settle(rec: Recorder, made: int) -> None:
    deadline = time.monotonic() + 10
    while len(rec.made) < made and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # and nothing more starts


def test_ahead_of_the_episodes_then_one_more_per_episode_and_never_more_than_the_episodes() -> None:
    rec = Recorder()
    pool: WarmPool[str, str] = WarmPool(rec.make, rec.drop, rec.spec)
    items = [f"a:{i}" for i in range(5)]
    pool.expect(items, ahead=2)
    settle(rec, 2)
    assert sorted(rec.made) == ["a:0", "a:1"]  # two ahead, the first episodes'
    taken = [pool.take(item) for item in items]
    assert taken == [
        "sandbox-for-a:0",
        "sandbox-for-a:1",
        "sandbox-for-a:2",
        "sandbox-for-a:3",
        "sandbox-for-a:4",
    ]
    settle(rec, 5)
    assert sorted(rec.made) == items  # one per episode: none wasted
    assert pool.take("a:extra") is None  # a retry beyond the plan starts its own
    pool.discard()
    assert rec.dropped == []


def test_an_episode_takes_only_a_sandbox_of_its_own_spec() -> None:
    rec = Recorder()
    pool: WarmPool[str, str] = WarmPool(rec.make, rec.drop, rec.spec)
    pool.expect(["a:1", "b:1", "none:1", "a:2"], ahead=2)
    settle(rec, 2)
    assert sorted(rec.made) == ["a:1", "b:1"]  # "none:1" is never started ahead
    assert pool.take("b:9") == "sandbox-for-b:1"  # any b sandbox serves a b episode
    assert pool.take("none:1") is None
    assert pool.take("c:1") is None
    settle(rec, 3)
    assert pool.take("a:1") == "sandbox-for-a:1"
    assert pool.take("a:2") == "sandbox-for-a:2"
    pool.discard()
    assert rec.dropped == []


def test_a_sandbox_that_failed_to_start_is_none_so_the_episode_starts_its_own() -> None:
    rec = Recorder(fail={"a:1"})
    pool: WarmPool[str, str] = WarmPool(rec.make, rec.drop, rec.spec)
    pool.expect(["a:1", "a:2"], ahead=1)
    assert pool.take("a:1") is None
    assert pool.take("a:2") == "sandbox-for-a:2"


def test_discard_removes_what_no_episode_took_including_those_still_starting() -> None:
    gate = threading.Event()
    rec = Recorder(gate=gate)
    pool: WarmPool[str, str] = WarmPool(rec.make, rec.drop, rec.spec)
    pool.expect(["a:1", "a:2", "a:3"], ahead=2)
    done = threading.Thread(target=pool.discard)
    done.start()  # the run stops while both are still starting
    time.sleep(0.1)
    gate.set()
    done.join(10)
    assert not done.is_alive()
    assert sorted(rec.dropped) == ["sandbox-for-a:1", "sandbox-for-a:2"]
    assert pool.take("a:3") is None  # nothing starts after a discard
    time.sleep(0.05)
    assert sorted(rec.made) == ["a:1", "a:2"]


def test_a_take_waits_for_a_sandbox_still_starting() -> None:
    gate = threading.Event()
    rec = Recorder(gate=gate)
    pool: WarmPool[str, str] = WarmPool(rec.make, rec.drop, rec.spec)
    pool.expect(["a:1"], ahead=1)
    threading.Timer(0.2, gate.set).start()
    started = time.monotonic()
    assert pool.take("a:1") == "sandbox-for-a:1"
    assert time.monotonic() - started >= 0.15


@pytest.mark.parametrize("ahead", [0, 1, 4])
def test_a_discarded_pool_can_expect_again(ahead: int) -> None:
    rec = Recorder()
    pool: WarmPool[str, str] = WarmPool(rec.make, rec.drop, rec.spec)
    pool.expect(["a:1", "a:2"], ahead=ahead)
    pool.discard()
    pool.expect(["a:3"], ahead=1)
    assert pool.take("a:3") == "sandbox-for-a:3"
    pool.discard()
    assert len(rec.dropped) == min(ahead, 2)


def test_the_next_sandbox_starts_only_once_the_taken_one_has_settled() -> None:
    rec = Recorder()
    up = threading.Event()
    pool: WarmPool[str, str] = WarmPool(rec.make, rec.drop, rec.spec, settle=lambda _: up.wait(10))
    pool.expect(["a:1", "a:2"], ahead=1)
    assert pool.take("a:1") == "sandbox-for-a:1"  # taken once made, before it has settled
    time.sleep(0.1)
    assert rec.made == ["a:1"]  # a:2 waits: a:1's start still has the machine
    up.set()
    settle(rec, 2)
    assert rec.made == ["a:1", "a:2"]
    assert pool.take("a:2") == "sandbox-for-a:2"
