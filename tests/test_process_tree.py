"""A test script's whole process tree ends with its verification: what it leaves running with
``setsid`` (a new session, which killing the script's session does not reach) included, in the
local runtime and in containers. Real `harness eval` runs, the replay server as the model."""

import random
import time
from pathlib import Path

import psutil
import pytest

from tests.test_eval_replay import FINISH, make_task

pytestmark = pytest.mark.timeout(600)


def _tag() -> str:
    return str(random.randrange(10**8, 10**9))  # a sleep's length no other process on the machine uses


def _running(tag: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["status"] != psutil.STATUS_ZOMBIE and tag in " ".join(p.info["cmdline"] or []):
            found.append(p)
    return found


def _left(tag: str) -> list[str]:
    """What of the test script is still running, a few seconds allowed for it to end; killed."""
    deadline = time.monotonic() + 3
    while (found := _running(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for p in found:
        p.kill()
    return [" ".join(p.info["cmdline"] or []) for p in found]


def _daemons(tag: str) -> str:
    """A test script that passes and leaves daemons behind: one ``setsid`` child, and one that
    double-forks out of a new session (its parent gone at once, as a daemon does)."""
    return (
        "#!/usr/bin/env bash\n"
        f"setsid sleep {tag}1 &\n"
        f"setsid sh -c 'sleep {tag}2 & exit 0' &\n"
        f"nohup setsid sleep {tag}3 >/dev/null 2>&1 &\n"
        "sleep 0.3\nexit 0\n"
    )


@pytest.mark.slow
def test_a_test_script_s_setsid_children_end_with_verification_locally(tmp_path: Path) -> None:
    """Before: killing the script's session left all three running (on the local runtime)."""
    from tests.test_eval_replay import evaluate, latest

    tag, slow = _tag(), _tag()
    suite = tmp_path / "suite"
    make_task(suite, "daemons", _daemons(tag))
    # The same, cut at its time limit: the reaper is asked to end the tree, not just killed.
    make_task(
        suite,
        "daemons-timeout",
        f"#!/usr/bin/env bash\nsetsid sleep {slow}1 &\nsleep 600\n",
        "[limits]\nverify_timeout_s = 2\n",
    )
    evaluate([FINISH, FINISH], tmp_path / "run", tasks=str(suite))
    recs = latest(tmp_path / "run")
    assert (recs["daemons"]["status"], recs["daemons"]["reward"]) == ("resolved", 1.0)
    assert (recs["daemons-timeout"]["status"], recs["daemons-timeout"]["reward"]) == ("unresolved", 0.0)
    assert _left(tag) == [] and _left(slow) == []


@pytest.mark.slow
def test_a_test_script_s_setsid_children_end_with_verification_in_a_container(tmp_path: Path) -> None:
    """The container's removal after verification ends them: this one held before the reaper too
    (it guards that every verification path removes its container)."""
    from harness.runtime.engine import docker_client
    from harness.runtime.images import ensure_sandbox_image
    from tests.test_runtime_container import containers_of, evaluate

    ensure_sandbox_image(docker_client())
    tag = _tag()
    suite = tmp_path / "suite"
    make_task(suite, "daemons", _daemons(tag))
    recs, _ = evaluate([FINISH], tmp_path / "run", tasks=str(suite))
    assert (recs["daemons"]["status"], recs["daemons"]["reward"]) == ("resolved", 1.0)
    assert _left(tag) == []
    assert containers_of(docker_client(), tmp_path / "run") == []
