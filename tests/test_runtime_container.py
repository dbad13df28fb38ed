"""Episodes in containers on a real engine: real OpenHands episodes driven by the replay server,
the agent's tools executing inside one container per episode, tests verified inside it.

The engine is the one scripts/bootstrap --tests sets up (podman's API service on this machine);
a missing engine fails these tests, it never skips them.
"""

import http.server
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from harness.episodes.openhands.container_tools import ContainerTools, ToolServerPrep
from harness.evaluate import EvalConfig, run_eval
from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
from harness.results.store import RunStore
from harness.rollout import episode_key
from harness.runtime.base import SandboxConfig
from harness.runtime.container import IPC_ROOT, LABEL_RUN, container_name, run_label
from tests.conftest import REPO, run_harness
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.timeout(600)


def call(name: str, **args: object) -> ScriptedCall:
    return ScriptedCall(name=name, arguments=args)


def terminal(command: str, content: str = "Running.") -> ScriptedResponse:
    return ScriptedResponse(content=content, tool_calls=[call("terminal", command=command)])


FINISH = ScriptedResponse(tool_calls=[call("finish", message="done")])
SMOKE = {  # load order: count-lines, fix-add, hello-file
    "count-lines": [terminal("wc -l < data.txt > count.txt"), FINISH],
    "fix-add": [terminal("sed -i 's/a - b/a + b/' calc.py"), FINISH],
    "hello-file": [terminal("echo 'Hello, world!' > hello.txt"), FINISH],
}


@pytest.fixture(scope="module")
def client():  # type: ignore[no-untyped-def]
    from harness.runtime.engine import docker_client
    from harness.runtime.images import ensure_sandbox_image

    c = docker_client()
    ensure_sandbox_image(c)
    return c


def containers_of(client, run: Path) -> list:  # type: ignore[no-untyped-def]
    return client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={run_label(run)}"})


def evaluate(
    script: list[ScriptedResponse],
    run: Path,
    tasks: str = "smoke",
    beside: Callable[[ReplayServer], None] | None = None,
    **kw: object,
) -> tuple[dict[str, dict], list[dict]]:
    """The run's records and the server's requests; ``beside`` runs on a thread meanwhile."""
    # One script played in arrival order: episodes one at a time, whatever --concurrency auto
    # would pick on this machine's cores.
    kw.setdefault("concurrency", 1)
    with ReplayServer(ReplayScript(model="scripted", responses=script)) as server:
        thread = threading.Thread(target=beside, args=(server,), daemon=True) if beside else None
        if thread is not None:
            thread.start()
        run_eval(
            EvalConfig(
                runtime="docker",
                models=("scripted",),
                tasks=tasks,
                base_url=server.base_url,
                run_dir=run,
                **kw,  # type: ignore[arg-type]
            )
        )
        requests = list(server.requests)
    if thread is not None:
        thread.join()
    return {k[1]: r.model_dump() for k, r in RunStore(run).records().items()}, requests


def observations(run: Path, task: str) -> list[str]:
    lines = (run / "trajectories" / "scripted" / task / "seed1.jsonl").read_text().splitlines()
    return [json.loads(line).get("observation") or "" for line in lines]


def container_events(client, run: Path, since: int) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """(action, container name) of the run's containers since ``since``, as the engine logged them."""
    events = client.events(
        since=since, until=int(time.time()) + 1, decode=True,
        filters={"type": "container", "label": f"{LABEL_RUN}={run_label(run)}"},
    )  # fmt: skip
    return [(e.get("Action") or e.get("status"), e["Actor"]["Attributes"]["name"]) for e in events]


@pytest.mark.slow
def test_smoke_suite_resolves_in_containers_with_the_scaffold_s_tools(client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run"
    since = int(time.time()) - 1
    recs, requests = evaluate([*SMOKE["count-lines"], *SMOKE["fix-add"], *SMOKE["hello-file"]], run)
    # Each episode's container was started ahead of it (while the one before ran) and renamed
    # the episode's when taken: as many containers as episodes, none wasted. The engine logs its
    # events after it answers: read once every container's removal is in the log.
    events: list[tuple[str, str]] = []

    def all_removed() -> bool:
        events[:] = container_events(client, run, since)
        removed = sum(1 for action, _ in events if action in ("remove", "destroy"))
        return removed >= 2 * len(SMOKE)  # each episode's container and its verifier's

    wait_for(all_removed, timeout=60, what="the removal of every container in the engine's events")
    created = [name for action, name in events if action == "create" and "-verify-" not in name]
    renamed = [name for action, name in events if action == "rename"]
    assert len(created) == len(SMOKE) and all("-warm-" in name for name in created), events
    # Each episode verified in a fresh container of its own (fresh.py), none wasted either.
    verifiers = [name for action, name in events if action == "create" and "-verify-" in name]
    assert len(verifiers) == len(SMOKE), events
    assert sorted(renamed) == sorted(
        container_name(run_label(run), episode_key("scripted", t, 1)) for t in SMOKE
    )
    assert {t: (r["status"], r["reward"], r["verified"]) for t, r in recs.items()} == {
        t: ("resolved", 1.0, True) for t in SMOKE
    }
    # The final files came back to the run directory; the containers are gone after verification.
    assert (
        run / "episodes" / "scripted" / "hello-file" / "seed1" / "workspace" / "hello.txt"
    ).read_text() == ("Hello, world!\n")
    assert containers_of(client, run) == []
    assert json.loads((run / "run.json").read_text())["runtime"] == "docker"
    # The tools the model received are the scaffold's snapshot (the workspace named as the container's).
    snapshot = json.loads((REPO / "scaffolds" / "openhands-codeact" / "tools.schema.json").read_text())[
        "tools"
    ]
    sent = json.loads(json.dumps(requests[0]["tools"]).replace("/workspace", "<workspace>"))
    assert sorted(sent, key=lambda t: t["function"]["name"]) == sorted(
        snapshot, key=lambda t: t["function"]["name"]
    )
    assert str(tmp_path) not in json.dumps(requests)  # no host path reaches the model


@pytest.mark.slow
def test_a_scripted_loop_is_stopped_at_the_right_turn_in_a_container(client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    script = [terminal("cat calc.py", content=f"Look again, attempt {i}.") for i in range(10)]
    recs, _ = evaluate(script, tmp_path / "run", tasks=str(REPO / "tasks" / "smoke" / "fix-add"))
    rec = recs["fix-add"]
    assert rec["status"] == "loop_stopped" and rec["reward"] == 0.0
    assert rec["loop"]["kind"] == "repeat_call" and rec["loop"]["start_turn"] == 0
    assert rec["loop"]["detected_at"] == 3 and rec["turns"] == 4


class _Token(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Token.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"TOKEN-4711")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def token_server() -> Iterator[int]:
    """A service on this machine's loopback that no container may reach."""
    _Token.hits = []
    with socketserver.TCPServer(("127.0.0.1", 0), _Token) as srv:
        thread = threading.Thread(target=srv.serve_forever, daemon=True)
        thread.start()
        yield srv.server_address[1]
        srv.shutdown()


@pytest.mark.slow
def test_the_agent_sees_no_host_file_no_network_and_changes_nothing_on_the_host(
    client, tmp_path: Path, token_server: int
) -> None:  # type: ignore[no-untyped-def]
    secret = tmp_path / "host-secret.txt"
    secret.write_text("SECRET-on-the-host")
    marker = Path("/tmp") / f"harness-escape-{os.getpid()}"
    fetch = (
        'python3 -c "import urllib.request as u; '
        f"print(u.urlopen('http://127.0.0.1:{token_server}/', timeout=5).read())\""
    )
    script = [
        terminal(f"cat {secret}"),
        terminal(fetch),
        terminal(f"echo escaped > {marker}; id -u; pwd"),
        terminal("cat /etc/hostname; ls /root"),
        FINISH,
    ]
    recs, _ = evaluate(script, tmp_path / "run", tasks=str(REPO / "tasks" / "smoke" / "hello-file"))
    assert recs["hello-file"]["status"] == "unresolved"
    obs = observations(tmp_path / "run", "hello-file")
    assert "No such file or directory" in obs[0] and "SECRET" not in "".join(obs)
    assert "TOKEN-4711" not in obs[1] and ("Network is unreachable" in obs[1] or "Errno" in obs[1]), obs[1]
    assert _Token.hits == []  # nothing reached the host's service
    # The agent is not root, works in the container's /workspace, and the host's /tmp is untouched.
    assert "1000" in obs[2] and "/workspace" in obs[2] and not marker.exists()
    assert "Permission denied" in obs[3]


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        (":(){ :|:& };:", "limit of 64 processes"),
        ("python3 -c 'x = b\"x\" * (3 * 1024 ** 3)'", "memory limit (0.5 GiB)"),
        # Up to the limit and back at once: the call ends with a few processes running, and the
        # limit's refused forks (pids.events) end the episode all the same, as an OOM kill does.
        (
            "python3 -c \"exec('import subprocess as s, sys\\nps=[]\\ntry:\\n while 1: "
            "ps.append(s.Popen(sys.argv[1:]))\\nexcept OSError: pass\\nfor p in ps: p.kill(); p.wait()')\" "
            "sleep 30",
            "limit of 64 processes: it refused",
        ),
    ],
    ids=["fork-bomb", "memory-hog", "burst"],
)
@pytest.mark.slow
def test_a_fork_bomb_or_memory_hog_ends_its_episode_with_the_reason_and_the_run_goes_on(
    client, tmp_path: Path, command: str, needle: str
) -> None:  # type: ignore[no-untyped-def]
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("a-hostile", "b-hello"):
        (suite / name).symlink_to(REPO / "tasks" / "smoke" / "hello-file", target_is_directory=True)
    # One script for both episodes, in order. The hostile one may take a second response before
    # its limit shows (the bomb's first command returns to the prompt while it is still spreading):
    # the well-behaved one then still finds its command, which it may run twice, harmlessly.
    hello, finish = SMOKE["hello-file"]
    script = [terminal(command), hello, hello, finish]
    run = tmp_path / "run"
    t0 = time.monotonic()
    recs, _ = evaluate(
        script,
        run,
        tasks=str(suite),
        sandbox=SandboxConfig(memory_gib=0.5, pids=64, cpus=0.5),
        # The script is shared in arrival order: with --concurrency auto, 0.5-CPU sandboxes let
        # 4 run at once and the bomb could go to either episode.
        concurrency=1,
    )
    assert time.monotonic() - t0 < 240
    bad = recs["a-hostile"]
    assert bad["status"] == "error" and bad["error"]["type"] == "SandboxLimit", bad
    assert needle in bad["error"]["message"]
    assert recs["b-hello"]["status"] == "resolved"
    assert containers_of(client, run) == []


@pytest.mark.slow
def test_a_container_killed_mid_episode_is_retried_in_a_fresh_one_and_the_run_goes_on(
    client, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run"
    script = [
        terminal("ls"),
        ScriptedResponse(delay=4.0, tool_calls=[call("terminal", command="ls -la")]),
        *SMOKE["count-lines"],  # the retry, in a fresh container: the container gone is no score
        *SMOKE["fix-add"],
        *SMOKE["hello-file"],
    ]

    # count-lines' own container (the next episodes' are already starting beside it)
    name = container_name(run_label(run), episode_key("scripted", "count-lines", 1))

    def killer(server: ReplayServer) -> None:
        # Killed while its second call (4 s scripted delay) is in the server: the request is logged
        # on arrival. (A sleep after the first call hoped for that and missed under load: fresh14's
        # kill shifted the in-order script, and hello-file ran out of its responses.)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = [c for c in containers_of(client, run) if c.name == name]
            if found and len(server.requests) >= 2:
                found[0].kill()
                return
            time.sleep(0.05)

    recs, requests = evaluate(script, run, beside=killer)
    assert len(requests) == len(script)  # the killed attempt's two calls, then every episode's own
    assert {k: r["status"] for k, r in recs.items()} == {t: "resolved" for t in SMOKE}
    assert recs["count-lines"]["turns"] < 4  # a fresh attempt: the killed one's turns are not in it
    rollouts = [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]
    assert sorted(r["task_id"] for r in rollouts if r["status"] != "resolved") == sorted(SMOKE)
    assert containers_of(client, run) == []


@pytest.mark.slow
def test_sigkill_mid_run_then_rerun_removes_orphans_and_resumes_without_duplicates(
    client, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run"

    def script(delay: float) -> ReplayScript:
        turn = ScriptedResponse(delay=delay, content="Thinking.", tool_calls=[call("terminal", command="ls")])
        return ReplayScript(model="scripted", responses=[turn] * 3 + [FINISH], when_exhausted="cycle")

    # The killed run's calls are slow (it is killed mid-episode); the rerun's, on the same port, are
    # not: its 3 episodes one at a time took 27 s of these delays, and prove nothing more for them.
    script_file = tmp_path / "script.json"
    script_file.write_text(script(delay=3.0).model_dump_json())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    replay = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "replay", str(script_file), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        args = [
            "eval",
            "--model",
            "scripted",
            "--base-url",
            url,
            "--runtime",
            "docker",
            "--run-dir",
            str(run),
        ]
        env = {**os.environ}
        proc = subprocess.Popen([sys.executable, "-m", "harness.cli", *args], env=env, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not containers_of(client, run):
            time.sleep(0.2)
        time.sleep(2.0)
        assert containers_of(client, run), "no episode container started"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert containers_of(client, run)  # the killed run left its container behind
    finally:
        replay.terminate()
        replay.wait()
    with ReplayServer(script(delay=0.0), port=port):  # the same URL for the same command
        done = run_harness(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    assert containers_of(client, run) == []
    lines = [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]
    firsts = sorted(r["task_id"] for r in lines if not r["verified"] or r["status"] == "error")
    assert firsts == sorted(SMOKE)  # exactly one rollout record per task
    assert not any(p.name.startswith(f"harness-{run_label(run)}") for p in IPC_ROOT.glob("*"))


@pytest.mark.slow
def test_the_same_episode_gets_the_same_reward_under_local_and_docker(client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    script = [*SMOKE["count-lines"], terminal("echo 'Hello' > hello.txt"), FINISH, *SMOKE["hello-file"]]
    rewards = {}
    for runtime in ("local", "docker"):
        with ReplayServer(ReplayScript(model="scripted", responses=script)) as server:
            run_eval(
                EvalConfig(
                    runtime=runtime,  # type: ignore[arg-type]
                    models=("scripted",),
                    tasks="smoke",
                    base_url=server.base_url,
                    run_dir=tmp_path / runtime,
                    concurrency=1,  # one in-order script: one episode at a time, whatever auto picks
                )
            )
        rewards[runtime] = {k[1]: r.reward for k, r in RunStore(tmp_path / runtime).records().items()}
    assert rewards["local"] == rewards["docker"] == {"count-lines": 1.0, "fix-add": 0.0, "hello-file": 1.0}


# Terminal and file-editor actions whose observations depend only on the workspace's files.
TOOL_ACTIONS: list[tuple[str, dict[str, object]]] = [
    ("terminal", {"command": "ls -la | wc -l; cat calc.py"}),
    ("terminal", {"command": "echo hi && false"}),
    ("file_editor", {"command": "view", "path": "{W}/calc.py"}),
    (
        "file_editor",
        {"command": "str_replace", "path": "{W}/calc.py", "old_str": "a - b", "new_str": "a + b"},
    ),
    ("file_editor", {"command": "str_replace", "path": "{W}/calc.py", "old_str": "nope", "new_str": "x"}),
    ("file_editor", {"command": "create", "path": "{W}/new.txt", "file_text": "one\ntwo\n"}),
    ("file_editor", {"command": "view", "path": "{W}"}),
    ("file_editor", {"command": "undo_edit", "path": "{W}/calc.py"}),
    ("file_editor", {"command": "view", "path": "relative.txt"}),
    ("terminal", {"command": "cat new.txt calc.py; pwd"}),
]


def _comparable(reply: dict, workdir: str) -> dict:  # type: ignore[type-arg]
    """An observation with the working directory named <W> and the machine's own facts (user,
    host, interpreter) left out of its metadata."""
    text = json.dumps(reply).replace(workdir, "<W>")
    out = json.loads(text)
    for key in ("username", "hostname", "py_interpreter_path"):
        (out.get("metadata") or {}).pop(key, None)
    return out  # type: ignore[no-any-return]


@pytest.mark.slow
def test_the_container_s_tools_answer_exactly_as_the_sdk_s_executors_in_this_process(
    client, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The tool server imports the SDK its own way (deferred pydantic builds, no GC meanwhile):
    what the agent reads must not change for it. ~10 s."""
    from openhands.tools.file_editor.definition import FileEditorAction
    from openhands.tools.file_editor.impl import FileEditorExecutor
    from openhands.tools.terminal.definition import TerminalAction

    from harness.episodes.openhands.ready_terminal import ReadyTerminalExecutor
    from harness.runtime.container import ContainerRuntime
    from harness.tasks import load_tasks, prepare_workspace

    (task,) = load_tasks(str(REPO / "tasks" / "smoke" / "fix-add"))
    runtime = ContainerRuntime(client)
    runtime.prepare(tmp_path / "run", [task])
    sandbox = runtime.open(task, tmp_path / "episode", "scripted/fix-add/1")
    tools = ContainerTools(sandbox, "subprocess")
    try:
        tools.start()
        inside = []
        for tool, action in TOOL_ACTIONS:
            reply = tools.call(tool, json.loads(json.dumps(action).replace("{W}", sandbox.workdir)))
            inside.append(_comparable(reply.get("observation") or reply, sandbox.workdir))
        tools.close()
        sandbox.finish()
    finally:
        tools.close()
        sandbox.close()
    workspace = prepare_workspace(task, tmp_path / "here")
    executors = {
        "terminal": ReadyTerminalExecutor(str(workspace)),  # what local episodes run
        "file_editor": FileEditorExecutor(workspace_root=str(workspace)),
    }
    actions = {"terminal": TerminalAction, "file_editor": FileEditorAction}
    here = []
    try:
        for tool, action in TOOL_ACTIONS:
            parsed = actions[tool].model_validate(
                json.loads(json.dumps(action).replace("{W}", str(workspace)))
            )
            try:
                here.append(_comparable(executors[tool](parsed).model_dump(mode="json"), str(workspace)))
            except ValueError as exc:  # as the tool server reports it
                here.append(_comparable({"value_error": str(exc)}, str(workspace)))
    finally:
        for executor in executors.values():
            executor.close()
    assert inside == here


def test_no_engine_answering_is_one_line_naming_docker_host(tmp_path: Path) -> None:
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/nothing.sock"}
    done = run_harness(
        "eval", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--runtime", "docker",
        "--run-dir", str(tmp_path / "run"), env=env,
    )  # fmt: skip
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "DOCKER_HOST" in lines[0] and "--runtime local" in lines[0], done.stderr


def image_task(root: Path, name: str, dockerfile: str, test_sh: str, instruction: str) -> Path:
    d = root / name
    (d / "environment").mkdir(parents=True)
    (d / "tests").mkdir()
    (d / "environment" / "Dockerfile").write_text(dockerfile)
    (d / "instruction.md").write_text(instruction)
    (d / "tests" / "test.sh").write_text(test_sh)
    return d


@pytest.mark.slow
def test_a_task_s_own_image_is_built_and_a_failing_build_errors_only_its_episodes(
    client, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from harness.runtime.images import sandbox_image_ref

    base = sandbox_image_ref()
    suite = tmp_path / "suite"
    image_task(
        suite,
        "a-broken",
        f"FROM {base}\nRUN echo building the broken one && exit 3\n",
        "#!/usr/bin/env bash\nexit 0\n",
        "Nothing to do.",
    )
    image_task(
        suite,
        "b-fix-app",
        f"FROM {base}\nWORKDIR /app\nENV GREETING=hi\n"
        "RUN printf 'def add(a, b):\\n    return a - b\\n' > /app/calc.py\n",
        '#!/usr/bin/env bash\ncd /app && [ "$GREETING" = hi ] && python3 -c "import calc; assert calc.add(2, 3) == 5"'
        " && echo 1 > /logs/verifier/reward.txt\n",
        "Fix add() in /app/calc.py.",
    )
    script = [terminal("sed -i 's/a - b/a + b/' calc.py && pwd && id -un"), FINISH]
    recs, requests = evaluate(script, tmp_path / "run", tasks=str(suite))
    broken = recs["a-broken"]
    assert broken["status"] == "error" and broken["error"]["type"] == "TaskImageError", broken
    assert (
        "image build failed" in broken["error"]["message"]
        and "building the broken one" in broken["error"]["message"]
    )
    assert recs["b-fix-app"]["status"] == "resolved" and recs["b-fix-app"]["reward"] == 1.0
    obs = observations(tmp_path / "run", "b-fix-app")
    assert "/app" in obs[0] and "agent" in obs[0]  # the image's WORKDIR, the unprivileged user
    assert "Fix add() in /app/calc.py." in json.dumps(requests[0])  # container paths stay as written
    assert containers_of(client, tmp_path / "run") == []


@pytest.mark.slow
def test_a_sandbox_started_ahead_that_died_while_it_waited_is_not_handed_out(client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from harness.runtime.container import ContainerRuntime
    from harness.tasks import load_tasks

    runtime = ContainerRuntime(client)
    task = next(t for t in load_tasks("smoke") if t.id == "fix-add")
    runtime.prepare(tmp_path / "run", [task])
    prep = ToolServerPrep("subprocess")
    runtime.warm_up([(task, prep), (task, prep)], 1)
    try:
        deadline = time.monotonic() + 60
        while not (warm := [c for c in containers_of(client, tmp_path / "run") if "-warm-" in c.name]):
            assert time.monotonic() < deadline, "no container was started ahead"
            time.sleep(0.05)
        time.sleep(0.5)  # started (its tool server launched), then killed before an episode takes it
        warm[0].kill()
        sandbox = runtime.open(task, tmp_path / "ep", "scripted/fix-add/1", prep=prep)
        tools = ContainerTools(sandbox, "subprocess")
        try:
            tools.start()
            reply = tools.call("terminal", {"command": "ls"})
            assert "calc.py" in json.dumps(reply), reply
            assert sandbox.container.name == container_name(run_label(tmp_path / "run"), "scripted/fix-add/1")
        finally:
            tools.close()
            sandbox.finish()
            sandbox.close()
    finally:
        runtime.cool_down()
    assert containers_of(client, tmp_path / "run") == []
