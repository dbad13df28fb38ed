"""Issue 20, item 3: a service on this machine's loopback is out of reach of task content.

A token server bound to 127.0.0.1 on a random port, with a random token, stands for any
unauthenticated loopback service (a Ray dashboard, a dev server). Neither a task image's RUN step,
nor the agent's container, nor the task's tests at verification reach it. Only loopback is ever
probed: the containers' network modes come from the engine's own report, never from trying
addresses of the bridge.
"""

import http.server
import io
import secrets
import socketserver
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from harness.runtime.build_network import RESOLV_CONF
from harness.runtime.task_images import build_task_image
from harness.tasks.loader import load_task
from tests.test_runtime_container import FINISH, evaluate

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def client():  # type: ignore[no-untyped-def]
    """The engine (podman's API service here), with the sandbox image."""
    from harness.runtime.engine import docker_client
    from harness.runtime.images import ensure_sandbox_image

    c = docker_client()
    ensure_sandbox_image(c)
    return c


class _Token(http.server.BaseHTTPRequestHandler):
    token: ClassVar[str] = ""
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Token.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(_Token.token.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def token_server() -> Iterator[int]:
    _Token.token, _Token.hits = secrets.token_hex(16), []
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Token) as srv:
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        yield srv.server_address[1]
        srv.shutdown()


def _fetch(port: int) -> str:
    """A shell line that prints the token when the server answers, else why not."""
    return (
        'python3 -c "import urllib.request as u; '
        f"print('GOT', u.urlopen('http://127.0.0.1:{port}/', timeout=5).read().decode())\" 2>&1 | tail -n 1"
    )


def _read_from_image(client, tag: str, path: str) -> str:  # type: ignore[no-untyped-def]
    """A file of the image, copied out of a container that never starts: following a container's
    output hung past its exit once on podman's API (a CI run's 600 s timeout), a copy has no stream
    to wait on."""
    container = client.containers.create(tag, ["true"], network_mode="none")
    try:
        stream, _ = container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.extractfile(tar.getmembers()[0])
            assert member is not None, path
            return member.read().decode()
    finally:
        container.remove(force=True)


@pytest.mark.slow
def test_an_image_build_s_run_step_has_a_network_but_not_the_host_s_loopback(
    client, token_server: int, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from harness.runtime.images import ensure_sandbox_image

    task = tmp_path / "fetches"
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "instruction.md").write_text("Nothing.")
    (task / "tests" / "test.sh").write_text("exit 0\n")
    (task / "environment" / "Dockerfile").write_text(
        f"FROM {ensure_sandbox_image(client)}\n"
        f"RUN ({_fetch(token_server)}) > /fetched.txt\n"
        "RUN ls /sys/class/net > /interfaces.txt\n"
    )
    tag = build_task_image(client, load_task(task, suite="s", images=True))
    try:
        seen = "\n".join(_read_from_image(client, tag, name) for name in ("/fetched.txt", "/interfaces.txt"))
    finally:
        client.images.remove(tag, force=True)
    assert _Token.hits == [] and _Token.token not in seen, seen  # nothing reached this machine's service
    assert "Connection refused" in seen, seen
    # ... from a network of its own: an interface beside loopback (the engine's bridge), not none.
    assert set(seen.split("\n", 1)[1].split()) - {"lo"}, seen


@pytest.mark.slow
def test_the_agent_s_container_has_no_network_by_the_engine_s_report(
    client, token_server: int, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from harness.runtime.container import ContainerRuntime

    task = load_task(Path(__file__).parent.parent / "tasks" / "smoke" / "hello-file", suite="smoke")
    runtime = ContainerRuntime(client)
    runtime.prepare(tmp_path / "run", [task])
    sandbox = runtime.open(task, tmp_path / "run" / "ep", "m/hello-file/1", agent=False)
    try:
        sandbox.container.reload()
        assert sandbox.container.attrs["HostConfig"]["NetworkMode"] == "none"
        _, out = sandbox.container.exec_run(["sh", "-c", _fetch(token_server)])
        assert _Token.hits == [] and _Token.token not in out.decode()
    finally:
        sandbox.close()


@pytest.mark.slow
def test_a_test_script_at_verification_does_not_reach_the_host_s_loopback(
    client, token_server: int, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The tests pass only if they fetch the token: a reward of 1 would be a leak."""
    task = tmp_path / "suite" / "phones-home"
    (task / "environment" / "workspace").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "instruction.md").write_text("Nothing to do.")
    (task / "tests" / "test.sh").write_text(
        f"#!/usr/bin/env bash\n{_fetch(token_server)} | grep -q {_Token.token}\n"
    )
    recs, _ = evaluate([FINISH], tmp_path / "run", tasks=str(task))
    rec = recs["phones-home"]
    assert rec["verified"] and rec["reward"] == 0.0 and rec["status"] == "unresolved", rec
    assert _Token.hits == []


def test_a_sandbox_image_build_step_has_a_network_but_not_the_host_s_loopback(
    token_server: int, tmp_path: Path
) -> None:
    """The sandbox image is built on this machine (debootstrap, pip in a chroot): each step runs
    through images._run in a network namespace of its own (build_network.py), as a build's do."""
    import sys

    from harness.runtime.images import _run

    resolv = tmp_path / "resolv.conf"
    resolv.write_text(RESOLV_CONF)
    out = tmp_path / "seen.txt"
    probe = (
        "import urllib.request as u, sys\n"
        "seen = [open('/etc/resolv.conf').read().strip(), open('/proc/net/dev').read()]\n"
        "try:\n"
        f"    seen.append('GOT ' + u.urlopen('http://127.0.0.1:{token_server}/', timeout=5).read().decode())\n"
        "except OSError as exc:\n"
        "    seen.append(repr(exc))\n"
        f"open({str(out)!r}, 'w').write('\\n'.join(seen))\n"
    )
    with (tmp_path / "build.log").open("w") as log:
        _run([sys.executable, "-c", probe], what="a probe step", log=log, resolv=resolv)
    seen = out.read_text()
    assert _Token.hits == [] and _Token.token not in seen, seen
    assert "Connection refused" in seen, seen
    assert seen.startswith("nameserver 10.0.2.3") and "tap0" in seen, seen  # its own network, DNS through it
