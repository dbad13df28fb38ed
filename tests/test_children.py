"""harness/children.py: a child started by any thread of the harness dies with the harness, and
only then (real processes: a harness-like parent, its children, SIGKILL)."""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil

from tests.helpers.waiting import wait_for

REPO = Path(__file__).resolve().parent.parent

# The parent: one child from a worker thread that then ends (the OS thread gone, not only joined),
# one from the main thread. The first blocks SIGTERM, so a signal sent when its thread ended stays
# pending where /proc shows it.
PARENT = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    from harness.children import popen_tied

    blocker = [sys.executable, "-c",
        "import signal, time; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM}); "
        "time.sleep(600)"]
    started, tids = [], []

    def worker():
        tids.append(threading.get_native_id())
        started.append(popen_tied(blocker, start_new_session=True))

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    deadline = time.monotonic() + 60
    while os.path.exists(f"/proc/self/task/{tids[0]}") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not os.path.exists(f"/proc/self/task/{tids[0]}"), "the worker thread did not exit"
    main = popen_tied(["sleep", "600"], start_new_session=True)
    with open(sys.argv[1] + ".tmp", "w") as out:
        out.write(f"{started[0].pid} {main.pid}")
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(600)
    """
)


_TERM = 1 << (signal.SIGTERM - 1)


def _status(pid: int, *fields: str) -> int:
    """Signal masks of process ``pid`` from /proc (SigPnd, ShdPnd, SigBlk), or-ed together."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    found = dict(line.split(":", 1) for line in lines if ":" in line)
    mask = 0
    for field in fields:
        mask |= int(found[field], 16)
    return mask


def _pending(pid: int) -> int:
    """The signals pending for process ``pid`` (its thread's and its process's)."""
    return _status(pid, "SigPnd", "ShdPnd")


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_child_of_a_worker_thread_outlives_the_thread_and_dies_with_the_process(tmp_path: Path) -> None:
    """A server restarted by an episode thread was signalled when that thread ended (the tie is to
    the forking thread), or, with no tie, outlived a killed harness for good (CI: one vLLM left
    for the rest of the suite, 14 tests refused)."""
    pids = tmp_path / "pids"
    log = (tmp_path / "parent.log").open("w")
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(pids)], cwd=REPO, stdout=log, stderr=log, start_new_session=True
    )
    children: list[int] = []
    try:
        wait_for(
            lambda: pids.exists() or parent.poll() is not None, timeout=120, what="the parent's children"
        )
        assert pids.exists(), (tmp_path / "parent.log").read_text()
        children = [int(x) for x in pids.read_text().split()]
        wait_for(lambda: _status(children[0], "SigBlk") & _TERM, timeout=60, what="SIGTERM blocked there")
        # its thread has exited: no SIGTERM was sent to the first child on that account
        assert not _pending(children[0]) & _TERM
        assert not any(_gone(pid) for pid in children)

        parent.kill()  # no cleanup code runs
        parent.wait(timeout=30)
        wait_for(
            lambda: _gone(children[0]) or _pending(children[0]) & _TERM,
            timeout=30,
            what="SIGTERM for the worker thread's child",
        )
        wait_for(lambda: _gone(children[1]), timeout=30, what="the main thread's child to die")
    finally:
        parent.kill()
        log.close()
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
