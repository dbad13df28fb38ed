"""The episode seam's configuration: EvalConfig as the one source of eval options, config files,
the endpoint contract, and the import structure of harness/episodes."""

import ast
from pathlib import Path

import pytest
from pydantic import BaseModel

from harness._cli_options import flag_for
from harness.errors import HarnessError
from harness.eval_config import UNPREFIXED
from harness.evaluate import EvalConfig, build_eval_config
from harness.replay import ReplayScript, ReplayServer, ScriptedResponse
from harness.server.endpoint import ExternalEndpoint, openai_url
from tests.conftest import REPO, run_harness


@pytest.fixture
def in_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_CONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def test_eval_reads_the_eval_and_server_tables_and_flags_win(in_dir: Path) -> None:
    (in_dir / "harness.toml").write_text(
        '[server]\nmax_model_len = 4096\nidle_timeout = 42\nport = 8000\n\n[eval]\nseeds = 3\nruntime = "local"\n'
    )
    config = build_eval_config({"models": ("m",), "concurrency": 2, "server": {"max_num_seqs": 8}})
    assert (config.seeds, config.runtime, config.concurrency, config.idle_timeout) == (3, "local", 2, 42)
    # [server] keys reach the server, except those eval sets itself per run (port, idle_timeout).
    assert config.server.model_dump(exclude_defaults=True) == {"max_model_len": 4096, "max_num_seqs": 8}
    flagged = build_eval_config(
        {"models": ("m",), "seeds": 1, "idle_timeout": 5.0, "server": {"max_model_len": 2048}}
    )
    assert (flagged.seeds, flagged.idle_timeout, flagged.server.max_model_len) == (1, 5.0, 2048)


@pytest.mark.parametrize(
    ("toml", "flags", "needle"),
    [
        ("", {"models": ("m",), "seeds": 0}, "--seeds: Input should be greater than or equal to 1"),
        (
            '[eval]\nruntime = "vm"\n',
            {"models": ("m",)},
            "--runtime: 'vm': unknown runtime (known: auto, bwrap, docker, local)",
        ),
        ("[server]\nmax_model_len = -1\n", {"models": ("m",)}, "--max-model-len"),
        ("", {}, "--model: Field required"),
        (
            "",
            {"models": ("m",), "executor": {"ray_address": "auto"}},
            "--ray-address: only with --executor ray (the executor is threads)",
        ),
    ],
)
def test_bad_eval_options_are_one_line_naming_the_flag(
    in_dir: Path, toml: str, flags: dict, needle: str
) -> None:
    (in_dir / "harness.toml").write_text(toml)
    with pytest.raises(HarnessError) as err:
        build_eval_config(flags)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_every_eval_config_field_is_a_flag() -> None:
    done = run_harness("eval", "--help")
    assert done.returncode == 0
    for name, field in EvalConfig.model_fields.items():
        section = field.annotation
        if isinstance(section, type) and issubclass(section, BaseModel):
            prefix = None if name in UNPREFIXED else name
            for sub, subfield in section.model_fields.items():
                assert flag_for(sub, subfield, prefix) in done.stdout, (name, sub)
        else:
            assert flag_for(name, field) in done.stdout, name
    for flag in (
        "--model",
        "--scaffold",
        "--executor",
        "--sandbox-cpus",
        "--image-map",
        "--loop-repeat-call",
    ):
        assert flag in done.stdout, flag
    bad = run_harness("eval", "--model", "m", "--runtime", "vm")
    assert (
        bad.returncode == 2
        and "unknown runtime (known: auto, bwrap, docker, local)" in bad.stderr
        and len(bad.stderr.splitlines()) == 1
    )


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000/v1"),
    ],
)
def test_an_external_endpoint_s_openai_url_ends_in_v1_exactly_once(given: str, url: str) -> None:
    assert openai_url(given) == url
    ep = ExternalEndpoint(given, "k", "served")
    assert (ep.openai_url, ep.api_key, ep.name, ep.facts()) == (url, "k", "served", None)


def test_an_external_endpoint_is_healthy_while_its_server_answers() -> None:
    with ReplayServer(ReplayScript(model="m", responses=[ScriptedResponse(content="hi")])) as server:
        ep = ExternalEndpoint(server.base_url, "k", "m")
        assert ep.healthy()
    assert not ep.healthy()  # stopped: nothing answers on that port any more


def _harness_imports(path: Path) -> set[str]:
    """Modules of the harness package that ``path`` imports, at any depth of the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("harness"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("harness"))
    return found


def test_no_import_circle_in_episodes() -> None:
    episodes = REPO / "harness" / "episodes"
    openhands = episodes / "openhands"
    assert "harness.episodes.openhands.sdk" not in _harness_imports(episodes / "scaffold.py")
    assert "harness.episodes.openhands.sdk" not in _harness_imports(openhands / "sdk_tuning.py")
    assert "harness.episodes.openhands.sdk_tuning" in _harness_imports(openhands / "sdk.py")
    # the registry entries import both executors' modules; neither imports them back
    for module in ("sdk_tuning.py", "remote_tools.py"):
        assert "harness.episodes.openhands.tool_specs" not in _harness_imports(openhands / module)
