"""Harbor / Terminal-Bench 2 tasks in their own images on the real engine: `harness tasks verify
--runtime docker` (oracle then tests in one container, tests alone in another), `harness eval`
driven by the replay server, [environment] limits, --image-map, and bad input.

The fixtures are modelled on real Terminal-Bench 2 tasks (WORKDIR /app, RUN steps that create
files, COPY outside the working directory, a prebuilt docker_image, reward.json, a multi-step
task, workspace/ beside a Dockerfile). Their Dockerfiles are built FROM the sandbox image (no
image registry is reachable here), so they are written at test time; image builds are cached by
content hash, so a second run of this module builds nothing. A missing engine fails these tests.
"""

import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.evaluate import EvalConfig, run_eval
from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
from harness.results.store import RunStore
from harness.runtime.base import SandboxConfig
from harness.runtime.container import LABEL
from tests.conftest import run_harness

pytestmark = pytest.mark.timeout(900)

PREBUILT = "localhost/harness-test-prebuilt:1"
WIDE = {**os.environ, "COLUMNS": "400"}  # table cells on one line each
MIRROR = "mirror.invalid/"  # a registry that does not exist: --image-map sends it to localhost/


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


REWARD_JSON_TEST = """
#!/usr/bin/env bash
# Terminal-Bench 2 style: the verifier writes its reward as JSON and exits 0 either way.
if [ "$(cat /app/count.txt 2>/dev/null)" = 4 ] && [ -f /etc/notes/config.ini ]; then
  echo '{"reward": 1.0}' > /logs/verifier/reward.json
else
  echo "count.txt holds '$(cat /app/count.txt 2>/dev/null)', expected 4"
  echo '{"reward": 0.0}' > /logs/verifier/reward.json
fi
"""


def make_suite(root: Path, base: str) -> Path:
    """The suite of Harbor fixtures (two of them deliberately not runnable)."""
    suite = root / "tb2"
    write(
        suite / "a-notes",
        {
            "instruction.md": "Count the words of the files in /app/notes whose suffix /etc/notes/config.ini "
            "names and write the number to /app/count.txt.\n",
            "task.toml": """
                version = "1.0"
                [metadata]
                difficulty = "easy"
                [agent]
                timeout_sec = 120.0
                [verifier]
                timeout_sec = 60.0
                [environment]
                build_timeout_sec = 600.0
                cpus = 1
                memory = "1G"
                storage = "10G"
            """,
            "environment/Dockerfile": f"""
                FROM {base}
                WORKDIR /app
                COPY config.ini /etc/notes/config.ini
                RUN mkdir -p /app/notes \\
                 && printf 'alpha beta\\ngamma\\n' > /app/notes/a.txt \\
                 && printf 'delta\\n' > /app/notes/b.txt && printf 'not counted\\n' > /app/notes/c.md
            """,
            "environment/config.ini": "[notes]\nsuffix = .txt\n",
            "solution/solve.sh": "#!/usr/bin/env bash\ncat notes/*.txt | wc -w > count.txt\n",
            "tests/test.sh": REWARD_JSON_TEST,
        },
    )
    write(
        suite / "b-prebuilt",
        {
            "instruction.md": "Set the version in /srv/app/VERSION to 2.0.\n",
            "task.toml": f"""
                version = "1.0"
                [environment]
                docker_image = "{PREBUILT}"
                cpus = 1
                memory_mb = 1536
                [solution.env]
                NEW_VERSION = "2.0"
            """,
            "solution/solve.sh": '#!/usr/bin/env bash\necho "$NEW_VERSION" > VERSION\n',
            "tests/test.sh": """
                #!/usr/bin/env bash
                if [ "$(cat /srv/app/VERSION)" = 2.0 ]; then echo 1 > /logs/verifier/reward.txt
                else echo 0 > /logs/verifier/reward.txt; fi
            """,
        },
    )
    write(
        suite / "c-workspace",
        {
            "instruction.md": "Fix add() in /app/calc.py.\n",
            "task.toml": 'version = "1.0"\n',
            "environment/Dockerfile": f"FROM {base}\nWORKDIR /app\nCOPY workspace/ /app/\n",
            "environment/workspace/calc.py": "def add(a, b):\n    return a - b\n",
            "solution/solve.sh": "#!/usr/bin/env bash\nsed -i 's/a - b/a + b/' /app/calc.py\n",
            "tests/test.sh": '#!/usr/bin/env bash\ncd /app && python3 -c "import calc; assert calc.add(2, 3) == 5"\n',
        },
    )
    write(
        suite / "d-multi-step",
        {
            "task.toml": """
                version = "1.0"
                multi_step_reward_strategy = "mean"
                [[steps]]
                name = "01-create"
                [[steps]]
                name = "02-extend"
            """,
            "environment/Dockerfile": f"FROM {base}\nWORKDIR /app\n",
            "steps/01-create/instruction.md": "Create /app/a.txt.\n",
            "steps/01-create/tests/test.sh": "#!/usr/bin/env bash\ntest -f /app/a.txt\n",
            "steps/02-extend/instruction.md": "Create /app/b.txt.\n",
            "steps/02-extend/tests/test.sh": "#!/usr/bin/env bash\ntest -f /app/a.txt && test -f /app/b.txt\n",
            "steps/01-create/solution/solve.sh": "#!/usr/bin/env bash\ntouch /app/a.txt\n",
            "steps/02-extend/solution/solve.sh": "#!/usr/bin/env bash\ntouch /app/b.txt\n",
        },
    )
    write(
        suite / "e-broken",
        {
            "instruction.md": "Work in progress.\n",
            "task.toml": "[environment\ncpus = 1\n",
            "environment/Dockerfile": f"FROM {base}\n",
            "tests/test.sh": "exit 0\n",
        },
    )
    # A nested suite (tasks/<category>/<task>), FROM an image named by a mirror registry.
    mirrored = base.replace("localhost/", MIRROR, 1)
    write(
        suite / "extra" / "f-mapped",
        {
            "instruction.md": "Write 'ok' to /app/status.\n",
            "environment/Dockerfile": f"FROM {mirrored}\nWORKDIR /app\nRUN echo pending > /app/status\n",
            "solution/solve.sh": "#!/usr/bin/env bash\necho ok > status\n",
            "tests/test.sh": '#!/usr/bin/env bash\n[ "$(cat /app/status)" = ok ]\n',
        },
    )
    return suite


@pytest.fixture(scope="module")
def client():  # type: ignore[no-untyped-def]
    from harness.runtime.engine import docker_client
    from harness.runtime.images import ensure_sandbox_image

    c = docker_client()
    ensure_sandbox_image(c)
    return c


@pytest.fixture(scope="module")
def base(client) -> str:  # type: ignore[no-untyped-def]
    from harness.runtime.images import sandbox_image_ref

    return sandbox_image_ref()


@pytest.fixture(scope="module")
def prebuilt(client, base: str, tmp_path_factory: pytest.TempPathFactory) -> str:  # type: ignore[no-untyped-def]
    """The docker_image of b-prebuilt, built here as a task author's registry would hold it."""
    ctx = tmp_path_factory.mktemp("prebuilt")
    (ctx / "Dockerfile").write_text(
        f"FROM {base}\nRUN mkdir -p /srv/app && echo 1.0 > /srv/app/VERSION\nWORKDIR /srv/app\n"
    )
    client.images.build(path=str(ctx), tag=PREBUILT, rm=True)
    return PREBUILT


@pytest.fixture(scope="module")
def suite(base: str, prebuilt: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_suite(tmp_path_factory.mktemp("harbor"), base)


# The tasks this module's suites hold: the verification containers it may count and remove. The
# other worker's verifications run in the same engine meanwhile; theirs are not this module's.
OWN_TASKS = frozenset(
    {"a-notes", "b-prebuilt", "c-workspace", "d-multi-step", "e-broken", "f-mapped", "a-build-fails",
     "b-no-image", "c-no-tests", "d-terminal-bench-1", "e-good", "g-no-tar", "h-planted"}
)  # fmt: skip


def verify_containers(client) -> list:  # type: ignore[no-untyped-def]
    """This module's verification containers (labelled ``verify/<task id>/<role>``)."""
    return [
        c
        for c in client.containers.list(all=True, filters={"label": LABEL})
        if (label := str(c.labels.get(LABEL, ""))).startswith("verify/")
        and label.removeprefix("verify/").rsplit("/", 1)[0] in OWN_TASKS
    ]


def table(stdout: str) -> str:
    return " ".join(stdout.split())


@pytest.mark.slow
def test_tasks_verify_in_their_images_reference_passes_untouched_fails_broken_listed(
    client, suite: Path
) -> None:  # type: ignore[no-untyped-def]
    done = run_harness(
        "tasks", "verify", str(suite), "--runtime", "docker", "--image-map", f"{MIRROR}=localhost/",
        "--concurrency", "2", timeout=900, env=WIDE,
    )  # fmt: skip
    out = table(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reference solution passes 5/5 (100%); untouched workspace passes 0/5 (0%); 1 skipped" in out, out
    for task in ("a-notes", "b-prebuilt", "c-workspace", "d-multi-step", "f-mapped"):
        assert task in out
    assert "e-broken" in out and "malformed TOML" in out
    assert verify_containers(client) == []  # every container removed


@pytest.mark.slow
def test_the_oracle_runs_as_root_in_workdir_with_solution_env_and_a_failing_one_says_why(
    client, suite: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from harness.tasks.oracle import verify_suite

    # A reference solution that is wrong, and one whose solve.sh fails: the reason is in the row.
    wrong = tmp_path / "wrong"
    import shutil

    shutil.copytree(suite / "a-notes", wrong / "a-notes")
    (wrong / "a-notes" / "solution" / "solve.sh").write_text("echo 5 > count.txt; id -un; pwd\n")
    shutil.copytree(suite / "b-prebuilt", wrong / "b-prebuilt")
    (wrong / "b-prebuilt" / "solution" / "solve.sh").write_text("echo 'cannot reach pypi.org' >&2; exit 7\n")
    report = verify_suite(str(wrong), runtime="docker")
    checks = {c.task_id: c for c in report.checks}
    notes = checks["a-notes"]
    assert notes.status == "invalid" and notes.reference is not None and notes.reference.reward == 0.0
    assert "tests fail with the reference solution" in notes.detail
    assert "count.txt holds '5', expected 4" in notes.detail
    failed = checks["b-prebuilt"]
    assert failed.status == "invalid" and failed.reference is None
    assert "solve.sh failed" in failed.detail and "cannot reach pypi.org" in failed.detail
    assert "exited with 7" in failed.detail
    assert verify_containers(client) == []


@pytest.mark.slow
def test_environment_cpus_and_memory_are_the_task_s_container_limits(
    client, suite: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from harness.runtime.base import ContainerLimits
    from harness.runtime.container import ContainerRuntime
    from harness.tasks import load_tasks

    tasks = {t.id: t for t in load_tasks(str(suite), images=True)}
    assert tasks["a-notes"].limits.cpus == 1 and tasks["a-notes"].limits.memory_gib == 1.0
    assert tasks["b-prebuilt"].limits.memory_gib == 1.5
    assert tasks["b-prebuilt"].limits.agent_timeout_s == 900  # Harbor sets none: the harness default
    assert tasks["a-notes"].limits.agent_timeout_s == 120 and tasks["a-notes"].limits.verify_timeout_s == 60
    runtime = ContainerRuntime(client, ContainerLimits(cpus=2, memory_gib=3, pids=256))
    picked = [tasks["a-notes"], tasks["b-prebuilt"], tasks["c-workspace"]]
    runtime.prepare(tmp_path / "run", picked)
    seen = {}
    for task in picked:
        sandbox = runtime.open(task, tmp_path / task.id, f"verify/{task.id}/limits")
        try:
            host = sandbox.container.attrs["HostConfig"]
            seen[task.id] = (host["NanoCpus"] / 1e9, host["Memory"] / 2**30, host["PidsLimit"])
        finally:
            sandbox.close()
    # The task's own [environment] over the run's --sandbox-* defaults; unset ones keep those.
    assert seen == {"a-notes": (1.0, 1.0, 256), "b-prebuilt": (1.0, 1.5, 256), "c-workspace": (2.0, 3.0, 256)}


@pytest.mark.slow
def test_eval_resolves_the_fixtures_inside_their_containers(client, suite: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    def terminal(command: str) -> ScriptedResponse:
        return ScriptedResponse(
            content="Running.", tool_calls=[ScriptedCall(name="terminal", arguments={"command": command})]
        )

    finish = ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "done"})])
    script = [  # load order: a-notes, b-prebuilt, c-workspace, d-multi-step (two runs), f-mapped
        terminal("cat notes/*.txt | wc -w > count.txt; pwd; cat /etc/notes/config.ini"),
        finish,
        terminal("echo 2.0 > /srv/app/VERSION && pwd"),
        finish,
        terminal("sed -i 's/a - b/a + b/' calc.py && ls /app"),
        finish,
        terminal("touch /app/a.txt"),  # a new OpenHands conversation per step, one container
        finish,
        terminal("touch /app/b.txt"),
        finish,
        terminal("echo ok > /app/status"),
        finish,
    ]
    run = tmp_path / "run"
    with ReplayServer(ReplayScript(model="scripted", responses=script)) as server:
        run_eval(
            EvalConfig(
                runtime="docker",
                models=("scripted",),
                tasks=str(suite),
                base_url=server.base_url,
                run_dir=run,
                sandbox=SandboxConfig(image_map=(f"{MIRROR}=localhost/",)),
                concurrency=1,  # one in-order script: one episode at a time, whatever auto picks
            )
        )
    recs = {k[1]: r for k, r in RunStore(run).records().items()}
    assert {t: (r.status, r.reward) for t, r in recs.items()} == {
        t: ("resolved", 1.0) for t in ("a-notes", "b-prebuilt", "c-workspace", "d-multi-step", "f-mapped")
    }
    obs = [
        json.loads(line).get("observation") or ""
        for line in (run / "trajectories" / "scripted" / "a-notes" / "seed1.jsonl").read_text().splitlines()
    ]
    assert "/app" in obs[0] and "suffix = .txt" in obs[0]  # the image's WORKDIR, a file COPY'd outside it
    ws_obs = (run / "trajectories" / "scripted" / "c-workspace" / "seed1.jsonl").read_text()
    assert "calc.py" in ws_obs and str(suite) not in ws_obs  # workspace/ reached /app, no host path


@pytest.fixture(scope="module")
def bad_suite(base: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bad") / "bad"
    ok_task = {
        "instruction.md": "Write 'ok' to /app/status.\n",
        "environment/Dockerfile": f"FROM {base}\nWORKDIR /app\n",
        "solution/solve.sh": "#!/usr/bin/env bash\necho ok > status\n",
        "tests/test.sh": '#!/usr/bin/env bash\n[ "$(cat /app/status 2>/dev/null)" = ok ]\n',
    }
    write(
        root / "a-build-fails",
        {**ok_task, "environment/Dockerfile": f"FROM {base}\nRUN echo building the broken one && exit 3\n"},
    )
    write(
        root / "b-no-image",
        {
            **{k: v for k, v in ok_task.items() if not k.startswith("environment/")},
            "task.toml": '[environment]\ndocker_image = "registry.invalid/nobody/none:1"\n',
        },
    )
    write(root / "c-no-tests", {k: v for k, v in ok_task.items() if not k.startswith("tests/")})
    write(
        root / "d-terminal-bench-1",
        {"task.yaml": "instruction: |\n  Do it.\ndifficulty: easy\n", "run-tests.sh": "pytest\n"},
    )
    write(root / "e-good", ok_task)
    return root


@pytest.mark.slow
def test_bad_input_build_failure_missing_image_no_tests_tb1_each_its_line_and_the_rest_run(
    client, bad_suite: Path
) -> None:  # type: ignore[no-untyped-def]
    done = run_harness("tasks", "verify", str(bad_suite), "--runtime", "docker", timeout=600, env=WIDE)
    assert done.returncode == 1, done.stdout + done.stderr
    out = table(done.stdout)
    assert "reference solution passes 1/3 (33%); untouched workspace passes 0/3 (0%); 2 skipped" in out, out
    assert "image build failed" in out and "building the broken one" in out
    assert "cannot pull registry.invalid/nobody/none:1: " in out
    assert "--image-map registry.invalid/nobody/none:1=YOUR_REGISTRY/IMAGE" in table(done.stderr)
    assert "missing tests/test.sh" in out
    assert "a Terminal-Bench 1 task (task.yaml)" in out and "harbor tasks migrate" in out
    assert verify_containers(client) == []


@pytest.mark.slow
def test_a_docker_image_that_cannot_be_had_ends_its_episodes_with_one_line_naming_image_map(
    client, bad_suite: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from harness.runtime.container import ContainerRuntime
    from harness.runtime.task_images import TaskImageError
    from harness.tasks import load_tasks

    (task,) = load_tasks(str(bad_suite / "b-no-image"), images=True)
    runtime = ContainerRuntime(client)
    runtime.prepare(tmp_path / "run", [task])
    with pytest.raises(TaskImageError) as err:
        runtime.open(task, tmp_path / "ep", "ep")
    message = str(err.value)
    assert "\n" not in message and "--image-map" in message


@pytest.mark.slow
def test_a_single_broken_or_tb1_task_given_directly_errors_in_one_line(bad_suite: Path, suite: Path) -> None:
    for path, needle in [
        (bad_suite / "d-terminal-bench-1", "Terminal-Bench 1 task (task.yaml)"),
        (suite / "e-broken", "malformed TOML"),
        (suite / "d-multi-step", "multi-step task"),
    ]:
        done = run_harness("tasks", "verify", str(path), "--runtime", "local")
        assert done.returncode == 2, done.stdout + done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], done.stderr


@pytest.mark.slow
def test_under_local_a_dockerfile_beside_workspace_is_refused_as_needing_its_image(suite: Path) -> None:
    from harness.tasks import load_suite

    loaded = load_suite(str(suite))
    skipped = {s.id: s for s in loaded.skipped}
    assert skipped["c-workspace"].needs_image and "environment/workspace/" in skipped["c-workspace"].reason
    assert not [t for t in loaded.tasks if t.id == "c-workspace"]


@pytest.mark.slow
def test_image_map_rewrites_from_lines_and_docker_image_refs() -> None:
    from harness.errors import HarnessError
    from harness.runtime.task_images import base_images, map_image, parse_image_map, rewrite_from

    mapping = parse_image_map(
        ["python:3.12-slim=mirror.local/py:3.12", "docker.io/library/=mirror.local/lib/"]
    )
    assert map_image("python:3.12-slim", mapping) == "mirror.local/py:3.12"
    assert map_image("python:3.13-slim", mapping) == "python:3.13-slim"  # exact entries are exact
    assert map_image("docker.io/library/ubuntu:24.04", mapping) == "mirror.local/lib/ubuntu:24.04"
    text = "FROM --platform=linux/amd64 python:3.12-slim AS build\nRUN make\nfrom build\n"
    assert (
        rewrite_from(text, mapping)
        == "FROM --platform=linux/amd64 mirror.local/py:3.12 AS build\nRUN make\nfrom build\n"
    )
    assert base_images(text) == ["python:3.12-slim"]
    with pytest.raises(HarnessError, match="--image-map 'nothing': write FROM=TO"):
        parse_image_map(["nothing"])


@pytest.fixture(autouse=True)
def _no_leftovers(client) -> Iterator[None]:  # type: ignore[no-untyped-def]
    yield
    for c in verify_containers(client):
        c.remove(force=True)


@pytest.mark.slow
def test_rewards_come_from_what_the_tests_wrote_even_without_tar_and_never_from_planted_files(
    client, base: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from harness.tasks.oracle import verify_suite

    reward_by_state = (
        "#!/usr/bin/env bash\n"
        'if [ "$(cat /app/state 2>/dev/null)" = done ]; then r=1.0; else r=0.0; fi\n'
        'echo "{\\"reward\\": $r}" > /logs/verifier/reward.json\n'  # exits 0 either way
    )
    suite = tmp_path / "suite"
    # The verifier's files normally come back as a tar the container writes; an image without
    # tar still gets its reward read (the engine's copy instead).
    write(
        suite / "g-no-tar",
        {
            "instruction.md": "Write 'done' to /app/state.\n",
            "environment/Dockerfile": f"FROM {base}\nWORKDIR /app\nRUN rm -f /usr/bin/tar /bin/tar\n",
            "solution/solve.sh": "#!/usr/bin/env bash\necho done > state\n",
            "tests/test.sh": reward_by_state,
        },
    )
    # What ran before the tests (the agent; here the reference solution) plants a reward and
    # tests of its own: the real tests replace both.
    write(
        suite / "h-planted",
        {
            "instruction.md": "Write 'done' to /app/state.\n",
            "environment/Dockerfile": f"FROM {base}\nWORKDIR /app\nRUN echo todo > /app/state\n",
            "solution/solve.sh": "#!/usr/bin/env bash\nmkdir -p /logs/verifier /tests\n"
            "echo 1 > /logs/verifier/reward.txt\necho '{\"reward\": 1}' > /logs/verifier/reward.json\n"
            "printf 'exit 0\\n' > /tests/test.sh\n",
            "tests/test.sh": reward_by_state,
        },
    )
    checks = {c.task_id: c for c in verify_suite(str(suite), runtime="docker").checks}
    no_tar = checks["g-no-tar"]
    assert no_tar.status == "valid", no_tar
    assert no_tar.reference is not None and no_tar.reference.reward == 1.0
    assert no_tar.untouched is not None and no_tar.untouched.reward == 0.0
    planted = checks["h-planted"]
    assert planted.reference is not None and planted.reference.reward == 0.0, planted
    assert planted.status == "invalid" and "tests fail with the reference solution" in planted.detail
    assert verify_containers(client) == []
