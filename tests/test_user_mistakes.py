"""Issue 13, item 6: a user's mistake ends in one line naming the flag or file, never a traceback.

Each test feeds one mistake the probes found; most go through ``harness.cli.main`` in-process, so
what is checked is exactly what the user sees: ``harness: ...`` on stderr and exit code 2.
"""

import json
from pathlib import Path

import pytest

from harness.cli import main
from tests.conftest import DATA

QWEN7B = DATA / "configs" / "qwen2.5-7b-instruct" / "config.json"


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> str:
    """Run the CLI; assert exit 2 and a single ``harness:`` line containing every needle."""
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: "), err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def _config_with(tmp_path: Path, **changes: object) -> Path:
    config = json.loads(QWEN7B.read_text()) | changes
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config).replace('"__inf__"', "Infinity"))
    return path


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("num_hidden_layers", 0),
        ("hidden_size", -4096),
        ("num_key_value_heads", "__inf__"),
        ("vocab_size", 1.5),
        ("max_position_embeddings", "__inf__"),
        ("max_position_embeddings", -1),
    ],
)
def test_plan_refuses_zero_negative_or_infinite_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: object
) -> None:
    path = _config_with(tmp_path, **{field: value})
    one_line_error(capsys, ["plan", "--model", str(path), "--gpu", "h100"], field, "config.json")


@pytest.mark.parametrize("gpu", ["nan", "inf", "-inf", "1e30", "0", "-5"])
def test_plan_refuses_a_gpu_size_that_is_no_device(capsys: pytest.CaptureFixture[str], gpu: str) -> None:
    one_line_error(capsys, ["plan", "--model", str(QWEN7B), f"--gpu={gpu}"], f"--gpu {gpu}", "GiB")


@pytest.mark.parametrize("util", ["0", "1", "1.5", "-0.2", "nan", "inf"])
def test_plan_refuses_gpu_memory_utilization_outside_0_1(
    capsys: pytest.CaptureFixture[str], util: str
) -> None:
    one_line_error(
        capsys,
        ["plan", "--model", str(QWEN7B), "--gpu", "h100", f"--gpu-memory-utilization={util}"],
        "--gpu-memory-utilization",
    )


@pytest.mark.parametrize("flag", ["--max-model-len=0", "--concurrency=-1"])
def test_plan_refuses_non_positive_lengths(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    one_line_error(capsys, ["plan", "--model", str(QWEN7B), "--gpu", "h100", flag], flag.split("=")[0])


@pytest.mark.parametrize(
    "toml",
    [
        "[limits]\nagent_timeout_s = 1e9\n",
        "[limits]\nverify_timeout_s = inf\n",
        "[agent]\ntimeout_sec = 1e9\n",
        "[verifier]\ntimeout_sec = inf\n",
    ],
)
def test_task_timeouts_of_1e9_or_inf_are_refused_naming_the_field(tmp_path: Path, toml: str) -> None:
    from harness.errors import HarnessError
    from harness.tasks import load_tasks

    task = tmp_path / "t"
    (task / "tests").mkdir(parents=True)
    (task / "instruction.md").write_text("do it")
    (task / "tests" / "test.sh").write_text("exit 0\n")
    (task / "task.toml").write_text(toml)
    with pytest.raises(HarnessError, match=r"task.toml: limits\.(agent|verify)_timeout_s: .*86400"):
        load_tasks(str(task))


@pytest.mark.parametrize("reward", ["5.0", "-0.5", "NaN", "Infinity"])
def test_a_reward_outside_0_1_is_flagged_by_line_and_kept_out_of_rates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reward: str
) -> None:
    from harness.results.runs import load_run
    from tests.helpers.runs import record, write_run

    run = write_run(tmp_path / "run", [record("a", reward=1.0), record("b", reward=0.0)])
    line = record("c", reward=1.0).model_dump_json().replace('"reward":1.0', f'"reward":{reward}')
    with (run / "episodes.jsonl").open("a") as fh:
        fh.write(line + "\n")
    data = load_run(run)
    assert sorted(data.episodes["task_id"]) == ["a", "b"]
    assert any("line 3: reward" in w and "outside 0..1" in w for w in data.warnings), data.warnings
    # the command that crashed on it: compare computes rates from these rewards
    assert main(["compare", str(run), "--json"]) in (0, 2)
    assert "Traceback" not in capsys.readouterr().err


def test_a_run_whose_every_line_is_invalid_says_which_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.helpers.runs import record, write_run

    run = write_run(tmp_path / "run", [])
    good = json.loads(record("a").model_dump_json())
    lines = [json.dumps(good | {"seed": "one"}), json.dumps({k: v for k, v in good.items() if k != "turns"})]
    (run / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    one_line_error(capsys, ["show", str(run)], "episodes.jsonl", "line 1", "(seed)")


def test_replay_port_out_of_range_is_a_one_line_flag_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "s.json"
    script.write_text('[{"content": "hi"}]')
    with pytest.raises(SystemExit) as exit_:
        main(["replay", str(script), "--port", "70000"])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and "--port" in err and "70000" in err and "Traceback" not in err
    assert len(err.splitlines()) == 1


def test_replay_script_nested_too_deeply_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "deep.json"
    script.write_text("[" * 100_000 + "]" * 100_000)
    one_line_error(capsys, ["replay", str(script)], str(script), "nested too deeply")
    folder = tmp_path / "recorded"
    folder.mkdir()
    (folder / "c.json").write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    one_line_error(capsys, ["replay", str(folder)], "c.json")


@pytest.mark.parametrize("body", ["[1, 2]", '"text"', "null", "[" * 100_000 + "]" * 100_000])
def test_replay_request_that_is_not_an_object_gets_400_and_uses_no_response(body: str) -> None:
    import httpx

    from harness.replay import ReplayScript, ReplayServer, ScriptedResponse

    script = ReplayScript(model="m", responses=[ScriptedResponse(content="first")])
    with ReplayServer(script) as server:
        bad = httpx.post(f"{server.base_url}/chat/completions", content=body, timeout=10)
        assert bad.status_code == 400, bad.text
        assert server.served == 0
        good = httpx.post(
            f"{server.base_url}/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "go"}]},
            timeout=10,
        )
        assert good.json()["choices"][0]["message"]["content"] == "first"


def test_loops_json_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.helpers.runs import record, write_run

    run = write_run(tmp_path / "run", [record(f"task-{i:04d}", loop="repeat_call") for i in range(400)])
    done = subprocess.run(
        f"{sys.executable} -m harness.cli loops {run} --json | head -c 100 >/dev/null",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stderr == "", done.stderr


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", "\udcff"])
def test_export_preds_with_a_corrupt_run_json_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_bytes(content.encode("utf-8", "surrogateescape"))
    one_line_error(capsys, ["export-preds", str(run)], "run.json")


def test_show_lists_at_most_50_episodes_and_says_how_many_are_hidden(tmp_path: Path) -> None:
    from rich.console import Console

    from harness.results.show import show
    from tests.helpers.runs import record, write_run

    run = write_run(tmp_path / "run", [record(f"t{i:03d}", reward=float(i % 2)) for i in range(120)])

    def shown(**kw: object) -> str:
        console = Console(record=True, width=250)
        show(run, None, console, **kw)  # type: ignore[arg-type]
        return " ".join(console.export_text().split())  # titles wrap at the table's width

    text = shown()
    assert text.count("m/t") == 50 + 1  # 50 rows and the "open one with" example
    assert "(50 of 120 shown)" in text and "70 more episodes not listed" in text and "--limit 0" in text
    assert shown(limit=0).count("m/t") == 120 + 1
    narrowed = shown(status="resolved")  # 60 match: 50 listed, 10 hidden
    assert "(50 of 60 shown)" in narrowed and "10 more episodes" in narrowed
    assert "more episodes" not in shown(task="t007")


def test_the_sdk_condenser_advice_on_a_context_overflow_is_not_printed() -> None:
    """The SDK's agent logger printed an 80-line how-to-configure-a-condenser WARNING per overflow
    (3,207 stderr lines for one overflowing episode, measured); the record's error says it once."""
    import logging

    from harness.episodes.openhands._patching import episode_scope
    from harness.episodes.openhands.sdk import quiet_expected_sdk_errors

    quiet_expected_sdk_errors()
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    log = logging.getLogger("openhands.sdk.agent.agent")  # where agent.py logs it (get_logger(__name__))
    handler = Keep()
    log.addHandler(handler)
    try:
        with episode_scope():  # as while an OpenHands episode runs
            log.warning("\n" + "=" * 80 + "\n⚠️  CONTEXT WINDOW EXCEEDED ERROR\n" + "=" * 80 + "\n\nadvice")
            log.warning("another warning")
    finally:
        log.removeHandler(handler)
    assert seen == ["another warning"]


@pytest.mark.parametrize("command", ["serve", "check"])
def test_server_port_70000_is_one_line_naming_the_flag(
    capsys: pytest.CaptureFixture[str], command: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # no harness.toml of the checkout in the way
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("HARNESS_CONFIG", raising=False)
    one_line_error(capsys, [command, "--model", "smollm2-135m", "--port", "70000"], "--port")


@pytest.mark.parametrize("util", ["0", "1.5", "nan", "inf"])
def test_serve_and_eval_refuse_gpu_memory_utilization_outside_0_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, util: str
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("HARNESS_CONFIG", raising=False)
    flag = f"--gpu-memory-utilization={util}"
    one_line_error(capsys, ["serve", "--model", "smollm2-135m", flag], "--gpu-memory-utilization")
    one_line_error(
        capsys,
        ["eval", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", flag],
        "--gpu-memory-utilization",
    )


@pytest.mark.parametrize("target", ["dir", "under-a-file"])
def test_compare_html_into_a_directory_is_a_mistake_not_a_block(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    """`compare --html DIR` crashed with a traceback and exit 1, which --strict reads as BLOCK."""
    from tests.helpers.runs import record, write_run

    a = write_run(tmp_path / "a", [record(t, reward=1.0) for t in "xyz"])
    b = write_run(tmp_path / "b", [record(t, reward=1.0) for t in "xyz"])
    (tmp_path / "file").write_text("")
    html = tmp_path / "pages" if target == "dir" else tmp_path / "file" / "page.html"
    if target == "dir":
        html.mkdir()
    argv = ["compare", str(a), str(b), "--max-drop", "5", "--strict", "--html", str(html)]
    one_line_error(capsys, argv, f"--html {html}")


def test_max_drop_0_05_is_read_as_5_points_and_the_reading_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--max-drop 0.05` was a gate of 0.05 points, silently; now it is the fraction 0.05 = 5
    points, the same gate as `--max-drop 5`, and a note on stderr says so."""
    from tests.helpers.runs import record, write_run

    tasks = [f"t{i}" for i in range(20)]
    a = write_run(tmp_path / "a", [record(t, reward=1.0) for t in tasks])
    b = write_run(tmp_path / "b", [record(t, reward=float(i != 0)) for i, t in enumerate(tasks)])
    gates = {}
    for flag in ("--max-drop", "--min-gain"):
        for value in ("0.05", "5"):
            assert main(["compare", str(a), str(b), flag, value, "--json"]) == 0
            got = capsys.readouterr()
            gates[flag, value] = json.loads(got.out)["gate"]
            note = f"harness: note: {flag} 0.05 read as a fraction: 5 points of resolve rate"
            assert (note in got.err) == (value == "0.05"), got.err
        assert gates[flag, "0.05"] == gates[flag, "5"] and gates[flag, "5"]["threshold"] == 0.05


@pytest.mark.parametrize("given", ["file", "directory", "safetensors-header"])
def test_plan_on_a_deeply_nested_config_or_a_huge_header_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: str
) -> None:
    """A config.json of 100,000 nested brackets ended `plan` in RecursionError; a safetensors file
    whose first 8 bytes claim a 2**60-byte header asked for that much memory."""
    import struct

    model = tmp_path / "model"
    model.mkdir()
    if given == "safetensors-header":
        (model / "config.json").write_text(QWEN7B.read_text())
        (model / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 60) + b"{}")
        needles = ["model.safetensors", "unreadable safetensors header"]
    else:
        config = json.loads(QWEN7B.read_text())
        text = json.dumps(config)[:-1] + ', "deep": ' + "[" * 100_000 + "]" * 100_000 + "}"
        (model / "config.json").write_text(text)
        needles = ["config.json", "nested too deeply"]
    target = model / "config.json" if given == "file" else model
    one_line_error(capsys, ["plan", "--model", str(target), "--gpu", "h100"], *needles)


def test_a_mistyped_tasks_under_runtime_auto_is_one_line_and_starts_no_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--runtime auto` may start podman's API service, which outlives the run by design: a `--tasks`
    that names nothing is said before that (it was said after, and left a service running)."""
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("HARNESS_CONFIG", raising=False)
    argv = ["eval", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--runtime", "auto"]
    one_line_error(capsys, [*argv, "--tasks", str(tmp_path / "none")], "no such suite or directory")
    assert not (tmp_path / "cache" / "podman").exists()  # where a managed service would live


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:9/v1?token=abc", "has a query string or fragment"),
        ("http://127.0.0.1:9/v1#x", "has a query string or fragment"),
        ("http://127.0.0.1:9/v1/chat/completions", "goes past the API's base"),
        ("127.0.0.1:9/v1", "is not an http(s) URL with a host"),
        ("http://127.0.0.1:port/v1", "is not a URL"),
    ],
)
def test_a_base_url_the_openai_client_cannot_use_is_one_line_at_start(
    url: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was taken, and every episode failed with NotFoundError (a query string is dropped by the
    client) without a word of why."""
    one_line_error(
        capsys, ["eval", "--model", "m", "--base-url", url, "--tasks", "smoke"], "--base-url", says
    )
    one_line_error(capsys, ["check", "--base-url", url, "--served-model", "m"], "--base-url", says)
