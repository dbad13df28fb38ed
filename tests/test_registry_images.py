"""Harbor tasks whose prebuilt ``docker_image`` lives only in a real registry (Debian's
docker-registry on 127.0.0.1, plain HTTP, scripts/test-registry): pulled with progress and
verified; a missing image in one line naming it, the registry's error and --image-map; the
Dockerfile built instead only under --force-build, and said.

Images are small (static busybox and bash, tests/helpers/registry.py), pushed in the test and
removed from the engine before the harness runs, so every use here is a real pull. All traffic
goes to loopback.
"""

import os
import textwrap
import uuid
from pathlib import Path

import pytest

from tests.conftest import run_harness, run_harness_process
from tests.helpers.registry import forget, has_manifest, publish, registry_address

pytestmark = pytest.mark.timeout(600)

WIDE = {**os.environ, "COLUMNS": "400"}


@pytest.fixture(scope="module")
def client():  # type: ignore[no-untyped-def]
    from harness.runtime.engine import docker_client
    from harness.runtime.images import ensure_sandbox_image

    c = docker_client()
    ensure_sandbox_image(c)  # tasks verify prepares the default image too
    return c


@pytest.fixture(scope="module")
def registry() -> str:
    return registry_address()


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return root


# A Terminal-Bench 2 shape: the image holds the app in /app, the tests read it, the reward goes
# to /logs/verifier/reward.txt.
TASK_FILES = {
    "instruction.md": "Set the version in /app/VERSION to 2.0.\n",
    "solution/solve.sh": "#!/bin/bash\necho 2.0 > /app/VERSION\n",
    "tests/test.sh": """
        #!/bin/bash
        if [ "$(cat /app/VERSION)" = 2.0 ]; then echo 1 > /logs/verifier/reward.txt
        else echo "VERSION is $(cat /app/VERSION)"; echo 0 > /logs/verifier/reward.txt; fi
    """,
}


def task_toml(image: str) -> str:
    return f'version = "1.0"\n[environment]\ndocker_image = "{image}"\ncpus = 1\nmemory_mb = 512\n'


@pytest.mark.slow
def test_a_task_whose_image_is_only_in_the_registry_is_pulled_with_progress_and_verified(
    client, registry: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    ref = f"{registry}/harness-test/version-app:{uuid.uuid4().hex[:8]}"
    publish(client, ref, {"app/VERSION": "1.0\n"})
    assert has_manifest(registry, "harness-test/version-app", ref.rsplit(":", 1)[1])
    task = write(tmp_path / "suite" / "version-app", {**TASK_FILES, "task.toml": task_toml(ref)})
    try:
        done = run_harness("tasks", "verify", str(task.parent), "--runtime", "docker", timeout=600, env=WIDE)
        out = " ".join(done.stdout.split())
        assert done.returncode == 0, done.stdout + done.stderr
        assert "reference solution passes 1/1 (100%); untouched workspace passes 0/1 (0%)" in out, out
        assert f"pulled {ref} (1 layer, " in done.stderr, done.stderr  # the pull, and its summary
        assert client.images.get(ref) is not None
    finally:
        forget(client, ref)


@pytest.mark.slow
def test_a_missing_image_is_one_line_naming_it_the_registry_error_and_image_map(
    client, registry: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    absent = f"{registry}/harness-test/absent:{uuid.uuid4().hex[:8]}"
    refused = "127.0.0.1:9/harness-test/nobody:1"  # nothing listens on the discard port
    suite = tmp_path / "suite"
    write(suite / "a-absent", {**TASK_FILES, "task.toml": task_toml(absent)})
    write(suite / "b-refused", {**TASK_FILES, "task.toml": task_toml(refused)})
    done = run_harness("tasks", "verify", str(suite), "--runtime", "docker", timeout=300, env=WIDE)
    assert done.returncode == 1, done.stdout + done.stderr
    for ref, reason in ((absent, "not in the registry"), (refused, "the registry refused the connection")):
        lines = [line for line in done.stderr.splitlines() if f"cannot pull {ref}" in line]
        assert len(lines) == 1, done.stderr  # said once, on one line
        line = lines[0].split("error): ", 1)[1]
        assert len(line) <= 200, line
        assert reason in line and f"--image-map {ref}=YOUR_REGISTRY/IMAGE" in line, line
        assert f"cannot pull {ref}: {reason}" in " ".join(done.stdout.split())  # the task's row
    # The 600-character engine message is not what the user reads.
    assert "initializing source" not in done.stdout + done.stderr


@pytest.mark.slow
def test_the_dockerfile_is_built_instead_of_the_image_only_under_force_build_and_said(
    client, registry: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    base = f"{registry}/harness-test/base:{uuid.uuid4().hex[:8]}"
    publish(client, base, {"app/VERSION": "1.0\n"})
    absent = f"{registry}/harness-test/never-pushed:{uuid.uuid4().hex[:8]}"
    task = write(
        tmp_path / "suite" / "with-dockerfile",
        {
            **TASK_FILES,
            "task.toml": task_toml(absent),
            "environment/Dockerfile": f"FROM {base}\nWORKDIR /app\n",
        },
    )
    try:
        # Harbor uses the docker_image whenever one is named: no silent fallback to the Dockerfile.
        done = run_harness("tasks", "verify", str(task), "--runtime", "docker", timeout=300, env=WIDE)
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"cannot pull {absent}: not in the registry" in done.stderr
        assert "building environment/Dockerfile" not in done.stderr
        forced = run_harness(
            "tasks", "verify", str(task), "--runtime", "docker", "--force-build", timeout=600, env=WIDE
        )  # fmt: skip
        assert forced.returncode == 0, forced.stdout + forced.stderr
        said = " ".join(forced.stderr.split())
        assert (
            f"building environment/Dockerfile instead of pulling its docker_image {absent} (--force-build)"
            in said
        )
        assert f"pulled {base}" not in said  # the base comes through the build, not a task pull
    finally:
        forget(client, base)


@pytest.mark.slow
def test_runtime_prune_removes_stale_builds_then_everything_it_built_or_pulled_never_what_a_container_uses(
    client, registry: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from tests.helpers.registry import import_image

    session = uuid.uuid4().hex[:8]
    repo = f"localhost/harness-task-prunetest-{session}"
    old, new, busy = f"{repo}:aaaa", f"{repo}:bbbb", f"localhost/harness-task-prunebusy-{session}:cccc"
    import_image(client, old, {"app/v": "1"})
    import_image(client, new, {"app/v": "2"})  # imported later: the task's current build
    import_image(client, busy, {"app/v": "3"})
    pulled = f"{registry}/harness-test/prune-pulled:{session}"
    publish(client, pulled, {"app/VERSION": "1.0\n"})
    task = write(tmp_path / "suite" / "pulled", {**TASK_FILES, "task.toml": task_toml(pulled)})
    done = run_harness("tasks", "verify", str(task), "--runtime", "docker", timeout=300, env=WIDE)
    assert done.returncode == 0 and f"pulled {pulled}" in done.stderr, done.stdout + done.stderr
    container = client.containers.create(busy, command=["sleep", "infinity"])
    mine = f"*{session}*"  # the engine is shared: only this test's images are looked at
    try:
        stale = run_harness("runtime", "prune", "--match", mine, env=WIDE)
        assert stale.returncode == 0, stale.stderr
        assert f"removed {old}" in stale.stdout and "removed 1 stale task images" in stale.stdout, (
            stale.stdout
        )
        kept = {t for i in client.images.list() for t in i.tags}
        assert old not in kept and {new, busy, pulled} <= kept
        dry = run_harness("runtime", "prune", "--all", "--match", mine, "--dry-run", env=WIDE)
        assert f"would remove {new}" in dry.stdout and f"would remove {pulled}" in dry.stdout, dry.stdout
        assert f"kept {busy}: a container uses it" in dry.stdout
        assert {new, pulled} <= {t for i in client.images.list() for t in i.tags}
        everything = run_harness("runtime", "prune", "--all", "--match", mine, env=WIDE)
        assert everything.returncode == 0, everything.stderr
        kept = {t for i in client.images.list() for t in i.tags}
        assert new not in kept and pulled not in kept and busy in kept, everything.stdout
    finally:
        container.remove(force=True)
        for ref in (old, new, busy, pulled):
            forget(client, ref)


@pytest.mark.slow
def test_a_registry_that_asks_for_a_password_gets_the_engine_s_login_and_no_credential_is_printed(
    client, registry: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    import base64
    import json

    from tests.helpers.registry import auth_registry, import_image, push

    address, user, password = auth_registry()
    ref = f"{address}/harness-test/private:{uuid.uuid4().hex[:8]}"
    image = import_image(client, ref, {"app/VERSION": "1.0\n"})
    push(client, ref, {"username": user, "password": password})
    forget(client, image)
    task = write(tmp_path / "suite" / "private", {**TASK_FILES, "task.toml": task_toml(ref)})

    def with_login(secret: str) -> dict[str, str]:
        """The environment of a user who ran `docker login ADDRESS` (its config.json)."""
        home = tmp_path / f"docker-{len(secret)}-{secret[:3]}"
        home.mkdir()
        token = base64.b64encode(f"{user}:{secret}".encode()).decode()
        (home / "config.json").write_text(json.dumps({"auths": {address: {"auth": token}}}))
        return {**WIDE, "DOCKER_CONFIG": str(home)}

    try:
        # Processes of their own: a user's login is read from the environment a harness starts in.
        ok = run_harness_process(
            "tasks", "verify", str(task), "--runtime", "docker", timeout=300, env=with_login(password)
        )
        assert ok.returncode == 0 and f"pulled {ref}" in ok.stderr, ok.stdout + ok.stderr
        forget(client, ref)  # pulled again with the wrong password, next
        wrong = "not-" + password
        denied = run_harness_process(
            "tasks", "verify", str(task), "--runtime", "docker", timeout=300, env=with_login(wrong)
        )
        assert denied.returncode == 1, denied.stdout + denied.stderr
        assert f"cannot pull {ref}: access denied: log in (docker login / podman login)" in denied.stderr
        for done, secret in ((ok, password), (denied, wrong)):
            shown = done.stdout + done.stderr
            token = base64.b64encode(f"{user}:{secret}".encode()).decode()
            assert secret not in shown and token not in shown
    finally:
        forget(client, ref)
