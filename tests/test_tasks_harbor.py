"""Harbor / Terminal-Bench 2 task directories without Docker: Dockerfile layout, container paths, verify, eval."""

import json
import os
import re
from pathlib import Path

import pytest

from harness.evaluate import EvalConfig, run_eval
from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
from harness.results.store import RunStore
from harness.tasks import load_tasks, prepare_workspace, run_solution, run_tests
from harness.tasks.harbor import UnsupportedTask, build_workspace, localize, parse_dockerfile, read_reward
from tests.conftest import REPO, run_harness

HARBOR = REPO / "tests" / "data" / "harbor"


def dockerfile(tmp_path: Path, text: str, files: tuple[str, ...] = ()) -> Path:
    env = tmp_path / "environment"
    env.mkdir(exist_ok=True)
    for name in files:
        (env / name).parent.mkdir(parents=True, exist_ok=True)
        (env / name).write_text(name)
    (env / "Dockerfile").write_text(text)
    return env / "Dockerfile"


def test_dockerfile_layout_continuations_json_form_variables_and_relative_paths(tmp_path: Path) -> None:
    df = dockerfile(
        tmp_path,
        "# syntax=docker/dockerfile:1\n"
        "FROM python:3.12-slim AS base\n"
        "ARG SUB=lib\n"
        "WORKDIR /srv\n"
        "WORKDIR project\n"
        'ENV A="x y" \\\n'
        "    # a comment inside the continuation\n"
        "    B=2\n"
        "ENV LEGACY some words\n"
        "ENV PATH=/srv/bin:$PATH DEFAULTED=${UNSET_IN_TEST:-fallback} PLUS=${A:+set}\n"
        "COPY --chown=1000:1000 src/ ./src/\n"
        'COPY ["one.txt", "/srv/project/${SUB}/one.txt"]\n'
        "ADD two.txt three.txt conf/\n"
        "COPY *.md .\n"
        "COPY env.txt .env\n"
        "EXPOSE 8080\n"
        'CMD ["bash"]\n',
        files=("src/a.py", "one.txt", "two.txt", "three.txt", "README.md", "NOTES.md", "env.txt"),
    )
    layout = parse_dockerfile(df)
    assert layout.base_image == "python:3.12-slim"
    assert layout.workdir == "/srv/project"
    assert layout.env == {
        "A": "x y",
        "B": "2",
        "LEGACY": "some words",
        # Variables the Dockerfile does not set come from this machine, as from the base image.
        "PATH": f"/srv/bin:{os.environ['PATH']}",
        "DEFAULTED": "fallback",
        "PLUS": "set",
    }
    assert [(c.source, c.target, c.into_directory) for c in layout.copies] == [
        ("src/", "src", True),
        ("one.txt", "lib/one.txt", False),
        ("two.txt", "conf", True),
        ("three.txt", "conf", True),
        ("*.md", "", True),
        ("env.txt", ".env", False),
    ]
    ws = build_workspace(layout, df.parent, tmp_path / "ws")
    assert files_in(ws) == [
        ".env",
        "NOTES.md",
        "README.md",
        "conf/three.txt",
        "conf/two.txt",
        "lib/one.txt",
        "src/a.py",
    ]


def files_in(ws: Path) -> list[str]:
    return sorted(str(p.relative_to(ws)) for p in ws.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    ("text", "files", "message"),
    [
        (
            "FROM ubuntu\nWORKDIR /app\nRUN apt-get install -y jq\n",
            (),
            ":3: RUN apt-get install -y jq builds the image",
        ),
        ("FROM a AS b\nFROM c\nWORKDIR /app\n", (), ":2: a second FROM"),
        ("FROM a\nWORKDIR /app\nCOPY --from=b /x .\n", (), ":3: COPY --from"),
        ("FROM a\nWORKDIR /app\nCOPY x.txt /opt/x.txt\n", ("x.txt",), "outside the working directory /app"),
        ("FROM a\nWORKDIR /app\nADD https://e.com/x.tgz .\n", (), "a download or an archive"),
        ("FROM a\nWORKDIR /app\nADD data.tar.gz .\n", ("data.tar.gz",), "a download or an archive"),
        ("FROM a\nWORKDIR /app\nCOPY missing.txt .\n", (), ":3: missing.txt is not in environment/"),
        ("FROM a\nWORKDIR /app\nCOPY ../secret .\n", (), "outside environment/"),
        ("FROM a\nWORKDIR /app\nCOPY $NOPE/x .\n", (), "$NOPE is set nowhere"),
        ("FROM a\nARG SRC\nWORKDIR /app\nCOPY ${SRC}/x .\n", (), ":4: $SRC is set nowhere"),
        ("FROM a\nCOPY x.txt x.txt\n", ("x.txt",), "no WORKDIR"),
        ("WORKDIR /app\n", (), "no FROM line"),
        ("FROM a\nWORKDIR /app\nFROBNICATE x\n", (), "FROBNICATE is not a Dockerfile instruction"),
    ],
)
def test_dockerfiles_that_need_docker_are_refused_with_the_line(
    tmp_path: Path, text: str, files: tuple[str, ...], message: str
) -> None:
    df = dockerfile(tmp_path, text, files)
    with pytest.raises(UnsupportedTask) as err:
        parse_dockerfile(df)
    assert str(df) in str(err.value) and message in str(err.value)


def test_container_paths_are_rewritten_as_whole_components_only(tmp_path: Path) -> None:
    paths = {"/app": tmp_path / "ws", "/tests": tmp_path / "t", "/logs": tmp_path / "l"}
    text = (
        "cd /app && ls /app/src; see /app. Then pytest /tests/test_x.py > /logs/verifier/reward.txt\n"
        "keep: /application /app.py /apps $HOME/app https://example.com/app ./app /var/logs /tests2 '/app'"
    )
    assert localize(text, paths) == (
        f"cd {tmp_path}/ws && ls {tmp_path}/ws/src; see {tmp_path}/ws. Then pytest {tmp_path}/t/test_x.py "
        f"> {tmp_path}/l/verifier/reward.txt\n"
        f"keep: /application /app.py /apps $HOME/app https://example.com/app ./app /var/logs /tests2 '{tmp_path}/ws'"
    )


def test_reward_txt_then_json_reward_then_mean_of_named_rewards(tmp_path: Path) -> None:
    assert read_reward(tmp_path) is None
    (tmp_path / "reward.json").write_text('{"accuracy": 1, "style": 0.5}')
    assert read_reward(tmp_path) == (0.75, "reward.json has no 'reward': mean of accuracy, style = 0.75")
    (tmp_path / "reward.json").write_text('{"reward": 0.25, "style": 1}')
    assert read_reward(tmp_path) == (0.25, "")
    (tmp_path / "reward.txt").write_text("1\n")
    assert read_reward(tmp_path) == (1.0, "")


def test_toml_docker_image_and_compose_are_refused(tmp_path: Path) -> None:
    for name, setup, message in [
        (
            "prebuilt",
            lambda d: (d / "task.toml").write_text('[environment]\ndocker_image = "ghcr.io/x/y:1"\n'),
            "docker_image",
        ),
        (
            "compose",
            lambda d: (d / "environment" / "docker-compose.yaml").write_text("services: {}\n"),
            "docker-compose",
        ),
    ]:
        d = tmp_path / name
        (d / "environment").mkdir(parents=True)
        (d / "tests").mkdir()
        (d / "tests" / "test.sh").write_text("exit 0\n")
        (d / "instruction.md").write_text("x")
        setup(d)
        with pytest.raises(UnsupportedTask, match=message):
            load_tasks(str(d))


@pytest.mark.slow
def test_harbor_tasks_verify_locally_with_container_paths_mapped() -> None:
    # Without the flag, the task that needs its image stops the load and says what and how many.
    refused = run_harness("tasks", "verify", str(HARBOR))
    assert refused.returncode == 2
    err = refused.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "1 of 3 tasks need a Docker image" in err
    assert "jq-report/environment/Dockerfile:3: RUN apt-get update" in err
    assert "pass --skip-unsupported to run the other 2" in err

    done = run_harness("tasks", "verify", str(HARBOR), "--skip-unsupported")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "skipped 1 of 3 tasks that need a Docker image (jq-report)" in " ".join(done.stderr.split())
    assert "reference solution passes 2/2 (100%); untouched workspace passes 0/2 (0%)" in " ".join(
        done.stdout.split()
    )


def test_harbor_task_verification_uses_toml_and_dockerfile_env_and_reward_json(tmp_path: Path) -> None:
    (task,) = [t for t in load_tasks(str(HARBOR), skip_unsupported=True) if t.id == "csv-total"]
    assert task.limits.agent_timeout_s == 300 and task.limits.verify_timeout_s == 60
    ws = prepare_workspace(task, tmp_path / "ws")
    assert (ws / "data" / "orders.csv").is_file() and (ws / "src" / "total.py").is_file()
    assert not (ws / "Dockerfile").exists()
    untouched = run_tests(task, ws)
    assert not untouched.resolved and untouched.reward == 0.0
    assert run_solution(task, ws)[0]
    fixed = run_tests(task, ws)
    assert fixed.resolved and fixed.reward == 1.0
    # ENV from the Dockerfile (container paths made local) and [verifier] env reach test.sh.
    assert f"total.py printed: 42.50 (currency EUR, data {ws.resolve()}/data/orders.csv)" in fixed.output_tail
    # The agent reads the instruction with its own workspace in place of /app.
    instruction = task.instruction_for(ws)
    assert f"python {ws}/src/total.py {ws}/data/orders.csv" in instruction and "/app" not in instruction


@pytest.mark.slow
def test_harbor_task_episode_through_eval_resolves(tmp_path: Path) -> None:
    script = [
        ScriptedResponse(
            content="Writing.",
            tool_calls=[
                ScriptedCall(name="terminal", arguments={"command": "echo 'Hello, world!' > hello.txt"})
            ],
        ),
        ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "done"})]),
    ]
    run = tmp_path / "run"
    with ReplayServer(ReplayScript(model="scripted", responses=script)) as server:
        run_eval(
            EvalConfig(
                runtime="local",
                models=("scripted",),
                tasks=str(HARBOR / "hello-app"),
                base_url=server.base_url,
                run_dir=run,
            )
        )
        first_request = json.dumps(server.requests[0])
    ((key, rec),) = RunStore(run).records().items()
    assert key[1] == "hello-app" and rec.status == "resolved" and rec.reward == 1.0 and rec.verified
    workspace = run / "episodes" / "scripted" / "hello-app" / "seed1" / "workspace"
    assert (workspace / "hello.txt").read_text() == "Hello, world!\n"
    assert f"Create a file called hello.txt in {workspace.resolve()}." in first_request
    assert " in /app" not in first_request


@pytest.mark.parametrize(
    ("text", "env"),
    [
        # One line's values all see the variables from before that line.
        ("ENV abc=hello\nENV abc=bye def=$abc\n", {"abc": "bye", "def": "hello"}),
        ("ARG A B=2\nENV C=$B\n", {"C": "2"}),
        (
            "ENV X='$HOME' Y=\\$HOME Z=\"$HOME\"\n",
            {"X": "$HOME", "Y": "$HOME", "Z": os.environ.get("HOME", "")},
        ),
        ('ENV S="x y"\nENV T=$S U=${S:+set}\n', {"S": "x y", "T": "x y", "U": "set"}),
        ("ARG HOME\nENV H=$HOME\n", {"H": ""}),  # a build arg, not this machine's HOME
        ("ENV P=/a:\\\n/b\n", {"P": "/a:/b"}),
    ],
)
def test_dockerfile_env_words_quotes_and_substitution_as_docker(tmp_path: Path, text: str, env: dict) -> None:
    assert parse_dockerfile(dockerfile(tmp_path, "FROM a\nWORKDIR /app\n" + text)).env == env


def test_dockerfile_quoted_workdir_blank_continuation_absolute_source_and_glob_into_directory(
    tmp_path: Path,
) -> None:
    df = dockerfile(
        tmp_path,
        'FROM a\nWORKDIR "/app"\nCOPY a.txt \\\n\n    /app/x/\nCOPY /b.txt .\nCOPY *.md /app/docs\n',
        files=("a.txt", "b.txt", "one.md", "two.md"),
    )
    layout = parse_dockerfile(df)
    assert layout.workdir == "/app"
    ws = build_workspace(layout, df.parent, tmp_path / "ws")
    assert files_in(ws) == [
        "b.txt",
        "docs/one.md",
        "docs/two.md",
        "x/a.txt",
    ]


@pytest.mark.parametrize(
    ("text", "files", "message"),
    [
        ("COPY --exclude=*.md . .\n", ("a.md",), "COPY --exclude=*.md is not replayed here"),
        ("COPY --parents sub/a.txt ./\n", ("sub/a.txt",), "COPY --parents is not replayed here"),
        ("COPY . .\n", (".dockerignore",), "with a .dockerignore beside the Dockerfile"),
        ('ENV MSG="oops\n', (), 'unterminated " quote'),
    ],
)
def test_copy_options_and_inputs_not_replayed_are_refused(
    tmp_path: Path, text: str, files: tuple[str, ...], message: str
) -> None:
    with pytest.raises(UnsupportedTask, match=re.escape(message)):
        parse_dockerfile(dockerfile(tmp_path, "FROM a\nWORKDIR /app\n" + text, files))


def test_file_urls_to_the_working_directory_are_rewritten(tmp_path: Path) -> None:
    assert localize("open file:///app/index.html", {"/app": tmp_path}) == f"open file://{tmp_path}/index.html"
