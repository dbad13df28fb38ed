"""Harbor's task.toml fields, read with Harbor's own models (the harbor package) and honoured in the
task's containers, or the task refused in one line naming the field.

The fixtures (tests/data/harbor-fields, one per field, in the shapes of Harbor's example tasks)
are built FROM ubuntu:24.04 mapped to a small static busybox + bash image. Networks are checked
from what the engine reports for each container; nothing here sends traffic anywhere but to a
container's own loopback.
"""

import os
import textwrap
from pathlib import Path

import pytest

from tests.conftest import DATA, run_harness
from tests.helpers.registry import import_image

pytestmark = pytest.mark.timeout(600)

FIELDS = DATA / "harbor-fields"
BUSYBOX = "localhost/harness-test-busybox:1"
MAP = ("--image-map", f"ubuntu:24.04={BUSYBOX}")
WIDE = {**os.environ, "COLUMNS": "400"}


@pytest.fixture(scope="module")
def client():  # type: ignore[no-untyped-def]
    from docker.errors import NotFound

    from harness.runtime.engine import docker_client
    from harness.runtime.images import ensure_sandbox_image

    c = docker_client()
    ensure_sandbox_image(c)
    try:
        c.images.get(BUSYBOX)
    except NotFound:  # the same content for every checkout: made once, kept
        import_image(c, BUSYBOX, {}, workdir="/")
    return c


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return root


@pytest.mark.slow
def test_each_field_fixture_passes_with_its_reference_and_fails_untouched(client) -> None:  # type: ignore[no-untyped-def]
    done = run_harness("tasks", "verify", str(FIELDS), "--runtime", "docker", *MAP, timeout=600, env=WIDE)
    out = " ".join(done.stdout.split())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reference solution passes 5/5 (100%); untouched workspace passes 0/5 (0%)" in out, out
    said = " ".join(
        done.stderr.split()
    )  # the one field honoured as Harbor's docker environment does: not at all
    assert "note: [environment] storage_mb of 1 task(s) is not enforced" in said, said


@pytest.mark.slow
def test_build_timeout_sec_ends_a_build_that_takes_longer(client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    task = write(
        tmp_path / "suite" / "slow-build",
        {
            "task.toml": 'version = "1.0"\n[environment]\nbuild_timeout_sec = 3.0\n',
            "instruction.md": "Do it.\n",
            "environment/Dockerfile": f"FROM ubuntu:24.04\nRUN sleep 20 && echo {os.urandom(4).hex()} > /built\n",
            "solution/solve.sh": "#!/bin/bash\ntrue\n",
            "tests/test.sh": "#!/bin/bash\ntrue\n",
        },
    )
    done = run_harness("tasks", "verify", str(task), "--runtime", "docker", *MAP, timeout=120, env=WIDE)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "took longer than [environment] build_timeout_sec = 3" in " ".join(done.stdout.split())


def _runtime(client, tasks, tmp_path: Path, network: str = "task"):  # type: ignore[no-untyped-def]
    from harness.runtime.container import ContainerRuntime
    from harness.runtime.task_images import parse_image_map

    runtime = ContainerRuntime(client, image_map=parse_image_map([MAP[1]]), network=network)  # type: ignore[arg-type]
    runtime.prepare(tmp_path / "run", tasks)
    return runtime


def _mode(container) -> str:  # type: ignore[no-untyped-def]
    container.reload()
    return str(container.attrs["HostConfig"]["NetworkMode"])


@pytest.mark.slow
def test_network_per_phase_as_the_engine_reports_it_and_network_none_overrides_with_a_note(
    client, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from harness.tasks import load_tasks

    (split,) = load_tasks(str(FIELDS / "net-split"), images=True)  # [agent] no-network, verifier public
    (public,) = load_tasks(str(FIELDS / "workdir"), images=True)  # Harbor's default: public
    runtime = _runtime(client, [split, public], tmp_path)
    seen = {}
    for task in (split, public):
        sandbox = runtime.open(task, tmp_path / task.id, f"verify/{task.id}/net", agent=False)
        try:
            agent = _mode(sandbox.container)
            assert sandbox.run_solution()[0]
            result = sandbox.verify()
            seen[task.id] = (agent, result.network, result.resolved)
        finally:
            sandbox.close()
    assert seen == {"net-split": ("none", "bridge", True), "workdir": ("bridge", "bridge", True)}

    # --network none: no phase gets network, and the run says which task asked for it.
    done = run_harness(
        "tasks", "verify", str(FIELDS / "net-split"), "--runtime", "docker", "--network", "none", *MAP,
        timeout=300, env=WIDE,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr  # the verifier had no interface but lo
    notes = [line for line in done.stderr.splitlines() if line.startswith("note: net-split")]
    assert len(notes) == 1 and "--network none denies the verifier phase" in notes[0], done.stderr
    assert "verifier's besides lo: ''" in " ".join(done.stdout.split())


@pytest.mark.slow
def test_environment_env_templates_resolve_here_and_never_appear_in_the_output(
    client, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    secret = "s3cr3t-" + os.urandom(4).hex()
    task = write(
        tmp_path / "suite" / "env-task",
        {
            "task.toml": """
                version = "1.0"
                [environment]
                env = { GREETING = "${HARNESS_TEST_GREETING:-hello}", API_TOKEN = "${HARNESS_TEST_TOKEN}" }
            """,
            "instruction.md": "Write $GREETING to /app/greeting.txt.\n",
            "environment/Dockerfile": "FROM ubuntu:24.04\nWORKDIR /app\n",
            "solution/solve.sh": '#!/bin/bash\necho "$GREETING" > /app/greeting.txt\n',
            "tests/test.sh": """
                #!/bin/bash
                if [ "$(cat /app/greeting.txt 2>/dev/null)" = hello ] && [ -n "$API_TOKEN" ] && [ "${#API_TOKEN}" = 15 ]; then
                  echo 1 > /logs/verifier/reward.txt
                else echo 0 > /logs/verifier/reward.txt; fi
            """,
        },
    )
    # a host value the task may have only when named: GREETING keeps its default although set here
    env = {**WIDE, "HARNESS_TEST_TOKEN": secret, "HARNESS_TEST_GREETING": "from-the-host"}
    named = ("--task-env", "HARNESS_TEST_TOKEN")
    done = run_harness(
        "tasks", "verify", str(task), "--runtime", "docker", *MAP, *named, timeout=300, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert secret not in done.stdout + done.stderr
    unnamed = run_harness("tasks", "verify", str(task), "--runtime", "docker", *MAP, timeout=120, env=env)
    lines = unnamed.stderr.strip().splitlines()
    assert unnamed.returncode == 2 and len(lines) == 1, unnamed.stderr
    assert (
        "API_TOKEN = ${HARNESS_TEST_TOKEN} asks for this machine's HARNESS_TEST_TOKEN: pass it with --task-env"
        in lines[0]
    )
    missing = run_harness(
        "tasks", "verify", str(task), "--runtime", "docker", *MAP, *named, timeout=120, env=WIDE
    )
    lines = missing.stderr.strip().splitlines()
    assert missing.returncode == 2 and len(lines) == 1, missing.stderr
    assert "[environment] env: Environment variable 'HARNESS_TEST_TOKEN' not found" in lines[0]


REFUSALS = {
    "unknown-field": (
        '[environment]\ndocker_imag = "ubuntu:24.04"\n',
        "[environment] docker_imag: not a field of Harbor's task.toml",
    ),
    "typo-table": ("[enviroment]\ncpus = 1\n", "enviroment: not a field of Harbor's task.toml"),
    "bad-value": ('[agent]\nnetwork_mode = "offline"\n', "[agent] network_mode: Input should be"),
    "gpus": ("[environment]\ngpus = 1\n", "[environment] gpus: 1: the harness gives task containers no GPUs"),
    "mcp": (
        '[[environment.mcp_servers]]\nname = "fs"\ntransport = "stdio"\ncommand = "mcp-fs"\n',
        "[[environment.mcp_servers]]: MCP servers are not given",
    ),
    "agent-user": ('[agent]\nuser = "app"\n', "[agent] user: 'app'"),
}


def test_a_field_the_harness_cannot_honour_or_does_not_know_refuses_the_task_in_one_line_naming_it(
    tmp_path: Path,
) -> None:
    from harness.tasks import load_suite

    for name, (toml, _) in REFUSALS.items():
        write(
            tmp_path / "suite" / name,
            {
                "task.toml": 'version = "1.0"\n' + toml,
                "instruction.md": "Do it.\n",
                "environment/Dockerfile": "FROM ubuntu:24.04\nWORKDIR /app\n",
                "tests/test.sh": "exit 0\n",
            },
        )
    suite = load_suite(str(tmp_path / "suite"), images=True)
    assert suite.tasks == []
    reasons = {s.id: s.reason for s in suite.skipped}
    for name, (_, needle) in REFUSALS.items():
        assert needle in reasons[name] and "\n" not in reasons[name], (name, reasons[name])


@pytest.mark.slow
def test_an_allowlist_is_refused_unless_network_decides_and_compose_and_a_step_s_user_in_one_line(
    client, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    allow = write(
        tmp_path / "suite" / "allowlist",
        {
            "task.toml": 'version = "1.0"\n[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n',
            "instruction.md": "Write ok to /app/ok.\n",
            "environment/Dockerfile": "FROM ubuntu:24.04\nWORKDIR /app\n",
            "solution/solve.sh": "#!/bin/bash\necho ok > /app/ok\n",
            "tests/test.sh": '#!/bin/bash\n[ "$(cat /app/ok)" = ok ]\n',
        },
    )
    done = run_harness("tasks", "verify", str(allow), "--runtime", "docker", *MAP, timeout=300, env=WIDE)
    assert done.returncode == 1, done.stdout + done.stderr
    refused = [line for line in done.stderr.splitlines() if "refused" in line]
    assert len(refused) == 1 and '[environment] network_mode = "allowlist" (1 hosts)' in refused[0], (
        done.stderr
    )
    assert "--network none or --network public decides" in refused[0]
    decided = run_harness(
        "tasks", "verify", str(allow), "--runtime", "docker", "--network", "none", *MAP, timeout=300, env=WIDE
    )  # fmt: skip
    assert decided.returncode == 0, decided.stdout + decided.stderr

    from harness.tasks import load_suite

    write(
        tmp_path / "other" / "compose",
        {
            "task.toml": 'version = "1.0"\n',
            "instruction.md": "Do it.\n",
            "environment/docker-compose.yaml": "services:\n  main:\n    build: .\n",
            "environment/Dockerfile": "FROM ubuntu:24.04\n",
            "tests/test.sh": "exit 0\n",
        },
    )
    write(
        tmp_path / "other" / "steps",
        {
            "task.toml": 'version = "1.0"\n[[steps]]\nname = "one"\n[[steps]]\nname = "two"\n[steps.agent]\nuser = "app"\n',
            "environment/Dockerfile": "FROM ubuntu:24.04\n",
            "steps/one/instruction.md": "One.\n",
            "steps/one/tests/test.sh": "exit 0\n",
            "steps/two/instruction.md": "Two.\n",
            "steps/two/tests/test.sh": "exit 0\n",
        },
    )
    reasons = {s.id: s.reason for s in load_suite(str(tmp_path / "other"), images=True).skipped}
    assert "docker-compose environments are not run" in reasons["compose"]
    # multi-step tasks run (test_harbor_steps.py); a step field the harness cannot honour is named
    assert "[[steps]] 'two' agent.user: 'app'" in reasons["steps"] and "\n" not in reasons["steps"]
