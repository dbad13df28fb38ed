"""A run's cleanup of containers that killed runs left behind never touches a live run's: real
containers on the real engine, labelled as harness processes label them, and the cleanup that
every `harness eval` and `harness tasks verify` runs at start (ContainerRuntime.prepare)."""

import contextlib
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from harness.episodes.openhands.container_tools import ContainerTools
from harness.runtime.container import (
    IPC_ROOT,
    LABEL,
    LABEL_RUN,
    WARM,
    ContainerRuntime,
    container_name,
    run_label,
)
from harness.runtime.owner import LABEL_HOST, LABEL_PID, LABEL_STARTED, owner_labels, started_at
from harness.tasks import load_tasks
from tests.test_runtime_container import containers_of

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def client():  # type: ignore[no-untyped-def]
    from harness.runtime.engine import docker_client
    from harness.runtime.images import ensure_sandbox_image

    c = docker_client()
    ensure_sandbox_image(c)
    return c


def _container(client, run: Path, name: str, owner: dict[str, str]):  # type: ignore[no-untyped-def]
    from harness.runtime.images import sandbox_image_ref

    c = client.containers.create(
        sandbox_image_ref(),
        command=["sleep", "infinity"],
        name=f"harness-{run_label(run)}-{name}",
        labels={LABEL: name, LABEL_RUN: run_label(run), **owner},
        network_mode="none",
    )
    c.start()
    return c


def _state(client, name: str) -> str:  # type: ignore[no-untyped-def]
    from docker.errors import APIError, NotFound

    try:
        return str(client.containers.get(name).status)
    except NotFound:
        return "removed"
    except APIError as exc:  # podman 4.3, a name still listed as its removal ends
        if "no such container" in str(exc):
            return "removed"
        raise


@pytest.mark.slow
def test_cleanup_removes_only_what_ended_owners_left_and_never_a_live_owner_s(client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Before, the owner was a pid alone: a live owner in this process or in another PID
    namespace lost its containers, a dead owner whose pid was reused kept its own forever, and
    another run's stopped containers waiting for their verification were removed."""
    mine, other = tmp_path / "mine", tmp_path / "other"
    me = owner_labels()
    live = subprocess.Popen(["sleep", "600"])  # another live process, as a second harness would be
    done = subprocess.Popen(["true"])
    done.wait()  # an owner that has ended
    started = started_at(live.pid)
    assert started is not None
    alive_other = {**me, LABEL_PID: str(live.pid), LABEL_STARTED: started}
    reused = {**me, LABEL_PID: str(live.pid), LABEL_STARTED: "t1"}  # its pid now another process's
    dead = {**me, LABEL_PID: str(done.pid)}
    elsewhere = {**dead, LABEL_HOST: "another-host"}
    made = {
        "this-process": (mine, me),  # e.g. a second eval in this very process
        "live-owner": (other, alive_other),
        "elsewhere": (other, elsewhere),  # a harness in another container or machine, same engine
        "pid-reused": (mine, reused),
        "dead-mine": (mine, dead),
        "dead-mine-kept": (mine, dead),  # waits for its verification in this run
        "dead-other": (other, dead),  # another stopped run's, waiting for that run's verification
        f"{WARM}-dead-other": (other, dead),  # started ahead for a run that is gone: no use to anyone
    }
    names = {key: _container(client, run, key, owner).name for key, (run, owner) in made.items()}
    try:
        runtime = ContainerRuntime(client)
        # The kept one is found by the name its episode key gives: named so.
        client.containers.get(names["dead-mine-kept"]).rename(
            container_name(run_label(mine), "scripted/t/seed1")
        )
        names["dead-mine-kept"] = container_name(run_label(mine), "scripted/t/seed1")
        # Tool-server directories without a container: another run's that is about to start one
        # (made a moment ago), and one this run left.
        pending = IPC_ROOT / f"harness-{run_label(other)}-pending"
        left = IPC_ROOT / f"harness-{run_label(mine)}-left"
        for d in (pending, left):
            d.mkdir(parents=True)
        task = next(t for t in load_tasks("smoke") if t.id == "fix-add")
        runtime.prepare(mine, [task], keep=frozenset({"scripted/t/seed1"}))
        assert pending.is_dir() and not left.exists()
        states = {key: _state(client, name) for key, name in names.items()}
        assert states == {
            "this-process": "running",
            "live-owner": "running",
            "elsewhere": "running",
            "pid-reused": "removed",
            "dead-mine": "removed",
            "dead-mine-kept": "running",
            "dead-other": "exited",  # stopped: its files stay for its run
            f"{WARM}-dead-other": "removed",
        }, states
    finally:
        live.kill()
        live.wait()
        shutil.rmtree(IPC_ROOT / f"harness-{run_label(other)}-pending", ignore_errors=True)
        for name in names.values():
            with contextlib.suppress(Exception):  # gone already
                client.containers.get(name).remove(force=True)


@pytest.mark.slow
def test_a_second_run_in_this_process_leaves_the_first_run_s_episode_running(client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Two runs in one process (two evals in threads, a library user): the second's start must
    not take the first's sandbox away mid-episode. Before, a container labelled with this
    process's own pid was taken for a dead earlier process's and removed."""
    task = next(t for t in load_tasks("smoke") if t.id == "fix-add")
    first = ContainerRuntime(client)
    first.prepare(tmp_path / "first", [task])
    sandbox = first.open(task, tmp_path / "ep", "scripted/fix-add/seed1")
    tools = ContainerTools(sandbox, "subprocess")
    try:
        tools.start()
        ContainerRuntime(client).prepare(tmp_path / "second", [task])
        reply = tools.call("terminal", {"command": "ls"})
        assert "calc.py" in str(reply), reply
        time.sleep(0.1)
    finally:
        tools.close()
        sandbox.finish()
        sandbox.close()
    assert containers_of(client, tmp_path / "first") == []
