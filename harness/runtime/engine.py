"""The container engine: any engine that speaks the Docker API, found or started on demand.

Where it looks, in order:

1. ``$DOCKER_HOST`` (with ``DOCKER_TLS_VERIFY``/``DOCKER_CERT_PATH``, as the docker CLI reads them).
   When it is set, it is the only place looked at: a user who names an engine does not want
   another one picked behind their back.
2. Docker's default socket ``/var/run/docker.sock``.
3. Podman's rootful API socket ``/run/podman/podman.sock`` (``systemctl start podman.socket``), then
   for a non-root user the rootless ones under ``$XDG_RUNTIME_DIR`` (``podman/podman.sock``,
   ``docker.sock``).
4. The podman API service the harness manages: ``<cache>/podman/podman.sock``. When nothing
   answers and the ``podman`` binary is installed, the harness starts
   ``podman system service --time=0`` there, detached in its own session, so that later runs
   (and other harness processes) reuse it. Its log is ``podman.log`` beside the socket.

The managed service reads ``containers.conf`` from the same directory (``CONTAINERS_CONF``): on
hosts where containers may not set rlimits (Debian 12 under a VM sandbox: "error setting rlimit
type 7: operation not permitted") podman's default ulimits make every ``run`` fail, and crun
fails there too ("cgroups in hybrid mode not supported"), so the file clears the default
ulimits, uses the cgroupfs manager and runc when runc is installed.
"""

import contextlib
import fcntl
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from harness.errors import HarnessError
from harness.paths import cache_dir

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

DOCKER_SOCKET = "unix:///var/run/docker.sock"
PODMAN_ROOTFUL_SOCKET = "unix:///run/podman/podman.sock"
_PING_TIMEOUT_S = 5.0  # an engine that is up answers /_ping in milliseconds
_API_TIMEOUT_S = 300  # per request; imports and commits of big images take a while
_START_WAIT_S = 20.0  # podman's first start initialises its storage
_POOL = 32  # episodes run concurrently, each holding a connection for its exec calls


class EngineUnavailable(HarnessError):
    """No engine that speaks the Docker API answers, and none could be started."""

    exit_code = 1


class EngineInfo(BaseModel):
    """Which engine the harness talks to, for messages and the run record."""

    model_config = ConfigDict(frozen=True)

    url: str  # as given to the docker SDK, e.g. unix:///var/run/docker.sock
    name: str  # "Docker Engine - Community", "Podman Engine", ...
    version: str
    api_version: str
    started_by_harness: bool  # the harness-managed podman service


_lock = threading.Lock()
_cached: tuple["docker.DockerClient", EngineInfo] | None = None


def podman_dir() -> Path:
    """Where the harness keeps its podman service: socket, log, containers.conf, pid."""
    return cache_dir() / "podman"


def managed_socket() -> Path:
    return podman_dir() / "podman.sock"


def _unreachable_message() -> str:
    host = os.environ.get("DOCKER_HOST")
    if host:
        return (
            f"DOCKER_HOST={host} does not answer the Docker API: start that engine, fix or unset "
            "DOCKER_HOST, or run without containers (--runtime local)"
        )
    return (
        "no container engine answers (DOCKER_HOST unset, /var/run/docker.sock and podman's sockets "
        "silent, no podman binary to start one): start Docker, or `apt-get install podman runc` "
        "and the harness starts podman's API service itself, or set DOCKER_HOST=unix:///path.sock; "
        "--runtime local runs without containers"
    )


def _connect(url: str | None) -> "docker.DockerClient | None":
    """A client for ``url`` (None: from the environment) if its engine answers a ping, else None."""
    import docker
    from docker.errors import DockerException

    if url is not None and url.startswith("unix://") and not Path(url.removeprefix("unix://")).exists():
        return None
    try:
        if url is None:
            client = docker.from_env(timeout=int(_PING_TIMEOUT_S), max_pool_size=_POOL)
        else:
            client = docker.DockerClient(base_url=url, timeout=int(_PING_TIMEOUT_S), max_pool_size=_POOL)
    except DockerException:  # the constructor asks the engine for its API version
        return None
    try:
        client.ping()
    except (DockerException, OSError):
        client.close()
        return None
    client.api.timeout = _API_TIMEOUT_S  # short timeout for the probe only
    return client


def _containers_conf() -> Path:
    """Write the settings the managed service runs with (see the module docstring)."""
    lines = ["[containers]", "default_ulimits = []", "", "[engine]", 'cgroup_manager = "cgroupfs"']
    if shutil.which("runc"):
        lines.append('runtime = "runc"')
    path = podman_dir() / "containers.conf"
    text = "\n".join(lines) + "\n"
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


def _start_podman(podman: str) -> "docker.DockerClient":
    """Start (or find, when another process just did) the harness-managed podman API service."""
    directory = podman_dir()
    directory.mkdir(parents=True, exist_ok=True)
    sock = managed_socket()
    url = f"unix://{sock}"
    if len(str(sock).encode()) > 100:  # sun_path holds 108 bytes
        raise EngineUnavailable(
            f"the podman socket path {sock} is too long for a unix socket; set HARNESS_CACHE to a shorter directory"
        )
    with open(directory / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two harness processes must not start two services
        if client := _connect(url):
            return client
        sock.unlink(missing_ok=True)  # a stale socket from a service that died
        log_path = directory / "podman.log"
        env = {**os.environ, "CONTAINERS_CONF": str(_containers_conf())}
        cmd = [podman, "system", "service", "--time=0", url]
        with open(log_path, "ab") as log:
            log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n".encode())
            log.flush()
            # Own session and no pipes to us: the service outlives this process, later runs reuse it.
            # Its own directory as working directory: podman 4's conmon drops an `oom` marker file
            # in it when a container is OOM-killed (it landed in the user's project otherwise).
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
                cwd=directory,
            )
        (directory / "podman.pid").write_text(f"{proc.pid}\n")
        deadline = time.monotonic() + _START_WAIT_S
        while time.monotonic() < deadline:
            if client := _connect(url):
                return client
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        tail = " | ".join(line for line in log_path.read_text(errors="replace").splitlines()[-3:] if line)
        if proc.poll() is None:
            proc.kill()  # it never answered: do not leave a silent service behind
            proc.wait()
            raise EngineUnavailable(
                f"podman's API service did not answer on {url} within {_START_WAIT_S:.0f} s (log {log_path}): {tail}"
            )
        raise EngineUnavailable(
            f"podman's API service exited with code {proc.returncode} (log {log_path}): {tail}"
        )


def _user_sockets() -> list[str]:
    """Rootless podman's (``systemctl --user start podman.socket``) and rootless Docker's sockets."""
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if not runtime_dir or os.geteuid() == 0:
        return []
    return [f"unix://{runtime_dir}/podman/podman.sock", f"unix://{runtime_dir}/docker.sock"]


def _find() -> tuple["docker.DockerClient", bool]:
    if os.environ.get("DOCKER_HOST"):
        if client := _connect(None):
            return client, False
        raise EngineUnavailable(_unreachable_message())
    for url in (DOCKER_SOCKET, PODMAN_ROOTFUL_SOCKET, *_user_sockets(), f"unix://{managed_socket()}"):
        if client := _connect(url):
            return client, False
    podman = shutil.which("podman")
    if podman is None:
        raise EngineUnavailable(_unreachable_message())
    return _start_podman(podman), True


def _describe(client: "docker.DockerClient", started: bool) -> EngineInfo:
    version = client.version()
    components = version.get("Components") or [{}]
    name = components[0].get("Name") or version.get("Platform", {}).get("Name") or "Docker API engine"
    url = os.environ.get("DOCKER_HOST") or _url_of(client)
    return EngineInfo(
        url=url,
        name=str(name),
        version=str(version.get("Version", "?")),
        api_version=str(version.get("ApiVersion", "?")),
        started_by_harness=started,
    )


def _url_of(client: "docker.DockerClient") -> str:
    # The SDK rewrites unix:// URLs to http+docker://localhost; the socket sits on the adapter.
    adapter = client.api.adapters.get("http+docker://")
    socket_path = getattr(adapter, "socket_path", None)
    return f"unix://{socket_path}" if socket_path else str(client.api.base_url)


def engine() -> tuple["docker.DockerClient", EngineInfo]:
    """The engine's client and what it is; found (or started) once per process."""
    global _cached
    with _lock:
        if _cached is None:
            client, started = _find()
            _cached = (client, _describe(client, started))
        return _cached


def docker_client() -> "docker.DockerClient":
    """A docker SDK client for an engine that answers ``ping()``; raises EngineUnavailable."""
    return engine()[0]


def engine_answers() -> bool:
    """Whether ``docker_client()`` succeeds (may start the managed podman service): ``--runtime auto``."""
    try:
        docker_client()
    except EngineUnavailable:
        return False
    return True


def reset() -> None:
    """Forget the cached client (tests that change DOCKER_HOST, a process after fork)."""
    global _cached
    with _lock:
        if _cached is not None:
            with contextlib.suppress(Exception):
                _cached[0].close()
        _cached = None


def containers_now(client: "docker.DockerClient", filters: dict[str, str] | None = None) -> list["Container"]:
    """The engine's containers (stopped ones too) that still exist once each is inspected.

    The SDK's ``containers.list(ignore_removed=True)`` lists, then inspects each, skipping one removed
    in between only when the engine says 404; podman says 500 "no such container" instead, and a
    list taken while another run (or this one's cleanup) removed a container failed with it.
    """
    from docker.errors import APIError, NotFound

    found = []
    for summary in client.api.containers(all=True, filters=filters):
        try:
            found.append(client.containers.get(summary["Id"]))
        except NotFound:
            continue
        except APIError as exc:
            if "no such container" not in str(exc).lower():
                raise
    return found
