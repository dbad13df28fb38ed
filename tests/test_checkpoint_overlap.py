"""A checkpoint's files saved while the model thinks: off the episode's path for a runner that calls
``before_tools``, never overlapping a tool, and within ``turn_done`` for one that does not."""

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from harness.episodes.agent_log import agent_logs_to
from harness.resume.checkpoint import DIR, JOURNAL, EpisodeCheckpoint, load
from harness.resume.files import Generation, LocalFiles


class SlowFiles:
    """A real workspace's snapshots, each taking ``delay`` seconds longer (a large tree, a slow disk),
    and held until ``gate`` is set when one is given."""

    def __init__(
        self, root: Path, delay: float = 0.0, fail: bool = False, gate: threading.Event | None = None
    ) -> None:
        self.files = LocalFiles(root)
        self.delay, self.fail, self.gate = delay, fail, gate
        self.started = threading.Event()
        self.finished = threading.Event()

    def baseline(self) -> None:
        self.files.baseline()

    def snapshot(self, root: Path, turn: int) -> Generation:
        self.started.set()
        time.sleep(self.delay)
        if self.gate is not None:
            assert self.gate.wait(60), "the test never released the save"
        self.finished.set()
        if self.fail:
            raise OSError(28, "No space left on device")
        return self.files.snapshot(root, turn)

    def restore(self, root: Path, tars: list[str], paths: str | None) -> None:
        self.files.restore(root, tars, paths)


def checkpoint(tmp_path: Path, files: SlowFiles, drain: threading.Event | None = None) -> EpisodeCheckpoint:
    files.baseline()
    return EpisodeCheckpoint(
        tmp_path / "ep", "openhands-codeact", files, every=1, drain=drain or threading.Event()
    )  # type: ignore[arg-type]


def lines(tmp_path: Path) -> list[dict[str, Any]]:
    journal = tmp_path / "ep" / DIR / JOURNAL
    if not journal.exists():
        return []
    return [json.loads(line.split(b"\t", 1)[1]) for line in journal.read_bytes().splitlines()]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    (tmp_path / "ep").mkdir()
    return ws


def test_a_runner_that_calls_before_tools_does_not_wait_for_the_files(
    tmp_path: Path, workspace: Path
) -> None:
    """The save runs beside the episode (held at a gate here, as a large tree or a slow disk holds
    it): turn_done returns while it runs, before_tools waits for it, and the episode's wait is the
    save less the model's thinking."""
    gate = threading.Event()
    files = SlowFiles(workspace, gate=gate)
    ck = checkpoint(tmp_path, files)
    messages = [{"role": "user", "content": "go"}]
    ck.before_tools()  # the runner's first tool call: it calls before_tools, so saves may overlap
    (workspace / "a.txt").write_text("turn 1\n")
    assert ck.turn_done(1, lambda: {"messages": messages}) is False  # returned, the save held
    assert files.started.wait(5) and not files.finished.is_set()  # the files are saved beside the episode
    messages.append({"role": "assistant", "content": "next"})  # the runner's next turn begins
    thinking = 0.4
    time.sleep(thinking)  # the model thinks, the save still held
    waiter = threading.Thread(
        target=ck.before_tools
    )  # the tool may not change a file before the save has read it
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive(), "before_tools did not wait for the save"
    gate.set()
    waiter.join(10)
    assert not waiter.is_alive() and files.finished.is_set()
    # the checkpoint is the turn's: its state as it was at turn_done, its files as the turn left them
    assert lines(tmp_path) == [{"messages": [{"role": "user", "content": "go"}]}]
    (workspace / "a.txt").write_text("turn 2\n")
    ck.close()
    marker, state, _ = load(tmp_path / "ep", "openhands-codeact")  # type: ignore[misc]
    assert marker.turn == 1 and state.state == {"messages": [{"role": "user", "content": "go"}]}
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "a.txt").write_text("a\n")
    LocalFiles(fresh).restore(tmp_path / "ep" / DIR, marker.tars, marker.paths)
    assert (fresh / "a.txt").read_text() == "turn 1\n"
    # What the episode waited is less than the save took: the thinking overlapped it.
    assert ck.save_seconds >= thinking and ck.seconds < ck.save_seconds


def test_a_runner_that_never_calls_before_tools_has_its_files_saved_within_turn_done(
    tmp_path: Path, workspace: Path
) -> None:
    files = SlowFiles(workspace, delay=0.3)
    ck = checkpoint(tmp_path, files)
    started = time.monotonic()
    ck.turn_done(1, lambda: {"n": 1})
    assert time.monotonic() - started >= 0.3
    assert lines(tmp_path) == [{"n": 1}]  # whole when turn_done returns
    ck.close()


def test_a_graceful_stop_saves_at_once_in_order(tmp_path: Path, workspace: Path) -> None:
    drain = threading.Event()
    ck = checkpoint(tmp_path, SlowFiles(workspace, delay=0.2), drain)
    ck.before_tools()
    ck.turn_done(1, lambda: {"n": 1})
    drain.set()
    assert ck.turn_done(2, lambda: {"n": 2}) is True  # the run is stopping: end the episode now
    assert lines(tmp_path) == [{"n": 1}, {"n": 2}]  # both saved, in order, before it returned
    ck.close()


def test_a_failed_save_ends_the_attempt_s_checkpoints_and_keeps_the_last_whole_one(
    tmp_path: Path, workspace: Path
) -> None:
    """A save that fails (a full disk, a sandbox that refused) is not the episode's failure, and
    not a restore's: the episode goes on, its checkpoints end there, the last whole one stays."""
    files = SlowFiles(workspace, delay=0.05)
    ck = checkpoint(tmp_path, files)
    ck.before_tools()
    ck.turn_done(1, lambda: {"n": 1})
    ck.before_tools()
    files.fail = True
    log = tmp_path / "harness.log"
    with agent_logs_to(log, ["harness.resume"]):  # as a run routes it
        ck.turn_done(2, lambda: {"n": 2})
        ck.before_tools()  # nothing raised into the runner
    assert "checkpoint of turn 2 failed" in log.read_text() and "No space left" in log.read_text()
    files.fail = False
    ck.turn_done(3, lambda: {"n": 3})
    ck.before_tools()
    ck.close()
    assert ck.failed is not None and "turn 2" in ck.failed and "No space left" in ck.failed
    assert lines(tmp_path) == [{"n": 1}]
    marker, _, _ = load(tmp_path / "ep", "openhands-codeact")  # type: ignore[misc]
    assert marker.turn == 1
