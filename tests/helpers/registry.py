"""The tests' image registry (scripts/test-registry) and small images to push to it.

Images here are made of Debian's static busybox and bash (busybox-static, bash-static: a 4 MB
root filesystem with a shell, coreutils, tar and ``sleep infinity``, everything a Harbor task's
shared-mode verification uses) plus the files a test gives, imported into the engine as one layer.
Each carries a file unique to its test session, so its image id is this session's alone: removing
it (to make the next use a real pull) never touches another checkout's images on a shared engine.
"""

import contextlib
import io
import os
import shutil
import subprocess
import tarfile
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import docker

REPO = Path(__file__).resolve().parent.parent.parent
BUSYBOX, BASH = Path("/bin/busybox"), Path("/bin/bash-static")


def registry_address() -> str:
    """``127.0.0.1:PORT`` of the tests' registry, started (and the engine configured) if needed."""
    done = subprocess.run(
        [str(REPO / "scripts" / "test-registry")], capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"scripts/test-registry failed: {done.stderr.strip()}")
    return done.stdout.strip()


def registry_log() -> Path:
    """The registry's log (its access lines say the bytes each blob GET sent)."""
    from harness.paths import cache_dir

    return cache_dir() / "test-registry" / "open" / "registry.log"


def auth_registry() -> tuple[str, str, str]:
    """(address, user, password) of the tests' registry that asks for a password (the next port)."""
    from harness.paths import cache_dir

    host, _, port = registry_address().rpartition(":")
    password = (cache_dir() / "test-registry" / "auth" / "password").read_text().strip()
    return f"{host}:{int(port) + 1}", "harness-test", password


def has_manifest(address: str, repository: str, tag: str) -> bool:
    request = urllib.request.Request(
        f"http://{address}/v2/{repository}/manifests/{tag}",
        method="HEAD",
        headers={  # podman pushes OCI manifests, Docker its own
            "Accept": "application/vnd.oci.image.manifest.v1+json, "
            "application/vnd.docker.distribution.manifest.v2+json"
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status == 200
    except Exception:
        return False


def _add(
    tar: tarfile.TarFile, name: str, data: bytes | None = None, *, mode: int = 0o755, link: str = ""
) -> None:
    info = tarfile.TarInfo(name)
    info.mode = mode
    if link:
        info.type, info.linkname = tarfile.SYMTYPE, link
        tar.addfile(info)
    elif data is None:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def rootfs_tar(files: Mapping[str, bytes | str]) -> bytes:
    """A root filesystem: busybox (every applet linked), bash, root's passwd entry, ``files``."""
    for binary in (BUSYBOX, BASH):
        if not binary.is_file():
            raise RuntimeError(
                f"{binary} is missing: apt-get install busybox-static bash-static (scripts/bootstrap --tests)"
            )
    applets = subprocess.run(
        [str(BUSYBOX), "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("bin", "etc", "root", "usr", "usr/bin", "var", "logs"):
            _add(tar, d)
        _add(tar, "tmp", mode=0o1777)
        _add(tar, "bin/busybox", BUSYBOX.read_bytes())
        _add(tar, "bin/bash", BASH.read_bytes())
        for applet in applets:
            if applet not in ("busybox", "bash"):
                _add(tar, f"bin/{applet}", link="busybox")
        _add(tar, "usr/bin/env", link="/bin/busybox")
        _add(tar, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", mode=0o644)
        _add(tar, "etc/group", b"root:x:0:\n", mode=0o644)
        made = {"bin", "etc", "root", "usr", "usr/bin", "var", "logs", "tmp"}
        for name, content in sorted(files.items()):
            parts = name.strip("/").split("/")
            for i in range(1, len(parts)):
                parent = "/".join(parts[:i])
                if parent not in made:
                    made.add(parent)
                    _add(tar, parent)
            data = content.encode() if isinstance(content, str) else content
            _add(tar, name.strip("/"), data, mode=0o755 if name.endswith(".sh") else 0o644)
    return buf.getvalue()


def import_image(
    client: "docker.DockerClient", ref: str, files: Mapping[str, bytes | str], workdir: str = "/app"
) -> str:
    """``ref`` in the engine: the small root filesystem with ``files``, WORKDIR ``workdir``; its id."""
    client.api.import_image_from_data(
        rootfs_tar(files), repository=ref, changes=[f"WORKDIR {workdir}", 'CMD ["/bin/sh"]']
    )
    return str(client.images.get(ref).id)


def push(client: "docker.DockerClient", ref: str, auth: dict[str, str] | None = None) -> None:
    """Push ``ref`` to its registry (``auth``: username and password); RuntimeError with the
    engine's message when that fails."""
    repository, _, tag = ref.rpartition(":")
    for event in client.api.push(repository, tag, stream=True, decode=True, auth_config=auth):
        if isinstance(event, dict) and (event.get("error") or event.get("errorDetail")):
            raise RuntimeError(f"push {ref}: {event.get('error') or event.get('errorDetail')}")


def publish(
    client: "docker.DockerClient", ref: str, files: Mapping[str, bytes | str], workdir: str = "/app"
) -> str:
    """An image only the registry holds: imported as ``ref``, pushed, and removed from the engine
    (every tag of it), so that the next use pulls it. Its id."""
    image_id = import_image(
        client,
        ref,
        {**files, "etc/harness-test-session": os.environ.get("HARNESS_TEST_SESSION", "")},
        workdir,
    )
    push(client, ref)
    forget(client, image_id)
    return image_id


def forget(client: "docker.DockerClient", image: str) -> None:
    """Remove an image (by id or reference) from the engine, every tag of it; gone already is fine."""
    from docker.errors import NotFound

    with contextlib.suppress(NotFound):
        client.images.remove(image, force=True)


def have_static_tools() -> bool:
    return BUSYBOX.is_file() and BASH.is_file() and shutil.which("docker-registry") is not None
