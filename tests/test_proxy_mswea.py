"""The proxy in front of the real mini-swe-agent (its text-action mode, through litellm), as the
mini-swe-agent runner will use it: a scripted loop is caught at the right turn and the agent ends
the way it ends a finished task, by running the submit command the proxy answers with."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.monitor import LoopFinding
from harness.proxy import ActionFormat, WatchConfig, serve_proxy
from harness.replay import ReplayScript, ReplayServer, ScriptedResponse
from tests.helpers.proxying import Upstream


def _action(command: str, thought: str = "Let me look.") -> ScriptedResponse:
    return ScriptedResponse(content=f"THOUGHT: {thought}\n\n```mswea_bash_command\n{command}\n```")


def _agent(base_url: str, api_key: str, cwd: Path) -> Any:
    import minisweagent
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.litellm_textbased_model import LitellmTextbasedModel

    config = yaml.safe_load(
        (Path(minisweagent.__file__).parent / "config" / "mini_textbased.yaml").read_text()
    )
    model = LitellmTextbasedModel(
        **{
            **config["model"],
            "model_name": "openai/scripted",
            "model_kwargs": {"api_base": base_url, "api_key": api_key, "drop_params": True},
            "cost_tracking": "ignore_errors",
        }
    )
    env = LocalEnvironment(**{**config["environment"], "cwd": str(cwd)})
    return DefaultAgent(model, env, **{**config["agent"], "step_limit": 30, "mode": None})


@pytest.mark.timeout(300)
def test_a_mini_swe_agent_loop_is_caught_and_ended_by_its_own_submit(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("remember the milk\n")
    script = ReplayScript(
        responses=[_action("ls"), _action("cat notes.txt", "Read the notes.")],
        when_exhausted="repeat_last",  # the same command, the same output, for ever
    )
    found: list[LoopFinding] = []
    with ReplayServer(script) as replay, serve_proxy(Upstream(replay.base_url)) as proxy:
        endpoint = proxy.episode(
            "scripted/task/seed1", WatchConfig(actions=ActionFormat()), on_loop=found.append
        )
        agent = _agent(endpoint.openai_url, endpoint.api_key, tmp_path)
        result = agent.run("Read the notes.")
        turns = endpoint.watch.finish()
        served = replay.served
    assert result["exit_status"] == "Submitted"  # the agent ended as it ends a finished task
    assert agent.n_calls == 6 and served == 5  # the 6th call was answered by the proxy
    loop = found[0]
    assert (loop.kind.value, loop.start_turn, loop.detected_at) == ("repeat_call", 1, 4)
    assert [t.tool_calls[0].arguments for t in turns] == ['{"command": "ls"}'] + [
        '{"command": "cat notes.txt"}'
    ] * 4
    assert "notes.txt" in turns[0].observation and "<returncode>0</returncode>" in turns[0].observation
    assert "remember the milk" in turns[1].observation and not turns[1].observation_is_error
