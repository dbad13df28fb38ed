"""`harness proxy --model CKPT`: a real vLLM behind the proxy, started by the first request,
stopped when idle, started again by the next request; the episode recorded under the served name."""

import json
import time
from pathlib import Path

import openai
import pytest

from tests.conftest import vllm_processes
from tests.helpers.proxy_command import harness_proxy, records
from tests.helpers.proxying import TERMINAL

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]


def _gone(timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while vllm_processes() and time.monotonic() < deadline:
        time.sleep(0.5)
    return not vllm_processes()


def test_an_on_demand_vllm_behind_the_proxy_starts_stops_when_idle_and_starts_again(
    bundled_model: Path, tmp_path: Path, no_vllm_left: None
) -> None:
    run = tmp_path / "run"
    with harness_proxy(
        "--model",
        "smollm2-135m",
        "--max-model-len",
        "4096",
        "--idle-timeout",
        "5",
        "--episode-idle",
        "300",
        "--run-dir",
        str(run),
    ) as proxy:
        assert not vllm_processes()  # nothing starts before an agent asks
        c = openai.OpenAI(base_url=f"{proxy.url}/ep/real/v1", api_key=proxy.key, max_retries=0, timeout=400)
        messages = [{"role": "user", "content": "List the files."}]
        first = c.chat.completions.create(
            model="whatever", messages=messages, tools=[TERMINAL], max_tokens=32
        )  # type: ignore[arg-type, list-item]
        assert first.model == "smollm2-135m"  # the agent's model name was replaced by the served one
        proxy.wait_for("model server up")
        assert _gone(60), "the server did not stop when idle"
        messages += [
            {"role": "assistant", "content": first.choices[0].message.content or "ok"},
            {"role": "user", "content": "Go on."},
        ]
        second = c.chat.completions.create(model="whatever", messages=messages, max_tokens=16)  # type: ignore[arg-type]
        assert second.choices[0].finish_reason in ("stop", "length", "tool_calls")
        assert len([line for line in proxy.lines if "starting the model server" in line]) == 2
    assert _gone(30)
    (rec,) = records(run)
    assert (rec["model"], rec["task_id"], rec["turns"]) == ("smollm2-135m", "real", 2)
    assert rec["prompt_tokens"] > 0 and rec["completion_tokens"] > 0
    assert json.loads((run / "run.json").read_text())["upstream"].startswith("vllm:")
    assert (run / "server.log").is_file()
