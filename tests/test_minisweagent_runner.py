"""mini-swe-agent as a scaffold runner: its real DefaultAgent against the replay server, its
commands run through a Sandbox (a local directory here), the smoke task verified afterwards."""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
import yaml

from harness.episodes.mini_swe_agent import TRAJECTORY, MiniSweAgentRunner, load_mini_swe_agent
from harness.episodes.mini_swe_agent._upstream import check_version
from harness.episodes.scaffold import load_scaffold
from harness.monitor import FormatCategory, LoopKind, ToolCall, validate_turn
from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
from harness.results.trajectories import read_trajectories
from harness.seam import EpisodeOutcome, EpisodeSpec, ExecResult, ServerFacts
from harness.tasks import Task, load_tasks, run_tests
from tests.conftest import REPO, run_harness


def upstream_bash_tool() -> dict[str, object]:
    check_version()  # mini-swe-agent imported quietly, with the harness's settings
    from minisweagent.models.utils.actions_toolcall import BASH_TOOL

    return dict(BASH_TOOL)


BLOCK = "```mswea_bash_command\n{}\n```"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
FIX = "sed -i 's/return a - b/return a + b/' calc.py"


def say(command: str, thought: str = "THOUGHT: next step.", **kw: object) -> ScriptedResponse:
    return ScriptedResponse(content=f"{thought}\n\n{BLOCK.format(command)}", **kw)  # type: ignore[arg-type]


# ---- a Sandbox over a local directory, and a ModelEndpoint over a replay server -------------------
class DirSandbox:
    """The seam's Sandbox verbs over a directory: ``bash -c`` in its own process group, killed
    whole at the timeout. ``broken`` makes every exec fail as a vanished container would."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.broken = False
        self.commands: list[str] = []
        self._running: set[int] = set()

    @property
    def workdir(self) -> str:
        return str(self.root)

    def exec(
        self,
        cmd: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        user: str | None = None,
    ) -> ExecResult:
        if self.broken:
            raise SandboxLost("the episode's container is gone")
        self.commands.append(cmd if isinstance(cmd, str) else " ".join(cmd))
        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        proc = subprocess.Popen(
            argv,
            cwd=cwd or self.workdir,
            env={**os.environ, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._running.add(proc.pid)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            return ExecResult(exit_code=None, output=out.decode("utf-8", "replace"), timed_out=True)
        finally:
            self._running.discard(proc.pid)
        return ExecResult(exit_code=proc.returncode, output=out.decode("utf-8", "replace"))

    def read(self, path: str) -> bytes:
        return (self.root / path).read_bytes()

    def write(self, path: str, data: bytes) -> None:
        (self.root / path).write_bytes(data)

    def copy_in(self, src: Path, dest: str) -> None:
        shutil.copytree(src, self.root / dest, symlinks=True, dirs_exist_ok=True)

    def copy_out(self, src: str, dest: Path) -> None:
        shutil.copytree(self.root / src, dest, symlinks=True, dirs_exist_ok=True)

    def close(self) -> None:
        """What still runs ends (a stopped run's driver closes the sandbox)."""
        for pid in list(self._running):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


class SandboxLost(Exception):
    """Named as the harness's own (harness/episodes/faults.py counts it as infrastructure)."""


class ReplayEndpoint:
    def __init__(self, server: ReplayServer, name: str = "replay") -> None:
        self.server = server
        self.name = name
        self.path = name

    @property
    def openai_url(self) -> str:
        return self.server.base_url

    @property
    def api_key(self) -> str:
        return str(self.server.api_key)

    def ensure_up(self) -> None:
        pass

    def healthy(self) -> bool:
        return True

    @property
    def server_id(self) -> str:
        return f"test-replay:{id(self.server)}"

    def release(self, *, now: bool = False) -> None:
        pass

    def facts(self) -> ServerFacts | None:
        return None


# ---- helpers -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fix_add() -> Task:
    return next(t for t in load_tasks("smoke") if t.id == "fix-add")


def episode(
    tmp_path: Path,
    task: Task,
    responses: list[ScriptedResponse],
    *,
    scaffold: str = "mini-swe-agent",
    pick: str = "in_order",
    when_exhausted: str = "error",
    runner: MiniSweAgentRunner | None = None,
    stop: threading.Event | None = None,
    broken: bool = False,
    **limits: object,
) -> tuple[EpisodeOutcome, DirSandbox, ReplayServer]:
    workspace = tmp_path / "workspace"
    shutil.copytree(task.workspace_dir, workspace)
    sandbox = DirSandbox(workspace)
    sandbox.broken = broken
    spec = EpisodeSpec(
        key=f"replay/{task.id}/seed1",
        task=task,
        seed=1,
        model="replay",
        scaffold=scaffold,
        out_dir=tmp_path / "episode",
        instruction=task.instruction_for(workspace),
        **limits,  # type: ignore[arg-type]
    )
    script = ReplayScript(responses=responses, pick=pick, when_exhausted=when_exhausted)  # type: ignore[arg-type]
    with ReplayServer(script, api_key="sk-test") as server:
        try:
            outcome = (runner or MiniSweAgentRunner(watch_loops=True)).run(
                spec, sandbox, ReplayEndpoint(server), stop or threading.Event()
            )
        finally:
            sandbox.close()
    return outcome, sandbox, server


def bash(command: str) -> ToolCall:
    return ToolCall(name="bash", arguments=json.dumps({"command": command}))


def reread(tmp_path: Path) -> list[object]:
    """The turns `harness loops` reads back from the saved trajectory."""
    result = read_trajectories(tmp_path / "episode" / TRAJECTORY)
    assert result.format == "mini-swe-agent" and len(result.trajectories) == 1
    return list(result.trajectories[0].turns)


# ---- the scaffold's data is mini-swe-agent's own ------------------------------------------------------
@pytest.mark.parametrize(
    ("scaffold", "upstream"), [("mini-swe-agent", "default"), ("mini-swe-agent-tools", "mini")]
)
def test_scaffold_data_is_mini_swe_agents_config(scaffold: str, upstream: str) -> None:
    assert check_version() == "2.4.6"
    import minisweagent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.exceptions import Submitted
    from minisweagent.models.litellm_textbased_model import LitellmTextbasedModelConfig  # imports litellm

    assert minisweagent.__version__ == "2.4.6"
    config = yaml.safe_load((Path(minisweagent.__file__).parent / "config" / f"{upstream}.yaml").read_text())
    msa = load_mini_swe_agent(scaffold)
    assert msa.templates.system == config["agent"]["system_template"]
    assert msa.templates.instance == config["agent"]["instance_template"]
    assert msa.templates.observation == config["model"]["observation_template"]
    assert msa.templates.format_error == config["model"]["format_error_template"]
    assert msa.config.env == config["environment"]["env"]
    assert msa.config.action_regex == LitellmTextbasedModelConfig(model_name="x").action_regex
    assert msa.config.actions == ("text" if scaffold == "mini-swe-agent" else "toolcall")
    assert msa.scaffold.native_tool_calling == (scaffold == "mini-swe-agent-tools")
    assert load_scaffold(scaffold).snapshot()["tools"] == [
        upstream_bash_tool()
    ]  # what the format checks validate
    # the submit marker ends an episode exactly where mini-swe-agent's own environment says so
    upstream_env = LocalEnvironment()
    for output in (f"{msa.config.submit_marker}\nthe patch", f"  {msa.config.submit_marker}", "no"):
        for code in (0, 1):
            try:
                upstream_env._check_finished({"output": output, "returncode": code})
                submitted = False
            except Submitted:
                submitted = True
            assert submitted == (code == 0 and output.strip().startswith(msa.config.submit_marker))


# ---- episodes ------------------------------------------------------------------------------------------
def test_scripted_solution_finishes_and_resolves(tmp_path: Path, fix_add: Task) -> None:
    responses = [
        say("cat calc.py", "THOUGHT: read the code first.", prompt_tokens=900, completion_tokens=20),
        say(FIX, prompt_tokens=1000, completion_tokens=30),
        say('python3 -c "import calc; print(calc.add(2, 3))"', prompt_tokens=1100, completion_tokens=25),
        say(SUBMIT, "THOUGHT: done.", prompt_tokens=1200, completion_tokens=10),
    ]
    outcome, sandbox, server = episode(tmp_path, fix_add, responses, pick="by_turn")
    assert outcome.status == "finished", outcome
    assert outcome.details["exit_status"] == "Submitted" and not outcome.infra and not outcome.stopped
    assert [t.tool_calls for t in outcome.turns] == [
        (bash("cat calc.py"),),
        (bash(FIX),),
        (bash('python3 -c "import calc; print(calc.add(2, 3))"'),),
        (bash(SUBMIT),),
    ]
    assert outcome.turns[0].text.startswith("THOUGHT: read the code first.")
    assert (
        "return a - b" in outcome.turns[0].observation
        and "<returncode>0</returncode>" in outcome.turns[0].observation
    )
    assert "5" in outcome.turns[2].observation and not any(t.observation_is_error for t in outcome.turns)
    assert [t.finish_reason for t in outcome.turns] == ["stop"] * 4
    assert (outcome.prompt_tokens, outcome.completion_tokens) == (4200, 85)
    assert outcome.loop is None and outcome.llm_s > 0
    assert sandbox.commands == [json.loads(t.tool_calls[0].arguments)["command"] for t in outcome.turns]
    # what mini-swe-agent sent: its system prompt, the task in its instance template, the
    # scaffold's sampling, the spec's seed, no tools (text actions), the endpoint's key and name
    first = server.requests[0]
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert "exactly ONE bash code block" in first["messages"][0]["content"]
    assert fix_add.instruction.strip() in first["messages"][1]["content"]
    assert (first["model"], first["temperature"], first["top_p"], first["max_tokens"], first["seed"]) == (
        "replay",
        0.0,
        1.0,
        1024,
        1,
    )
    assert "tools" not in first
    last = server.requests[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user"] + ["assistant", "user"] * 3
    assert all("extra" not in m for m in last)
    assert run_tests(fix_add, Path(sandbox.workdir)).resolved
    # the trajectory is mini-swe-agent's own format, and reads back as the same turns
    traj = json.loads((tmp_path / "episode" / TRAJECTORY).read_text())
    assert traj["trajectory_format"] == "mini-swe-agent-1.1" and traj["info"]["exit_status"] == "Submitted"
    assert traj["info"]["mini_version"] == "2.4.6" and traj["instance_id"] == "replay/fix-add/seed1"
    assert reread(tmp_path) == outcome.turns


def test_harness_loops_reads_the_trajectory(tmp_path: Path, fix_add: Task) -> None:
    responses = [say("ls")] * 5
    outcome, _, _ = episode(tmp_path, fix_add, responses, pick="by_turn", max_iterations=5)
    assert outcome.status == "loop_stopped"
    done = run_harness("loops", str(tmp_path / "episode" / TRAJECTORY), "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["rows"]
    assert (row["episode"], row["turns"], row["loop_kind"], row["start_turn"]) == (
        "replay/fix-add/seed1",
        4,
        "repeat_call",
        0,
    )


def test_same_command_every_turn_is_stopped_as_a_loop(tmp_path: Path, fix_add: Task) -> None:
    outcome, _, server = episode(tmp_path, fix_add, [say("ls")], when_exhausted="repeat_last")
    assert outcome.status == "loop_stopped", outcome
    assert outcome.loop is not None and outcome.loop.kind == LoopKind.repeat_call
    assert (outcome.loop.start_turn, outcome.loop.detected_at) == (0, 3)
    assert len(outcome.turns) == 4 and server.served == 4  # no model call after the loop was certain
    assert outcome.details["exit_status"] == "LoopDetected"
    assert reread(tmp_path) == outcome.turns


def test_without_the_monitor_the_step_limit_ends_it(tmp_path: Path, fix_add: Task) -> None:
    runner = MiniSweAgentRunner(watch_loops=False)
    outcome, _, server = episode(
        tmp_path, fix_add, [say("ls")], when_exhausted="repeat_last", runner=runner, max_iterations=6
    )
    assert outcome.status == "max_iterations", outcome
    assert outcome.loop is None and len(outcome.turns) == 6 and server.served == 6
    assert outcome.details["exit_status"] == "LimitsExceeded"


def test_format_errors_are_answered_by_mini_swe_agent_and_recorded(tmp_path: Path, fix_add: Task) -> None:
    two = f"THOUGHT: two at once.\n\n{BLOCK.format('ls')}\n\n{BLOCK.format('cat calc.py')}"
    responses = [
        ScriptedResponse(content="I will fix the add function now.", completion_tokens=7),
        ScriptedResponse(content=two),
        say(FIX),
        say(SUBMIT),
    ]
    outcome, sandbox, server = episode(tmp_path, fix_add, responses)
    assert outcome.status == "finished", outcome
    turns = outcome.turns
    assert [len(t.tool_calls) for t in turns] == [0, 0, 1, 1]
    assert turns[0].text == "I will fix the add function now." and turns[0].completion_tokens == 7
    assert "Format error" in turns[0].observation and "found 0 actions" in turns[0].observation
    assert "found 2 actions" in turns[1].observation
    assert (
        turns[0].observation_is_error and turns[1].observation_is_error and not turns[2].observation_is_error
    )
    assert sandbox.commands == [FIX, SUBMIT]  # nothing of a refused response ran
    schemas = load_scaffold("mini-swe-agent").tool_schemas()
    assert [e.category for e in validate_turn(turns[0], schemas).errors] == [FormatCategory.no_tool_call]
    assert validate_turn(turns[2], schemas).ok
    # mini-swe-agent's own reply went back; the refused response itself did not (as upstream)
    second = server.requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "user"]
    assert (
        "Please always provide EXACTLY ONE action in triple backticks, found 0 actions."
        in second[-1]["content"]
    )
    assert all("I will fix" not in str(m["content"]) for m in server.requests[-1]["messages"])
    assert run_tests(fix_add, Path(sandbox.workdir)).resolved
    assert reread(tmp_path) == turns


def test_text_mode_records_the_block_it_ran_not_tool_calls_sent_beside_it(
    tmp_path: Path, fix_add: Task
) -> None:
    """A server may answer tool calls beside the text (one replay script serving OpenHands and
    mini-swe-agent does): mini-swe-agent reads the text alone, so the turn is the block it ran,
    not an unknown `terminal` call (which the record would count as a format error per turn)."""
    stray = [ScriptedCall(name="terminal", arguments={"command": "ls"})]
    responses = [
        ScriptedResponse(content=f"THOUGHT: fix.\n\n{BLOCK.format(FIX)}", tool_calls=stray),
        ScriptedResponse(content=f"THOUGHT: done.\n\n{BLOCK.format(SUBMIT)}", tool_calls=stray),
    ]
    outcome, sandbox, _ = episode(tmp_path, fix_add, responses)
    assert outcome.status == "finished", outcome
    assert sandbox.commands == [FIX, SUBMIT]
    assert [t.tool_calls for t in outcome.turns] == [(bash(FIX),), (bash(SUBMIT),)]
    schemas = load_scaffold("mini-swe-agent").tool_schemas()
    assert all(validate_turn(t, schemas).ok for t in outcome.turns)
    assert reread(tmp_path) == outcome.turns  # `harness loops` reads the trajectory the same way


@pytest.mark.parametrize(("watch", "status"), [(False, "stuck"), (True, "loop_stopped")])
def test_repeated_format_errors(tmp_path: Path, fix_add: Task, watch: bool, status: str) -> None:
    responses = [ScriptedResponse(content=f"Let me think ({i}).") for i in range(5)]
    outcome, _, server = episode(tmp_path, fix_add, responses, runner=MiniSweAgentRunner(watch_loops=watch))
    assert outcome.status == status, outcome
    assert outcome.details["exit_status"] == "RepeatedFormatError"
    assert len(outcome.turns) == 3 and server.served == 3
    if watch:
        assert outcome.loop is not None and outcome.loop.kind == LoopKind.repeat_error
        assert outcome.loop.start_turn == 0
    else:
        assert outcome.loop is None and outcome.error is None


def test_tool_calling_mode(tmp_path: Path, fix_add: Task) -> None:
    def call(command: str) -> ScriptedResponse:
        return ScriptedResponse(
            content="Calling bash.", tool_calls=[ScriptedCall(name="bash", arguments={"command": command})]
        )

    responses = [
        call(FIX),
        ScriptedResponse(tool_calls=[ScriptedCall(name="bash", arguments='{"command": "ls"')]),
        call(SUBMIT),
    ]
    outcome, sandbox, server = episode(tmp_path, fix_add, responses, scaffold="mini-swe-agent-tools")
    assert outcome.status == "finished", outcome
    assert server.requests[0]["tools"] == [upstream_bash_tool()]
    assert [m["role"] for m in server.requests[1]["messages"]] == ["system", "user", "assistant", "tool"]
    bad = outcome.turns[1]
    assert (
        bad.tool_calls[0].arguments == '{"command": "ls"'
        and "Error parsing tool call arguments" in bad.observation
    )
    schemas = load_scaffold("mini-swe-agent-tools").tool_schemas()
    assert [e.category for e in validate_turn(bad, schemas).errors] == [FormatCategory.invalid_json_arguments]
    assert sandbox.commands == [FIX, SUBMIT]
    assert run_tests(fix_add, Path(sandbox.workdir)).resolved
    assert reread(tmp_path) == outcome.turns


@pytest.mark.slow
@pytest.mark.parametrize("where", ["model call", "command"])
def test_stop_ends_the_episode_at_once(tmp_path: Path, fix_add: Task, where: str) -> None:
    responses = [say("sleep 60")] if where == "command" else [say("ls", delay=60)]
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    outcome, _, _ = episode(tmp_path, fix_add, responses, stop=stop)
    assert outcome.stopped and outcome.status == "error" and outcome.details["exit_status"] == "Stopped"
    assert outcome.wall_s < 15, outcome.wall_s  # not the 60 s of the reply, nor of the command


@pytest.mark.slow
def test_time_limit(tmp_path: Path, fix_add: Task) -> None:
    t0 = time.monotonic()
    outcome, _, _ = episode(tmp_path, fix_add, [say("sleep 120")], time_limit_s=1.5)
    assert time.monotonic() - t0 < 30  # the limit, not the command's 120 s
    assert (outcome.status, outcome.error_type, outcome.timed_out) == ("error", "TimeLimit", True)
    assert not outcome.infra and "1.5 s" in str(outcome.error)


@pytest.mark.parametrize(
    ("response", "error_type", "infra"),
    [
        (ScriptedResponse(status=503, error="engine dead"), "InternalServerError", True),
        (
            ScriptedResponse(status=400, error="This model's maximum context length is 2048 tokens."),
            "BadRequestError",
            False,
        ),
    ],
)
def test_model_failures(
    tmp_path: Path, fix_add: Task, response: ScriptedResponse, error_type: str, infra: bool
) -> None:
    outcome, _, server = episode(tmp_path, fix_add, [say("ls"), response], pick="by_turn")
    assert (outcome.status, outcome.error_type, outcome.infra) == ("error", error_type, infra), outcome
    assert server.served == 2 and len(outcome.turns) == 1  # one attempt: the harness retries episodes
    traj = json.loads((tmp_path / "episode" / TRAJECTORY).read_text())
    assert traj["info"]["exit_status"] == error_type


def test_a_broken_sandbox_is_an_infrastructure_error(tmp_path: Path, fix_add: Task) -> None:
    outcome, _, _ = episode(tmp_path, fix_add, [say("ls")], broken=True)
    assert (outcome.status, outcome.error_type, outcome.infra) == ("error", "SandboxLost", True), outcome


def test_not_a_mini_swe_agent_scaffold(tmp_path: Path, fix_add: Task) -> None:
    from harness.errors import HarnessError

    with pytest.raises(HarnessError, match=r"mini-swe-agent\.toml"):
        episode(tmp_path, fix_add, [say("ls")], scaffold="openhands-codeact")
    assert (REPO / "scaffolds" / "mini-swe-agent" / "mini-swe-agent.toml").is_file()
