"""The default sandbox image, built on this machine without any image registry.

No registry is needed (none may be reachable): ``debootstrap`` fetches a minimal Debian 13
"trixie" (Python 3.13; openhands-sdk needs >= 3.12) from the Debian mirror, a chroot adds the
agent's tool environment from PyPI, and the root filesystem is imported into the engine as an
image through the Docker API. The reference is ``localhost/harness-sandbox:<hash>``, where the
hash covers this recipe and the versions of openhands-sdk/openhands-tools and of every package
they pull in, as installed in the harness's own environment (given to pip as constraints): the
tools in the container are the very versions whose schemas the scaffold shows the model, and
upgrading the harness's SDK (or one of its dependencies) builds a new image.

What the image holds:

- ``/opt/harness-agent``: a venv with openhands-sdk and openhands-tools (``HARNESS_AGENT_PYTHON``
  in the image's environment and the ``harness.agent-python`` label name its python). It is not
  on PATH: the agent's ``python``/``python3`` is the system Python 3, with pytest, so a task's
  code never sees the harness's packages.
- user ``agent`` (uid/gid 1000, home /home/agent) and ``/workspace`` owned by it (the image's
  WORKDIR). The image's default user stays root, as in any base image; run the agent with
  ``user="agent"`` and ``network_mode="none"`` (podman ignores the SDK's ``network_disabled``).
- bash, coreutils, tmux (the terminal tool drives it), procps, git, patch, less, file, make,
  ca-certificates, python3 with venv, pip and pytest.

Building needs root (debootstrap, chroot, mount; unshare and slirp4netns give each step a network
of its own, never this machine's: build_network.py) and takes a few minutes once; the engine keeps
the image afterwards. Log: ``<cache>/images/build-<hash>.log``.
"""

import contextlib
import fcntl
import functools
import hashlib
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import signal
import ssl
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from harness.errors import HarnessError
from harness.paths import cache_dir
from harness.progress import console, spinner
from harness.runtime.build_network import RESOLV_CONF, attach, isolated
from harness.runtime.build_network import TOOLS as NETWORK_TOOLS

if TYPE_CHECKING:
    import docker

IMAGE_NAME = "localhost/harness-sandbox"
AGENT_VENV = "/opt/harness-agent"
AGENT_PYTHON = f"{AGENT_VENV}/bin/python"
SUITE = "trixie"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
PACKAGES = (
    "python3",
    "python3-venv",
    "python3-pip",
    "python3-pytest",  # task tests (`python3 -m pytest`) run in the same container
    "bash",
    "coreutils",
    "tmux",
    "procps",
    "git",
    "patch",
    "less",
    "file",
    "make",
    "ca-certificates",
)
SDK_DISTRIBUTIONS = ("openhands-sdk", "openhands-tools")

# Runs inside the chroot as root; {packages} are the pinned SDK distributions.
_SETUP_SCRIPT = """set -eu
umask 022
python3 -m venv {venv}
pip_install() {{ {venv}/bin/pip install --no-cache-dir --disable-pip-version-check --no-input "$@"; }}
# The host's versions as constraints; should one not install on this Python, resolve afresh instead.
pip_install -c /tmp/harness-constraints.txt {packages} || {{
    echo "harness: the host's versions did not install here; resolving the SDK's dependencies afresh"
    pip_install {packages}
}}
rm -f /tmp/harness-constraints.txt
LITELLM_LOCAL_MODEL_COST_MAP=True {venv}/bin/python -c 'import openhands.tools.terminal, openhands.tools.file_editor'
groupadd --gid 1000 agent
useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash agent
mkdir -p /workspace
chown agent:agent /workspace
# The workspace may be owned by another uid than the one running git (tests run as root).
git config --system safe.directory '*'
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/man/* /usr/share/info/* /root/.cache
"""

# Image config given at import (no Dockerfile is involved). PATH leaves the venv out on purpose.
_CHANGES = (
    "WORKDIR /workspace",
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    f"ENV HARNESS_AGENT_PYTHON={AGENT_PYTHON}",
    # litellm (imported by the SDK) fetches a price map at import unless told not to; no network here.
    "ENV LITELLM_LOCAL_MODEL_COST_MAP=True",
    "ENV OPENHANDS_SUPPRESS_BANNER=1",
    f"LABEL harness.agent-python={AGENT_PYTHON}",
    'CMD ["/bin/bash"]',
)
# Proxy and index settings the chroot's pip may need, passed through from this environment.
_PASS_ENV = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_TRUSTED_HOST",
    "PIP_DEFAULT_TIMEOUT",
)


def sdk_versions() -> dict[str, str]:
    """The openhands distributions installed beside the harness, which the image must match."""
    versions = {}
    for name in SDK_DISTRIBUTIONS:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError as exc:
            raise HarnessError(
                f"{name} is not installed in the harness's environment; reinstall harness (pip install -e .)"
            ) from exc
    return versions


def host_pins() -> dict[str, str]:
    """The SDK distributions and everything they pull in, at the versions installed here.

    Given to pip as constraints: the container's libraries are the host's, and pip skips the
    minutes of backtracking that resolving the SDK's ~185 dependencies afresh costs.
    """
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    sdk_versions()  # a missing SDK is an error; a missing optional dependency below is not
    pins: dict[str, str] = {}
    todo: list[tuple[str, frozenset[str]]] = [(name, frozenset()) for name in SDK_DISTRIBUTIONS]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (key := (canonicalize_name(name), extras)) in seen:
            continue
        seen.add(key)
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # a dependency whose marker does not hold here (another platform, Python)
        pins[key[0]] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras or {""}):
                todo.append((req.name, frozenset(req.extras)))
    return dict(sorted(pins.items()))


def _recipe() -> dict[str, object]:
    return {
        "suite": SUITE,
        "packages": PACKAGES,
        "script": _SETUP_SCRIPT,
        "changes": _CHANGES,
        "pins": host_pins(),
    }


@functools.cache  # the host's installed versions do not change under a running process
def sandbox_image_ref() -> str:
    """``localhost/harness-sandbox:<12 hex>`` for this recipe and these SDK versions."""
    digest = hashlib.sha256(json.dumps(_recipe(), sort_keys=True).encode()).hexdigest()[:12]
    return f"{IMAGE_NAME}:{digest}"


def images_dir() -> Path:
    return cache_dir() / "images"


def _has_image(client: "docker.DockerClient", ref: str) -> bool:
    from docker.errors import ImageNotFound

    try:
        client.images.get(ref)
    except ImageNotFound:
        return False
    return True


def ensure_sandbox_image(client: "docker.DockerClient", *, force: bool = False) -> str:
    """The default sandbox image's reference; built and imported into the engine when missing."""
    ref = sandbox_image_ref()
    if not force and _has_image(client, ref):
        return ref
    _check_can_build()
    directory = images_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "build.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            with spinner(f"Waiting for another harness process building {ref}"):
                fcntl.flock(lock, fcntl.LOCK_EX)
            if _has_image(client, ref):
                return ref
        _remove_leftovers(directory)
        start = time.monotonic()
        _build(client, ref, directory)
        console.print(f"[green]✓[/] Sandbox image {ref} ready ({time.monotonic() - start:.0f} s)")
    _remove_older(client, ref)
    return ref


def _check_can_build() -> None:
    if os.geteuid() != 0:
        raise HarnessError(
            "building the sandbox image needs root (debootstrap, chroot): run `sudo .venv/bin/harness "
            "runtime setup` once, or build docker/agent-runtime.Dockerfile (docker/README.md)"
        )
    for tool in ("debootstrap", "chroot", "mount", "tar"):
        if shutil.which(tool) is None:
            raise HarnessError(
                f"building the sandbox image needs {tool}: apt-get install debootstrap (Debian/Ubuntu)"
            )
    for tool, package in NETWORK_TOOLS.items():  # its steps never run in this machine's network
        if shutil.which(tool) is None:
            raise HarnessError(
                f"building the sandbox image needs {tool}: apt-get install {package} (Debian/Ubuntu)"
            )


def _build(client: "docker.DockerClient", ref: str, directory: Path) -> None:
    repository, tag = ref.rsplit(":", 1)
    log_path = directory / f"build-{tag}.log"
    rootfs = directory / f"rootfs-{tag}-{os.getpid()}"  # a killed build's stray writer cannot touch it
    mirror = os.environ.get("HARNESS_DEBIAN_MIRROR", DEFAULT_MIRROR)
    pins = [f"{name}=={version}" for name, version in sdk_versions().items()]
    resolv = directory / f"resolv-{tag}-{os.getpid()}.conf"  # the steps' DNS (build_network.py)
    resolv.write_text(RESOLV_CONF)
    try:
        with open(log_path, "w") as log:
            _run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    f"--include={','.join(PACKAGES)}",
                    SUITE,
                    str(rootfs),
                    mirror,
                ],
                what=f"Debian {SUITE} base system (debootstrap from {mirror})",
                log=log,
                resolv=resolv,
            )
            constraints = "".join(f"{name}=={version}\n" for name, version in host_pins().items())
            (rootfs / "tmp" / "harness-constraints.txt").write_text(constraints)
            with _chroot_mounts(rootfs):
                script = _SETUP_SCRIPT.format(venv=AGENT_VENV, packages=" ".join(pins))
                env = {
                    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "HOME": "/root",
                    "LANG": "C.UTF-8",
                    "DEBIAN_FRONTEND": "noninteractive",
                    "PIP_CERT": "/tmp/harness-build-ca.pem",
                    **{k: v for k in _PASS_ENV if (v := os.environ.get(k))},
                }
                _run(
                    ["chroot", str(rootfs), "/bin/sh", "-c", script],
                    what=f"Agent tools in {AGENT_VENV} ({' '.join(pins)}, from PyPI)",
                    log=log,
                    env=env,
                    resolv=resolv,
                )
            _import(client, rootfs, repository, tag, log)
    except HarnessError as exc:
        raise HarnessError(f"{exc} (log {log_path})") from None
    finally:
        _remove_rootfs(rootfs)
        resolv.unlink(missing_ok=True)


def _run(
    cmd: Sequence[str],
    *,
    what: str,
    log: TextIO,
    env: dict[str, str] | None = None,
    resolv: Path | None = None,
) -> None:
    """Run a build step, its output to the log and its latest line under a spinner; with ``resolv``
    in a network namespace of its own (build_network.py: the outside, not this machine's loopback)."""
    log.write(f"\n$ {shlex.join(cmd)}\n")
    log.flush()
    argv = isolated(cmd, str(resolv)) if resolv is not None else list(cmd)
    start = time.monotonic()
    tail: list[str] = []
    # Its own process group: on Ctrl-C or SIGTERM the whole step (chroot -> sh -> pip) is killed
    # before the mounts are undone and the root filesystem removed.
    with (
        spinner(what) as spin,
        subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=True,
        ) as proc,
        attach(proc, log) if resolv is not None else contextlib.nullcontext(),
    ):
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                log.write(line)
                if line.strip():
                    tail = [*tail[-3:], line.strip()]
                    spin.update(f"{what} [dim]{_short(line.strip())}[/]")
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            raise
        code = proc.wait()
    log.flush()
    if code != 0:
        raise HarnessError(f"{what} failed (exit {code}): {' | '.join(tail)}")
    console.print(f"[green]✓[/] {what} ({time.monotonic() - start:.0f} s)")


def _short(line: str, width: int = 60) -> str:
    from rich.markup import escape

    return escape(line if len(line) <= width else line[: width - 1] + "…")


def host_ca_bundle() -> Path | None:
    """The CA bundle this machine trusts (it may hold a proxy's CA that PyPI traffic needs)."""
    paths = ssl.get_default_verify_paths()
    for candidate in (
        os.environ.get("PIP_CERT"),
        os.environ.get("REQUESTS_CA_BUNDLE"),
        os.environ.get("SSL_CERT_FILE"),
        paths.cafile,
        paths.openssl_cafile,
        "/etc/ssl/certs/ca-certificates.crt",
    ):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


@contextlib.contextmanager
def _chroot_mounts(rootfs: Path) -> Iterator[None]:
    """/proc, the build network's resolver and the host's CA bundle inside the chroot for the build;
    all undone after."""
    resolv = rootfs / "etc" / "resolv.conf"
    ca = rootfs / "tmp" / "harness-build-ca.pem"
    resolv.unlink(missing_ok=True)  # may be a dangling symlink to systemd-resolved
    resolv.write_text(RESOLV_CONF)  # the steps run in their own network (build_network.py)
    if (host_ca := host_ca_bundle()) is not None:
        shutil.copyfile(host_ca, ca)
    else:
        ca.symlink_to("/etc/ssl/certs/ca-certificates.crt")  # the chroot's own
    subprocess.run(["mount", "-t", "proc", "proc", str(rootfs / "proc")], check=True, capture_output=True)
    try:
        yield
    finally:
        _unmount_below(rootfs)
        ca.unlink(missing_ok=True)
        resolv.write_text("")  # the engine supplies each container's resolver


def _mounts_below(path: Path) -> list[str]:
    prefix = str(path.resolve()) + "/"
    with open("/proc/self/mounts") as fh:
        points = [line.split()[1].replace("\\040", " ") for line in fh]
    return [p for p in points if (p + "/").startswith(prefix)]


def _unmount_below(path: Path) -> None:
    for point in sorted(_mounts_below(path), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True)


def _remove_rootfs(rootfs: Path) -> None:
    if not rootfs.exists():
        return
    _unmount_below(rootfs)
    if _mounts_below(rootfs):  # never delete through a mount into the host
        console.print(f"[yellow]left {rootfs} in place: something is still mounted below it[/]")
        return
    shutil.rmtree(rootfs, ignore_errors=True)


def _remove_leftovers(directory: Path) -> None:
    """Root filesystems of builds that were killed (we hold the build lock: none is in use)."""
    for old in directory.glob("rootfs-*"):
        _remove_rootfs(old)


def _import(client: "docker.DockerClient", rootfs: Path, repository: str, tag: str, log: TextIO) -> None:
    """Stream the root filesystem as a tar into the engine as ``repository:tag``."""
    from docker.errors import DockerException

    what = f"Importing the root filesystem as {repository}:{tag}"
    start = time.monotonic()
    cmd = ["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-cf", "-", "."]
    with (
        spinner(what),
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as tar,
    ):
        try:
            # The tag goes inside `repo` ("may include a tag" in Docker's API): podman 4 ignores `tag`.
            answer = client.api.import_image(
                src=tar.stdout, stream_src=True, repository=f"{repository}:{tag}", changes=list(_CHANGES)
            )
        except DockerException as exc:
            tar.kill()
            raise HarnessError(f"{what} failed: {exc}") from None
        err = tar.stderr.read().decode(errors="replace") if tar.stderr else ""
        code = tar.wait()
    log.write(f"\n$ {' '.join(cmd)} | import\n{err}{answer}\n")
    if code != 0:
        raise HarnessError(f"{what} failed: tar exit {code}: {err.strip()[-300:]}")
    if not _has_image(client, f"{repository}:{tag}") and (
        ids := re.findall(r"sha256:[0-9a-f]{64}", str(answer))
    ):
        client.images.get(ids[-1]).tag(repository, tag)  # an engine that took neither
    if not _has_image(client, f"{repository}:{tag}"):
        raise HarnessError(f"{what} failed: the engine answered {str(answer)[-300:]!r}")
    console.print(f"[green]✓[/] {what} ({time.monotonic() - start:.0f} s)")


def _remove_older(client: "docker.DockerClient", ref: str) -> None:
    """Drop sandbox images of older recipes (best effort: one in use by a container stays)."""
    from docker.errors import DockerException

    for image in client.images.list(name=IMAGE_NAME):
        if ref in image.tags:
            continue
        for old in image.tags:
            if old.startswith(IMAGE_NAME + ":"):
                with contextlib.suppress(DockerException):
                    client.images.remove(old)
