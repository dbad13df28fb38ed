"""The container engine and the default sandbox image, against the real engine.

scripts/bootstrap --tests provides the engine (Docker, or podman started by the harness) and
builds the image once; a missing engine fails these tests, it never skips them.
"""

import contextlib
import importlib.metadata
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from harness.errors import HarnessError
from harness.runtime import engine as engine_mod
from harness.runtime.engine import docker_client, engine, engine_answers
from harness.runtime.images import AGENT_PYTHON, ensure_sandbox_image, sandbox_image_ref

TEST_LABEL = {"harness.test": "1"}
BOOTSTRAP_HINT = "(scripts/bootstrap --tests installs an engine and builds the image)"


@pytest.fixture(scope="module")
def client() -> docker.DockerClient:
    try:
        return docker_client()
    except HarnessError as exc:
        pytest.fail(f"{exc} {BOOTSTRAP_HINT}")


@pytest.fixture(scope="module")
def image(client: docker.DockerClient) -> str:
    return ensure_sandbox_image(client)


@pytest.fixture
def run_in(client: docker.DockerClient, image: str) -> Iterator[Callable[..., tuple[int, str]]]:
    """Run a shell script in a fresh sandbox container as the agent, no network; (exit, output)."""
    made = []

    def run(script: str, user: str = "agent") -> tuple[int, str]:
        ctr = client.containers.create(
            image, ["bash", "-c", script], user=user, network_mode="none", labels=TEST_LABEL
        )
        made.append(ctr)
        ctr.start()
        code = ctr.wait(timeout=120)["StatusCode"]
        return code, ctr.logs().decode()

    yield run
    for ctr in made:
        ctr.remove(force=True)


@pytest.mark.slow
def test_client_pings_and_is_cached(client: docker.DockerClient) -> None:
    assert client.ping() is True
    assert docker_client() is client
    assert engine_answers() is True
    info = engine()[1]
    assert info.url.startswith(("unix://", "tcp://", "ssh://", "npipe://")) and info.version


@pytest.mark.slow
def test_sandbox_runs_as_agent_without_network(run_in: Callable[..., tuple[int, str]]) -> None:
    code, out = run_in(
        "set -e; id -u; id -g; pwd; touch /workspace/probe; command -v python3;"
        " python3 -c 'import socket, sys; print(sys.version_info >= (3, 12), [n for _, n in socket.if_nameindex()])';"
        " python3 -m pytest --version >/dev/null; tmux -V; echo PATH=$PATH; echo AGENT=$HARNESS_AGENT_PYTHON"
    )
    assert code == 0, out
    lines = out.splitlines()
    assert lines[:4] == ["1000", "1000", "/workspace", "/usr/bin/python3"], out
    assert lines[4] == "True ['lo']", out  # Python >= 3.12, and no interface but loopback
    assert lines[5].startswith("tmux "), out
    assert "harness-agent" not in lines[6], out  # the task's python is the system one
    assert lines[7] == f"AGENT={AGENT_PYTHON}", out


@pytest.mark.slow
def test_agent_tools_import_at_the_hosts_versions(
    client: docker.DockerClient, image: str, run_in: Callable[..., tuple[int, str]]
) -> None:
    attrs = client.images.get(image).attrs
    assert attrs["Config"]["Labels"]["harness.agent-python"] == AGENT_PYTHON
    probe = (
        "import importlib.metadata as m, openhands.tools.terminal, openhands.tools.file_editor;"
        " print(m.version('openhands-sdk'), m.version('openhands-tools'))"
    )
    code, out = run_in(f'"$HARNESS_AGENT_PYTHON" -c "{probe}"')
    assert code == 0, out
    host = f"{importlib.metadata.version('openhands-sdk')} {importlib.metadata.version('openhands-tools')}"
    assert out.strip().splitlines()[-1] == host, out


@pytest.mark.slow
def test_second_ensure_is_a_cache_hit(
    client: docker.DockerClient, image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The image in the engine is used as it is: nothing is built (the build would fail here)."""
    before = client.images.get(image).id

    def no_build(*_: object, **__: object) -> None:
        raise AssertionError("the sandbox image was built again")

    monkeypatch.setattr("harness.runtime.images._build", no_build)
    assert ensure_sandbox_image(client) == image == sandbox_image_ref()
    assert client.images.get(image).id == before


def _path_without_podman() -> str:
    keep = [
        d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "podman").exists()
    ]
    return os.pathsep.join(keep)


def test_check_says_one_line_when_no_engine_answers(tmp_path: Path) -> None:
    dead = tmp_path / "dead.sock"
    with socket.socket(socket.AF_UNIX) as s:  # a socket file nobody listens on any more
        s.bind(str(dead))
    env = {
        **os.environ,
        "DOCKER_HOST": f"unix://{dead}",
        "PATH": _path_without_podman(),
        "HARNESS_CACHE": str(tmp_path / "cache"),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "runtime", "setup", "--check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc
    lines = (proc.stdout + proc.stderr).splitlines()
    assert len(lines) == 1, lines
    assert "DOCKER_HOST" in lines[0] and "--runtime local" in lines[0], lines


def test_check_without_docker_host_says_how_to_get_an_engine(tmp_path: Path) -> None:
    for url in (engine_mod.DOCKER_SOCKET, engine_mod.PODMAN_ROOTFUL_SOCKET, *engine_mod._user_sockets()):
        if engine_mod._connect(url) is not None:
            pytest.skip(f"{url} answers here: the check would find that engine")
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    env |= {"PATH": _path_without_podman(), "HARNESS_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "runtime", "setup", "--check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc
    lines = (proc.stdout + proc.stderr).splitlines()
    assert len(lines) == 1, lines
    for words in ("DOCKER_HOST", "apt-get install podman runc", "--runtime local"):
        assert words in lines[0], lines


@pytest.mark.slow
def test_setup_prints_the_engine_and_the_image(image: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "runtime", "setup"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("engine: ") and f"sandbox image: {image}" in proc.stdout, proc.stdout


@pytest.mark.slow
def test_managed_podman_service_outlives_the_process(tmp_path: Path) -> None:
    """No engine on the standard sockets: the harness starts podman's service, which later runs reuse."""
    for url in (engine_mod.DOCKER_SOCKET, engine_mod.PODMAN_ROOTFUL_SOCKET, *engine_mod._user_sockets()):
        if engine_mod._connect(url) is not None:
            pytest.skip(f"{url} answers here, so the harness would not start podman")
    assert shutil.which("podman"), f"no engine on the standard sockets and no podman {BOOTSTRAP_HINT}"
    cache = Path(f"/tmp/harness-test-{os.getpid()}")  # a unix socket path must stay short
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"} | {"HARNESS_CACHE": str(cache)}
    probe = "from harness.runtime.engine import engine; print(engine()[1].model_dump_json())"
    try:
        first = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60
        )
        assert first.returncode == 0, first.stderr
        assert '"started_by_harness":true' in first.stdout, first.stdout
        again = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60
        )
        assert '"started_by_harness":false' in again.stdout, again  # the first one's service answered
        assert (
            (cache / "podman" / "containers.conf")
            .read_text()
            .startswith("[containers]\ndefault_ulimits = []")
        )
    finally:
        pid_file = cache / "podman" / "podman.pid"
        if pid_file.is_file():
            pid = int(pid_file.read_text())
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        shutil.rmtree(cache, ignore_errors=True)


def _build_replacing(client: docker.DockerClient, *, tag: str, **kwargs: Any) -> None:
    """Build ``tag``; the image it named before (now untagged, a GB or more) is removed."""
    try:
        old = client.images.get(tag).id
    except docker.errors.ImageNotFound:
        old = None
    new, _ = client.images.build(tag=tag, **kwargs)
    if old and old != new.id:
        with contextlib.suppress(docker.errors.APIError):
            client.images.remove(old)


@pytest.mark.slow
def test_agent_runtime_dockerfile_builds_on_a_task_image(
    client: docker.DockerClient, image: str, tmp_path: Path
) -> None:
    """docker/agent-runtime.Dockerfile on a Debian 13 'task image' without the agent venv or user.

    The task image is the sandbox image minus /opt/harness-agent, user agent and /workspace, plus
    this machine's CA bundle (pip reaches PyPI through whatever TLS proxy the host trusts). Both
    images stay in the engine so that the next run is a layer-cache hit; only containers are removed.
    """
    from harness.runtime.images import host_ca_bundle, host_pins

    ca = host_ca_bundle()
    assert ca is not None, "no CA bundle on this machine"
    shutil.copyfile(ca, tmp_path / "host-ca.pem")
    (tmp_path / "task.Dockerfile").write_text(
        "ARG SANDBOX\nFROM ${SANDBOX}\nCOPY host-ca.pem /etc/ssl/certs/ca-certificates.crt\n"
        "RUN rm -rf /opt/harness-agent /workspace && userdel --remove agent\n"
    )
    task_image = "localhost/harness-test-task:latest"
    _build_replacing(
        client,
        path=str(tmp_path),
        dockerfile="task.Dockerfile",
        buildargs={"SANDBOX": image},
        tag=task_image,
        labels=TEST_LABEL,
        rm=True,
        forcerm=True,
    )
    repo_docker = Path(__file__).resolve().parent.parent / "docker"
    built = "localhost/harness-test-agent-runtime:latest"
    versions = {
        "OPENHANDS_SDK_VERSION": importlib.metadata.version("openhands-sdk"),
        "OPENHANDS_TOOLS_VERSION": importlib.metadata.version("openhands-tools"),
    }
    _build_replacing(
        client,
        path=str(repo_docker),
        dockerfile="agent-runtime.Dockerfile",
        buildargs={
            "BASE_IMAGE": task_image,
            "AGENT_CONSTRAINTS": " ".join(f"{name}=={v}" for name, v in host_pins().items()),
            **versions,
        },
        tag=built,
        labels=TEST_LABEL,
        network_mode="host",  # pip fetches from PyPI during the build
        rm=True,
        forcerm=True,
        timeout=1800,
    )
    probe = (
        "import importlib.metadata as m, openhands.tools.terminal, openhands.tools.file_editor;"
        " print(m.version('openhands-sdk'), m.version('openhands-tools'))"
    )
    ctr = client.containers.create(
        built,
        ["bash", "-c", f'id -un; command -v python3; "$HARNESS_AGENT_PYTHON" -c "{probe}"'],
        user="agent",
        network_mode="none",
        labels=TEST_LABEL,
    )
    try:
        ctr.start()
        code = ctr.wait(timeout=120)["StatusCode"]
        out = ctr.logs().decode()
    finally:
        ctr.remove(force=True)
    assert code == 0, out
    assert out.splitlines()[:2] == ["agent", "/usr/bin/python3"], out
    assert (
        out.strip().splitlines()[-1]
        == f"{versions['OPENHANDS_SDK_VERSION']} {versions['OPENHANDS_TOOLS_VERSION']}"
    )


def test_containers_removed_while_listed_are_skipped_whatever_the_engine_answers() -> None:
    """Podman answers an inspect of a container removed since the list with 500 "no such
    container" (Docker with 404): both are a container that is gone, any other error is not."""
    from types import SimpleNamespace

    from docker.errors import APIError, NotFound

    from harness.runtime.engine import containers_now

    def response(code: int) -> Any:
        return SimpleNamespace(status_code=code, reason="", url="")

    answers: dict[str, Any] = {
        "a": "container-a",
        "b": APIError("500 Server Error", response(500), "no such container"),
        "c": NotFound("404", response(404), "No such container: c"),
        "d": "container-d",
    }

    def get(cid: str) -> Any:
        if isinstance(answers[cid], Exception):
            raise answers[cid]
        return answers[cid]

    client: Any = SimpleNamespace(
        api=SimpleNamespace(containers=lambda all, filters: [{"Id": cid} for cid in answers]),
        containers=SimpleNamespace(get=get),
    )
    assert containers_now(client) == ["container-a", "container-d"]
    answers["b"] = APIError("500 Server Error", response(500), "database is locked")
    with pytest.raises(APIError):
        containers_now(client)
