"""Issue 13, item 5: hostile or odd input stays data (escapes, markup, symlinks, a second eval).

Each test plants one hostile input the probes found and checks the harness treats it as data.
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.results.store import RunManifest, RunStore


def _manifest() -> RunManifest:
    return RunManifest(
        run_id="r", tasks=["t"], suite="s", models=["m"], seeds=[1], scaffold="x", scaffold_hash="h"
    )


def test_a_second_eval_on_one_run_directory_is_refused_naming_the_pid(tmp_path: Path) -> None:
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from harness.results.store import RunStore; "
            "from tests.test_hostile_input import _manifest; "
            f"s = RunStore(Path({str(run)!r})); s.init(_manifest()); print('locked', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(HarnessError, match=f"another harness eval \\(PID {holder.pid}\\)"):
            RunStore(run).init(_manifest())
    finally:
        holder.kill()
        holder.wait()
    # the kernel drops the lock with its holder: the directory is free again, no stale lock
    deadline = time.monotonic() + 10
    while True:
        try:
            RunStore(run).init(_manifest())
            break
        except HarnessError:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_the_same_process_may_reopen_its_own_run_directory(tmp_path: Path) -> None:
    first = RunStore(tmp_path / "run")
    first.init(_manifest())
    RunStore(tmp_path / "run").init(_manifest())  # an in-process resume: not refused


def test_a_read_only_run_directory_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(0o555)
    if os.geteuid() == 0:  # root writes through mode bits; a read-only mount is what root meets
        real_access = os.access
        monkeypatch.setattr(
            os, "access", lambda p, mode, **kw: False if Path(p) == run else real_access(p, mode, **kw)
        )
    try:
        with pytest.raises(HarnessError, match=r"run directory is not writable .*another --run-dir") as err:
            RunStore(run).init(_manifest())
        assert "\n" not in str(err.value)
    finally:
        run.chmod(0o755)


@pytest.mark.parametrize("kind", ["link", "dangling-link", "fifo"])
def test_a_planted_lock_file_is_never_followed_or_truncated(tmp_path: Path, kind: str) -> None:
    """`RUN/.eval.lock -> ~/.bashrc`: the eval truncated the link's target and wrote its PID there."""
    run = tmp_path / "run"
    run.mkdir()
    target = tmp_path / "precious.txt"
    if kind == "link":
        target.write_text("keep me\n")
    if kind == "fifo":
        os.mkfifo(run / ".eval.lock")
    else:
        (run / ".eval.lock").symlink_to(target)
    what = "not a regular file" if kind == "fifo" else "a symbolic link"
    with pytest.raises(
        HarnessError, match=rf"\.eval\.lock: is {what}, not the harness's lock file; remove it"
    ):
        RunStore(run).init(_manifest())
    if kind == "link":
        assert target.read_text() == "keep me\n"
    else:
        assert not target.exists()  # a dangling link is not created through either


def test_a_record_s_trajectory_outside_the_run_directory_is_never_opened(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record naming `/home/me/secret`, `../x` or a link out as its trajectory: show, report,
    compare --html and loops printed that file (as turns) before; now each says it is not opened."""
    from harness.cli import main
    from harness.monitor import Turn
    from tests.helpers.runs import record, write_run

    secret = tmp_path / "outside.jsonl"
    secret.write_text(Turn(index=0, text="SECRET-CONTENT", tool_calls=[]).model_dump_json() + "\n")
    trajectories = {"abs": str(secret), "dotdot": "../outside.jsonl", "link": "trajectories/link.jsonl"}
    for name, reward in (("base", 0.0), ("run", 1.0)):  # the flipped tasks are on compare's page
        (tmp_path / name / "trajectories").mkdir(parents=True)
        (tmp_path / name / "trajectories" / "link.jsonl").symlink_to(secret)
        recs = [record(t, reward=reward, loop="repeat_call") for t in trajectories]
        write_run(
            tmp_path / name, [r.model_copy(update={"trajectory": trajectories[r.task_id]}) for r in recs]
        )
    run = tmp_path / "run"
    out = []
    for task in trajectories:
        assert main(["show", str(run), f"m/{task}/seed1", "--all"]) == 0
        got = capsys.readouterr()
        assert "points outside the run directory; not opened" in " ".join((got.out + got.err).split()), got
        out.append(got.out + got.err)
    assert main(["loops", str(run), "--json"]) == 0
    loops = capsys.readouterr()
    assert loops.out.count("points outside the run directory; not opened") == 3, loops.out
    out.append(loops.out + loops.err)
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 0
    out += [f.read_text() for f in (tmp_path / "report").glob("report.*")]
    assert main(["compare", str(tmp_path / "base"), str(run), "--html", str(tmp_path / "c.html")]) == 0
    out.append((tmp_path / "c.html").read_text())
    capsys.readouterr()
    assert not any("SECRET-CONTENT" in text for text in out)


def _harness_capped(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The CLI (or ``-c CODE``) in a process whose address space is capped at 4 GiB: a read
    without bounds ends in MemoryError there instead of taking this machine's memory."""
    import resource

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    return subprocess.run(
        [sys.executable, *(args if args[0] == "-c" else ["-m", "harness.cli", *args])],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=cap,
        cwd=Path(__file__).parent.parent,
    )


@pytest.mark.slow
@pytest.mark.parametrize("planted", ["dev-zero", "fifo", "trajectory-dev-zero", "run-json-dev-zero"])
def test_run_files_linked_to_a_device_or_a_pipe_are_one_line_errors_not_memory_or_a_hang(
    tmp_path: Path, planted: str
) -> None:
    """`episodes.jsonl -> /dev/zero` ended in MemoryError; a FIFO in its place hung every command."""
    from tests.helpers.runs import record, write_run

    run = write_run(tmp_path / "run", [record("a", loop="repeat_call"), record("b", reward=0.0)])
    other = write_run(tmp_path / "other", [record("a"), record("b")])
    target = {
        "dev-zero": run / "episodes.jsonl",
        "fifo": run / "episodes.jsonl",
        "trajectory-dev-zero": run / "trajectories" / "m" / "a" / "seed1.jsonl",
        "run-json-dev-zero": run / "run.json",
    }[planted]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    if planted == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")
    if planted == "trajectory-dev-zero":  # the record names it: a file inside the run, a link to a device
        with (run / "episodes.jsonl").open("a") as fh:
            rec = record("a", loop="repeat_call").model_copy(
                update={"trajectory": "trajectories/m/a/seed1.jsonl"}
            )
            fh.write(rec.model_dump_json() + "\n")
    commands = {
        "show": ["show", str(run)],
        "show-one": ["show", str(run), "m/a/seed1"],
        "report": ["report", str(run), "--out", str(tmp_path / "report")],
        "compare": ["compare", str(other), str(run), "--json"],
        "loops": ["loops", str(run)],  # a device is no episodes.jsonl to it: "unknown format"
        "export-preds": ["export-preds", str(run), "--out", str(tmp_path / "preds.jsonl")],
    }
    chosen = {
        "dev-zero": list(commands),
        "fifo": ["show", "compare", "loops"],
        "trajectory-dev-zero": ["show-one", "report", "loops"],
        "run-json-dev-zero": ["show", "report"],
    }[planted]
    if planted == "dev-zero":  # what eval's resume reads: the store's records
        code = f"from pathlib import Path; from harness.results.store import RunStore; RunStore(Path({str(run)!r})).records()"
        commands["resume"] = ["-c", code]
        chosen.append("resume")
    for name in chosen:
        done = _harness_capped(*commands[name])
        if name == "resume":  # a HarnessError raised, not read to exhaustion
            assert (
                done.returncode == 1 and "RunFileError" in done.stderr and "not a regular file" in done.stderr
            )
            continue
        err = done.stderr
        assert "Traceback" not in err and "MemoryError" not in err, (name, err[-2000:])
        if planted == "trajectory-dev-zero" or name == "loops":  # the run reads, or it is no run
            assert done.returncode in (0, 2), (name, err[-2000:])
        else:
            assert done.returncode == 2, (name, done.returncode, err[-2000:])
            said = [ln for ln in err.splitlines() if ln.startswith("harness: ")]
            assert said and "not a regular file" in said[-1] and target.name in said[-1], (name, err)


def _apply(patch: str, tree: Path) -> None:
    subprocess.run(["git", "apply", "--binary", "-"], input=patch, text=True, cwd=tree, check=True)


def test_export_preds_diffs_symlinks_as_git_does_and_never_follows_them(tmp_path: Path) -> None:
    from harness.results.preds import workspace_patch

    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("SECRET CONTENT\n")
    start, final = tmp_path / "start", tmp_path / "final"
    (start / "pkg").mkdir(parents=True)
    (start / "pkg" / "a.py").write_text("x = 1\n")
    (start / "gone.txt").write_text("old\n")
    (final / "pkg").mkdir(parents=True)
    (final / "pkg" / "a.py").write_text("x = 2\n")  # same size: must still show
    (final / "new.txt").write_text("new\n")
    (final / "leak").symlink_to(secret)
    (final / "outdir").symlink_to(secret.parent, target_is_directory=True)
    (final / "rel").symlink_to("pkg/a.py")

    patch = workspace_patch(start, final)
    assert "SECRET CONTENT" not in patch and "secret.txt" in patch
    assert "diff --git a/leak b/leak\nnew file mode 120000" in patch
    assert "diff --git a/gone.txt b/gone.txt\ndeleted file mode" in patch
    assert "diff --git a/new.txt b/new.txt\nnew file mode 100644" in patch
    assert "-x = 1\n+x = 2" in patch
    # the patch is one git applies to the starting tree, giving the links back as links
    tree = tmp_path / "apply"
    subprocess.run(["cp", "-a", str(start), str(tree)], check=True)
    _apply(patch, tree)
    assert os.readlink(tree / "leak") == str(secret) and os.readlink(tree / "rel") == "pkg/a.py"
    assert not (tree / "gone.txt").exists() and (tree / "pkg" / "a.py").read_text() == "x = 2\n"


def test_export_preds_refuses_a_workspace_that_is_itself_a_link_out(tmp_path: Path) -> None:
    from harness.results.preds import workspace_patch

    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "private.txt").write_text("private\n")
    (tmp_path / "start").mkdir()
    (tmp_path / "workspace").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(HarnessError, match="workspace is a symbolic link"):
        workspace_patch(tmp_path / "start", tmp_path / "workspace")


def test_loops_on_a_run_counts_the_last_record_per_episode(tmp_path: Path) -> None:
    from harness.results.loops_report import loops_report
    from tests.helpers.runs import record, write_run

    # each episode is appended once when it ends and once more when verified
    recs = [record(t, reward=None) for t in ("a", "b")] + [record(t, reward=1.0) for t in ("a", "b")]
    recs.append(record("c", reward=0.0, loop="repeat_call"))
    report = loops_report(write_run(tmp_path / "run", recs))
    assert sorted(r.episode for r in report.rows) == ["m/a/seed1", "m/b/seed1", "m/c/seed1"]
    assert report.totals.episodes == 3 and report.rows[0].source.endswith("episodes.jsonl:3")


# Terminal escapes in 7-bit and 8-bit (C1) forms, a window-title and a clipboard write (OSC 52),
# and rich markup that crashed show / report / loops ("[/]" closes nothing).
EVIL = "[/]\x1b]0;pwned\x07\x1b[2J\x9b31m\x1b]52;c;ZXZpbA==\x1b\\\x9d0;t\x9c[bold]"


def _assert_inert(text: str) -> None:
    assert not any(c in text for c in "\x1b\x07\x9b\x9c\x9d"), repr(text[:300])
    assert "pwned" not in text and "ZXZpbA" not in text


def _hostile_run(root: Path, models: tuple[str, ...] = ("m" + EVIL,)) -> Path:
    from harness.monitor import ToolCall, Turn
    from tests.helpers.runs import record, write_run

    task = "task" + EVIL.replace("/", "")  # a task id is a directory name: no slash
    turns = [
        Turn(
            index=i,
            text="thinking" + EVIL,
            tool_calls=[ToolCall(name="terminal" + EVIL, arguments='{"command": "ls' + EVIL + '"}')],
            observation="output" + EVIL,
            finish_reason="tool_calls" + EVIL if i == 4 else "tool_calls",
        )
        for i in range(6)
    ]
    recs = [
        record(task, model=m, loop="repeat_call", reward=float(k), format_errors={"cat" + EVIL: 1})
        for k, m in enumerate(models)
    ]
    recs.append(record("other", model=models[0], error="boom" + EVIL))
    run = write_run(root, recs, turns={task: turns})
    return run


def test_show_prints_hostile_ids_tool_calls_and_errors_as_inert_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main

    run = _hostile_run(tmp_path / "run")
    assert main(["show", str(run)]) == 0
    listed = capsys.readouterr()
    _assert_inert(listed.out + listed.err)
    assert "[/]" in listed.out
    # the id as printed (controls gone) opens the episode
    from harness._text import clean

    episode = clean("m" + EVIL) + "/" + clean("task" + EVIL.replace("/", "")) + "/seed1"
    assert main(["show", str(run), episode, "--all"]) == 0, capsys.readouterr().err
    shown = capsys.readouterr()
    _assert_inert(shown.out + shown.err)
    assert "terminal[/]" in shown.out.replace("\n", "") and "output[/]" in shown.out


def test_loops_and_compare_print_hostile_names_as_inert_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main

    run = _hostile_run(tmp_path / "run", models=("a" + EVIL, "b" + EVIL))
    assert main(["loops", str(run)]) == 0
    got = capsys.readouterr()
    _assert_inert(got.out + got.err)
    code = main(["compare", str(run), "--model-a", "a" + EVIL, "--model-b", "b" + EVIL, "--force"])
    got = capsys.readouterr()
    assert code == 0, got.err
    _assert_inert(got.out + got.err)
    # an error message that names a hostile model is cleaned too
    assert main(["compare", str(run), "--model-a", "x" + EVIL, "--model-b", "b" + EVIL]) == 2
    got = capsys.readouterr()
    _assert_inert(got.err)
    assert got.err.startswith("harness: ")


def test_report_with_markup_in_ids_does_not_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import main

    run = _hostile_run(tmp_path / "run")
    assert main(["report", str(run)]) == 0
    got = capsys.readouterr()
    _assert_inert(got.out + got.err)


def test_eval_summary_prints_hostile_model_and_loop_names_as_inert_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import harness.evaluate
    from harness.cli import main
    from harness.evaluate import EvalSummary, ModelSummary

    summary = EvalSummary(
        run_dir=tmp_path / ("run" + EVIL),
        models=[
            ModelSummary(
                model="m" + EVIL, episodes=2, resolved=1, loops={"k" + EVIL: 1}, format_errors={"f" + EVIL: 2}
            )
        ],
        new_episodes=2,
        headlines=["headline" + EVIL],
    )
    # the rollout itself is tested elsewhere; here only what cmd_eval prints of its summary
    monkeypatch.setattr(harness.evaluate, "run_eval", lambda config: summary)
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--model", "m", "--base-url", "http://127.0.0.1:9/v1"]) == 0
    got = capsys.readouterr()
    _assert_inert(got.out + got.err)
    assert "[/]" in got.out


def _harbor_env(tmp_path: Path, copy: str) -> Path:
    env = tmp_path / "environment"
    (env / "src").mkdir(parents=True)
    (env / "src" / "main.py").write_text("print(1)\n")
    (env / "src" / "alias.py").symlink_to("main.py")  # a link inside the context: fine, kept as a link
    (env / "Dockerfile").write_text(f"FROM a\nWORKDIR /app\n{copy}\n")
    (tmp_path / "host-secrets").mkdir()
    (tmp_path / "host-secrets" / "id_rsa").write_text("PRIVATE KEY\n")
    return env


@pytest.mark.parametrize(
    ("copy", "plant", "named"),
    [
        ("COPY * .", "secrets", "secrets is a symbolic link out of environment/"),
        ("COPY s* /app/x/", "secrets", "secrets is a symbolic link out of environment/"),
        ("COPY src .", "src/keys", "src/keys is a symbolic link out of environment/"),
        ("COPY . .", "src/deep/keys", "src/deep/keys is a symbolic link out of environment/"),
    ],
)
def test_harbor_copy_check_resolves_globs_and_symlinks_before_copying(
    tmp_path: Path, copy: str, plant: str, named: str
) -> None:
    from harness.tasks.harbor import UnsupportedTask, build_workspace, parse_dockerfile

    env = _harbor_env(tmp_path, copy)
    layout = parse_dockerfile(env / "Dockerfile")  # nothing hostile yet: replayed as Docker would
    ws = build_workspace(layout, env, tmp_path / "ws-clean")
    assert os.readlink(next(ws.rglob("alias.py"))) == "main.py"

    (env / plant).parent.mkdir(parents=True, exist_ok=True)
    (env / plant).symlink_to(tmp_path / "host-secrets", target_is_directory=True)
    with pytest.raises(UnsupportedTask, match=re.escape(named)):
        parse_dockerfile(env / "Dockerfile")
    # the copy itself checks again (the context may change between parsing and copying)
    with pytest.raises(UnsupportedTask, match=re.escape(named)):
        build_workspace(layout, env, tmp_path / "ws")
    assert not any("PRIVATE KEY" in p.read_text() for p in (tmp_path / "ws").rglob("*") if p.is_file())


def test_a_local_episode_leaves_nothing_outside_its_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No /tmp/oh_editor_history_* folder (the SDK's file editor made one per episode) and no line
    in the user's ~/.bash_history (the agent's interactive bash appended to it), even when the
    user's ~/.bashrc names that file itself."""
    import tempfile

    from harness.evaluate import EvalConfig, run_eval
    from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
    from harness.results.store import RunStore
    from tests.conftest import REPO

    home, scratch = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    scratch.mkdir()
    (home / ".bashrc").write_text('HISTFILE="$HOME/.bash_history"\n')
    (home / ".bash_history").write_text("the user's own history\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the SDK's mkdtemp would land

    run = tmp_path / "run"
    workspace = run / "episodes" / "scripted" / "count-lines" / "seed1" / "workspace"

    def call(name: str, **args: object) -> ScriptedResponse:
        return ScriptedResponse(tool_calls=[ScriptedCall(name=name, arguments=args)])

    script = [
        call("terminal", command="echo AGENT-COMMAND-MARKER; wc -l < data.txt > count.txt"),
        call("file_editor", command="create", path=str(workspace / "notes.txt"), file_text="one\n"),
        call(
            "file_editor",
            command="str_replace",
            path=str(workspace / "notes.txt"),
            old_str="one",
            new_str="two",
        ),
        call("finish", message="done"),
    ]
    with ReplayServer(ReplayScript(model="scripted", responses=script)) as server:
        run_eval(
            EvalConfig(
                runtime="local",
                models=("scripted",),
                tasks=str(REPO / "tasks" / "smoke" / "count-lines"),
                base_url=server.base_url,
                run_dir=run,
            )
        )
    (rec,) = RunStore(run).records().values()
    assert rec.turns == 4 and (workspace / "notes.txt").read_text() == "two\n"
    assert (home / ".bash_history").read_text() == "the user's own history\n"
    assert sorted(p.name for p in scratch.iterdir()) == []
    conversation = run / "episodes" / "scripted" / "count-lines" / "seed1" / "conversation"
    assert any(conversation.rglob("editor_history")), "the undo history lives in the episode"
    kept = list(conversation.rglob("bash_history"))
    assert kept and "AGENT-COMMAND-MARKER" in kept[0].read_text()


@pytest.fixture
def cloned_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory as after `git clone` of someone else's repository, with its harness.toml."""
    import harness.server.config

    repo = tmp_path / "cloned"
    repo.mkdir()
    monkeypatch.chdir(repo)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("HARNESS_CONFIG", raising=False)
    monkeypatch.setattr(harness.server.config, "_announced", set())
    return repo


def test_a_harness_toml_in_the_current_directory_is_announced_with_what_runs_a_program(
    cloned_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main

    (cloned_repo / "harness.toml").write_text(
        '[server]\nvllm_python = "/opt/x/bin/python"\n\n[eval]\nseeds = 1\n'
    )
    main(
        ["eval", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--tasks", str(cloned_repo / "none")]
    )
    err = capsys.readouterr().err
    assert f"using [server] of ./harness.toml found in the current directory ({cloned_repo})" in err
    assert "harness.toml sets server.vllm_python = '/opt/x/bin/python'" in err
    assert err.count("harness.toml sets server.vllm_python") == 1  # once, however often it is read


@pytest.mark.parametrize(
    "table",
    [
        'host = "0.0.0.0"',
        'host = "::"',
        'extra_args = ["--host", "0.0.0.0"]',
        'extra_args = ["--host=::"]',
        # vLLM's argparse takes any unambiguous prefix: --hos and --ho are --host there
        'extra_args = ["--hos", "0.0.0.0"]',
        'extra_args = ["--ho=::"]',
        'extra_args = ["--seed", "1", "--ho", "::"]',
    ],
)
@pytest.mark.parametrize("command", ["serve", "eval"])
def test_a_config_file_never_opens_the_server_beyond_loopback(
    cloned_repo: Path, capsys: pytest.CaptureFixture[str], table: str, command: str
) -> None:
    from harness.cli import main

    (cloned_repo / "harness.toml").write_text(f"[server]\n{table}\n")
    argv = [command, "--model", "m"] + (["--base-url", "http://127.0.0.1:9/v1"] if command == "eval" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "listen beyond 127.0.0.1; only the --host flag" in err and "Traceback" not in err


def test_a_config_file_cannot_hand_vllm_a_yaml_config_that_could_set_its_host(
    cloned_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main

    (cloned_repo / "harness.toml").write_text('[server]\nextra_args = ["--config", "vllm.yaml"]\n')
    (cloned_repo / "vllm.yaml").write_text("host: 0.0.0.0\n")
    assert main(["serve", "--model", "m"]) == 2
    err = capsys.readouterr().err
    assert "passes vLLM a --config file, which may set its host" in err and "Traceback" not in err


def test_the_server_binds_loopback_unless_the_host_flag_says_otherwise(cloned_repo: Path) -> None:
    from harness.errors import HarnessError
    from harness.server.config import build_config

    assert build_config(model="m").host == "127.0.0.1"
    assert build_config(model="m", host="0.0.0.0").host == "0.0.0.0"  # the explicit flag
    for extra in (("--host", "0.0.0.0"), ("--hos", "0.0.0.0"), ("--ho=::",), ("--seed", "1", "--h", "::")):
        with pytest.raises(
            HarnessError, match=r"--extra-args: .*abbreviation of it.*use the harness's own --host"
        ):
            build_config(model="m", extra_args=extra)
    # options that only share a first letter still pass
    assert build_config(model="m", extra_args=("--hf-token", "x", "--headless")).extra_args
    with pytest.raises(HarnessError, match=r"--host: .*10\.1\.2\.3"):
        build_config(model="m", host="10.1.2.3")
    (cloned_repo / "harness.toml").write_text('[server]\nhost = "127.0.0.1"\n')  # loopback from a file: fine
    assert build_config(model="m").host == "127.0.0.1"


@pytest.mark.parametrize(("host", "bound"), [(None, "127.0.0.1"), ("0.0.0.0", "0.0.0.0")])
def test_the_launch_binds_what_the_config_says(tmp_path: Path, host: str | None, bound: str) -> None:
    import json

    from harness.server.checkpoint import Checkpoint
    from harness.server.config import ServerConfig
    from harness.server.launch import build_launch
    from harness.server.memory import plan_memory
    from tests.conftest import DATA

    config = json.loads((DATA / "configs" / "qwen2.5-7b-instruct" / "config.json").read_text())
    ckpt = Checkpoint(
        kind="full",
        path=tmp_path,
        base_path=tmp_path,
        served_name="m",
        architecture="Qwen2ForCausalLM",
        model_type="qwen2",
        family="qwen2.5",
        tool_call_parser="hermes",
        template_has_tools=True,
        context_length=32768,
        dtype="bfloat16",
        config=config,
    )
    server = ServerConfig(model="m", **({"host": host} if host else {}), extra_args=("--seed", "1"))
    launch = build_launch(
        python=Path(sys.executable),
        checkpoint=ckpt,
        config=server,
        plan=plan_memory(config, gpu="h100"),
        port=12345,
        on_cpu=False,
    )
    argv = list(launch.argv)
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--host"] == [bound]  # the only --host


def test_eval_prints_a_hostile_task_id_as_inert_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A task directory named with markup and escapes: the eval's progress line (evaluate.py)
    prints it as data, and nothing the eval prints carries a control sequence."""
    import shutil

    from harness.cli import main
    from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
    from tests.conftest import REPO

    suite = tmp_path / "suite"
    name = "hello[bold red]\x1b]0;pwned\x07\x9b2Jx"  # a file name has no "/": no closing tag here
    shutil.copytree(REPO / "tasks" / "smoke" / "hello-file", suite / name)
    finish = ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "done"})])
    with ReplayServer(ReplayScript(model="scripted", responses=[finish])) as server:
        code = main(
            [
                "eval",
                "--model",
                "scripted",
                "--base-url",
                server.base_url,
                "--tasks",
                str(suite),
                "--runtime",
                "local",
                "--run-dir",
                str(tmp_path / "run"),
            ]
        )
    got = capsys.readouterr()
    assert code == 0, got.err
    _assert_inert(got.out + got.err)
    assert "hello[bold red]x seed 1" in got.err  # the progress line names the task, markup as text


@pytest.mark.parametrize(
    ("field", "text", "says"),
    [
        ("seeds", "[" + "9" * 20_000 + "]", "unreadable (Exceeds the limit"),
        ("models", "5", "models: Input should be a valid list"),
        ("harness", "[1, 2]", "harness: Input should be a valid dictionary"),
        ("machine", '"x"', "machine: Input should be a valid dictionary"),
        ("model_info", '{"m": 5}', "model_info.m: Input should be a valid dictionary"),
        ("invocations", '"x"', "invocations: Input should be a valid list"),
    ],
)
def test_a_hostile_run_json_is_one_line_in_every_command_that_reads_it(
    tmp_path: Path, field: str, text: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 20,000-digit integer or a field of the wrong type gave a traceback (ValueError, TypeError,
    AttributeError) in show-manifest, report, compare and export-preds."""
    import json

    from harness.cli import main
    from tests.helpers.runs import record, write_run

    run = write_run(tmp_path / "run", [record("t1", 1, 1.0), record("t2", 1, 0.0)])
    manifest = json.loads((run / "run.json").read_text())
    manifest[field] = "PLACEHOLDER"
    (run / "run.json").write_text(json.dumps(manifest).replace('"PLACEHOLDER"', text))
    for argv in (
        ["show-manifest", str(run)],
        ["report", str(run)],
        ["compare", str(run), str(run)],
        ["export-preds", str(run)],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and "run.json" in lines[0] and says in lines[0], (argv, err)
