"""Issue 20, item 3: what the harness copies out of an episode is capped in bytes and files.

An agent's ``truncate -s 1T big`` is a sparse file that costs its sandbox nothing; every copy the
harness makes of it (the container's export into the run directory, a verification copy, Ray's tar
of the episode) would write it out in full. Over a cap the episode is an error naming the cap,
nothing of it is left in the run directory, the run goes on, and a rerun does not do it again.
"""

import json
import os
from pathlib import Path

import pytest

from harness.evaluate import EvalConfig, run_eval
from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
from harness.results.store import RunStore
from harness.runtime.base import SandboxConfig
from harness.runtime.export_caps import ExportLimit, ExportLimits, check_tree
from tests.test_runtime_container import client  # noqa: F401  the engine, for the docker runtime

pytestmark = pytest.mark.timeout(600)

BIG = "1T"  # the sparse file the agent makes: no disk in its sandbox, a terabyte in any copy
CAP = 1 << 30  # the default export cap (1 GiB)


def terminal(command: str) -> ScriptedResponse:
    return ScriptedResponse(
        content="Running.", tool_calls=[ScriptedCall(name="terminal", arguments={"command": command})]
    )


FINISH = ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "done"})])
# Smoke tasks in load order: count-lines (the agent also makes the big file), fix-add, hello-file.
SCRIPT = [
    terminal(f"truncate -s {BIG} big && wc -l < data.txt > count.txt"),
    FINISH,
    terminal("sed -i 's/a - b/a + b/' calc.py"),
    FINISH,
    terminal("echo 'Hello, world!' > hello.txt"),
    FINISH,
]


def _eval(run: Path, runtime: str, script: list[ScriptedResponse], **kw: object) -> int:
    """The smoke suite under ``script``; the requests the model server answered."""
    kw.setdefault("concurrency", 1)  # one script in arrival order: episodes one at a time
    with ReplayServer(ReplayScript(model="scripted", responses=script)) as server:
        run_eval(
            EvalConfig(
                runtime=runtime,  # type: ignore[arg-type]
                models=("scripted",),
                tasks="smoke",
                base_url=server.base_url,
                run_dir=run,
                **kw,  # type: ignore[arg-type]
            )
        )
        return server.served


def _apparent_bytes(root: Path) -> int:
    """What a copy of ``root`` would write: every file at its full size (sparse ones too)."""
    total = 0
    for parent, _, files in os.walk(root):
        for name in files:
            path = Path(parent) / name
            if not path.is_symlink():
                total += path.stat().st_size
    return total


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["docker", "local"])
def test_a_1tb_sparse_file_is_an_error_naming_the_cap_and_the_run_goes_on(
    runtime: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if runtime == "docker":
        request.getfixturevalue("client")
    run = tmp_path / "run"
    _eval(run, runtime, SCRIPT)
    recs = {k[1]: r for k, r in RunStore(run).records().items()}
    big = recs["count-lines"]
    assert big.status == "error" and big.reward == 0.0 and big.verified, big
    assert big.error is not None and big.error.type == "ExportLimit"
    assert "export cap of 1.0 GiB" in big.error.message and "big is 1.0 TiB" in big.error.message
    assert "--export-max-gib" in big.error.message  # what to do
    assert {t: recs[t].status for t in ("fix-add", "hello-file")} == {
        "fix-add": "resolved",
        "hello-file": "resolved",
    }
    # Nothing of it in the run directory, counted as any copy of the directory would count it.
    assert _apparent_bytes(run) < CAP
    assert not list(run.rglob("big"))
    assert not (run / "episodes" / "scripted" / "count-lines" / "seed1" / "workspace").exists()
    # The error is the model's outcome: final, so a rerun asks the model nothing and adds nothing.
    lines = (run / "episodes.jsonl").read_text().splitlines()
    assert _eval(run, runtime, [FINISH]) == 0
    assert (run / "episodes.jsonl").read_text().splitlines() == lines


def test_too_many_files_are_an_error_naming_the_cap(tmp_path: Path) -> None:
    script = [
        terminal("mkdir many && touch many/f{1..60} && wc -l < data.txt > count.txt"),
        FINISH,
        *SCRIPT[2:],
    ]
    run = tmp_path / "run"
    _eval(run, "local", script, sandbox=SandboxConfig(export_max_files=50))
    rec = RunStore(run).records()[("scripted", "count-lines", 1)]
    assert rec.error is not None and rec.error.type == "ExportLimit"
    assert "50 files (more than 50 files)" in rec.error.message
    assert json.loads((run / "run.json").read_text())["runtime"] == "local"


def test_the_tree_check_stops_at_the_cap_and_never_follows_links(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "small").write_bytes(b"x" * 100)
    (ws / "out").symlink_to("/")  # a link out is a link: 0 bytes, never walked
    check_tree(ws, ExportLimits(max_bytes=100, max_files=2))
    with open(ws / "big", "wb") as fh:
        fh.truncate(1 << 40)
    assert (ws / "big").stat().st_blocks == 0  # sparse: nothing allocated
    with pytest.raises(ExportLimit, match=r"big is 1\.0 TiB"):
        check_tree(ws, ExportLimits())


def test_export_preds_leaves_out_a_workspace_over_the_cap_instead_of_copying_it(tmp_path: Path) -> None:
    """A run from before the caps may hold a huge sparse file: export-preds diffs from a copy."""
    from tests.conftest import REPO, run_harness
    from tests.test_eval_replay import SOLVE

    run = tmp_path / "run"
    with ReplayServer(ReplayScript(model="scripted", responses=SOLVE["fix-add"])) as server:
        run_eval(
            EvalConfig(
                runtime="local",
                models=("scripted",),
                tasks=str(REPO / "tasks" / "smoke" / "fix-add"),
                base_url=server.base_url,
                run_dir=run,
            )
        )
    with open(run / "episodes" / "scripted" / "fix-add" / "seed1" / "workspace" / "big", "wb") as fh:
        fh.truncate(2 * CAP)
    done = run_harness("export-preds", str(run), "--out", str(tmp_path / "preds.jsonl"))
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    assert "fix-add seed 1 left out" in said and "big is 2.0 GiB" in said
    assert (tmp_path / "preds.jsonl").read_text() == ""
