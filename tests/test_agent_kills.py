"""What the agent's own commands do to its sandbox is the model's outcome, never the
infrastructure's: real `harness eval` runs in containers on the real engine, the replay server as
the scripted model.

In the sandbox image the agent runs as ``agent`` and its tool server's supervisor as root: a
`pkill -9 python` or `kill -9 -1` kills only the agent's shell, which is replaced, and the episode
goes on. In a task image without that user the agent is root and can kill everything: the episode
then ends as ``error``, scored 0, with a reason that says so.
"""

import json
import re
import time
from pathlib import Path

import pytest

from tests.test_runtime_container import (
    FINISH,
    SMOKE,
    containers_of,
    evaluate,
    image_task,
    observations,
    terminal,
)

pytestmark = pytest.mark.timeout(600)

HELLO = str(Path(__file__).parent.parent / "tasks" / "smoke" / "hello-file")
KILLED = "killed this shell's process (signal 9: SIGKILL)"


@pytest.fixture(scope="module")
def client():  # type: ignore[no-untyped-def]
    from harness.runtime.engine import docker_client
    from harness.runtime.images import ensure_sandbox_image

    c = docker_client()
    ensure_sandbox_image(c)
    return c


@pytest.mark.slow
@pytest.mark.parametrize("command", ["pkill -9 python", "kill -9 -1"])
def test_killing_everything_it_can_costs_the_agent_its_shell_not_its_episode(
    client, tmp_path: Path, command: str
) -> None:  # type: ignore[no-untyped-def]
    """Before the supervisor (a tool server run as the agent's user), both made the episode an
    unscored infra_error, on every rerun too."""
    run = tmp_path / "run"
    script = [terminal(f"export MARK=1; cd /tmp; {command}; echo survived"), terminal("pwd; echo mark=$MARK")]
    recs, requests = evaluate([*script, *SMOKE["hello-file"]], run, tasks=HELLO)
    rec = recs["hello-file"]
    assert (rec["status"], rec["reward"], rec["verified"], rec["error"]) == ("resolved", 1.0, True, None), rec
    assert len(requests) == 4  # one episode, no retry
    obs = observations(run, "hello-file")
    assert KILLED in obs[0] and "A new shell was started in /workspace" in obs[0], obs[0]
    assert "survived" not in obs[0]
    # The new shell starts afresh: the old one's directory and variables are gone.
    assert "/workspace" in obs[1] and "mark=\n" in obs[1].replace("\r", ""), obs[1]
    assert containers_of(client, run) == []


@pytest.mark.slow
def test_an_agent_that_kills_every_new_shell_ends_its_episode_as_its_own_outcome(
    client, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run"
    loop = "nohup sh -c 'while :; do pkill -9 -f tool[s]erver; sleep 0.05; done' >/dev/null 2>&1 &"
    script = [terminal(loop), terminal("sleep 1; ls"), terminal("ls"), terminal("ls"), FINISH]
    t0 = time.monotonic()
    recs, _ = evaluate(script, run, tasks=HELLO)
    assert time.monotonic() - t0 < 300
    rec = recs["hello-file"]
    assert (rec["status"], rec["reward"], rec["verified"]) == ("error", 0.0, True), rec
    assert rec["error"]["type"] == "SandboxDestroyed", rec
    assert "the agent's commands destroyed its sandbox" in rec["error"]["message"]
    assert containers_of(client, run) == []


@pytest.mark.slow
@pytest.mark.parametrize("command", ["pkill -9 python", "kill -9 -1"])
def test_a_root_agent_that_kills_its_tool_server_is_scored_as_the_model_s_outcome(
    client, tmp_path: Path, command: str
) -> None:  # type: ignore[no-untyped-def]
    """A task image without the user ``agent``: the agent is root and its kill reaches the tool
    server too. Before: SandboxLost, infra_error, unscored, run again by every rerun."""
    from harness.runtime.images import sandbox_image_ref

    suite = tmp_path / "suite"
    image_task(
        suite,
        "as-root",
        f"FROM {sandbox_image_ref()}\nRUN userdel agent\nWORKDIR /app\n",
        "#!/usr/bin/env bash\ntest -f /app/done\n",
        "Create /app/done.",
    )
    run = tmp_path / "run"
    # the container's process 1 is its sleep, out of the kill's reach: a sleep forked by sh was
    # killed too, the container stopped, and under load that read as the engine's loss (retried)
    script = [terminal("cat /proc/1/comm"), terminal(f"id -u; {command}"), terminal("touch done"), FINISH]
    recs, requests = evaluate(script, run, tasks=str(suite))
    rec = recs["as-root"]
    assert (rec["status"], rec["reward"], rec["verified"]) == ("error", 0.0, True), rec
    assert rec["error"]["type"] == "SandboxDestroyed", rec
    assert "the agent's commands killed the tool server" in rec["error"]["message"]
    assert "model's outcome" in rec["error"]["message"]
    assert rec["retried"] == [] and len(requests) == 2  # not retried
    assert re.search(r"^(\x1b\[\?2004l)?sleep\r?$", observations(run, "as-root")[0], re.M), observations(
        run, "as-root"
    )
    lines = [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]
    assert [r["status"] for r in lines] == ["error"]
    # A rerun keeps it: it is an outcome, not a failure to run again.
    again, requests = evaluate([FINISH], run, tasks=str(suite))
    assert again["as-root"]["status"] == "error" and requests == []
    assert containers_of(client, run) == []


def test_a_local_agent_s_kills_reach_only_its_own_shell(tmp_path: Path) -> None:
    """The local runtime: the agent's shell runs in a PID namespace of its own (procs.py), so
    `pkill -9 python` and `kill -9 -1` there reach neither this harness (the test process runs
    the eval) nor any other process of the user's. The kills are sent only from inside such a
    namespace (the shell is its process 1): an unconfined shell would end every process of this
    user, so on the old code this test fails on that check instead of killing the machine."""
    import subprocess

    from harness.runtime.procs import own_pid_namespace
    from tests.test_eval_replay import evaluate as evaluate_local

    assert own_pid_namespace(), "this machine allows no PID namespace (unshare, user namespaces)"
    bystander = subprocess.Popen(["sleep", "600"])  # a process of this user, outside the episode
    try:
        run = tmp_path / "run"
        guarded = 'echo "pid=$$"; if [ "$$" = 1 ]; then pkill -9 python; kill -9 -1; echo survived; fi'
        records = evaluate_local([terminal(guarded), *SMOKE["hello-file"]], run, tasks=HELLO)
        assert bystander.poll() is None  # untouched
    finally:
        bystander.kill()
        bystander.wait()
    obs = observations(run, "hello-file")
    assert "pid=1\n" in obs[0].replace("\r", "") and "survived" in obs[0], obs[0]
    assert [(r["status"], r["reward"]) for r in records][-1] == ("resolved", 1.0)
