"""Files into and out of a container, through the engine's archive calls and tars.

What comes out was written inside the container (by the agent, or by tests that ran the agent's
code): it is extracted only where it cannot reach outside its destination, and only up to the
export caps (export_caps.py).
"""

import functools
import io
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError
from harness.runtime.export_caps import ExportLimit, ExportLimits, capped_members, remove_tree

if TYPE_CHECKING:
    from docker.models.containers import Container


def stage_name() -> str:
    """A path in the container that nothing there can have made or be waiting for."""
    return f"/.harness-{uuid.uuid4().hex}"


def _tar_of(src: Path, owner: tuple[int, int], under: str = "") -> bytes:
    """``src``'s contents as a tar (entries relative to it, or under the directory ``under``),
    every entry owned by ``owner``."""

    def own(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid, info.gid = owner
        info.uname = info.gname = ""
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if under:
            top = tarfile.TarInfo(under)
            top.type, top.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(own(top))
        for child in sorted(src.iterdir()) if src.is_dir() else ():
            tar.add(child, arcname=f"{under}/{child.name}" if under else child.name, filter=own)
    return buf.getvalue()


def tar_tree(
    parts: "list[tuple[Path | None, str, tuple[int, int]]]",
    skip: "frozenset[str] | set[str]" = frozenset(),
    *,
    no_bytecode: bool = False,
) -> bytes:
    """One tar of several directories, to extract at ``/``: each part is (a directory whose contents
    go there, or None for an empty one; its path relative to ``/``; the owner of it and of all it
    holds). Parent directories come first (root's, 0755); no entry is writable by group or others
    or keeps a set-id bit; names in ``skip`` are left out with all below them. ``no_bytecode``:
    ``__pycache__`` directories and ``.pyc``/``.pyo`` files left out too (what a patch carries)."""
    buf = io.BytesIO()
    made: set[str] = set()

    def clean(info: tarfile.TarInfo, owner: tuple[int, int]) -> tarfile.TarInfo | None:
        if info.name in skip or any(info.name.startswith(s + "/") for s in skip):
            return None
        if no_bytecode and (info.name.endswith((".pyc", ".pyo")) or "__pycache__" in info.name.split("/")):
            return None
        info.uid, info.gid = owner
        info.uname = info.gname = ""
        info.mode &= 0o755
        return info

    with tarfile.open(fileobj=buf, mode="w") as tar:
        for src, dest, owner in parts:
            parents = dest.split("/")
            for i in range(1, len(parents) + 1):
                name = "/".join(parents[:i])
                if name in made:
                    continue
                made.add(name)
                top = tarfile.TarInfo(name)
                top.type, top.mode, top.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
                top.uid, top.gid = owner if i == len(parents) else (0, 0)
                tar.addfile(top)
            owned = functools.partial(clean, owner=owner)
            for child in sorted(src.iterdir()) if src is not None and src.is_dir() else ():
                tar.add(child, arcname=f"{dest}/{child.name}", filter=owned)
    return buf.getvalue()


def put_dir(
    container: "Container", src: Path, dest: str, owner: tuple[int, int], *, make: bool = False
) -> None:
    """Copy the contents of ``src`` into ``dest`` in the container: a directory that exists, or
    with ``make`` one the copy itself makes (parents included, ``dest`` owned by ``owner``)."""
    under = dest.strip("/") if make else ""
    data = _tar_of(src, owner, under)
    if not container.put_archive("/" if under else dest, data):
        raise HarnessError(f"could not copy {src} into {container.name}:{dest}")


def put_file(container: "Container", src: Path, dest: str, owner: tuple[int, int]) -> None:
    """One file (or link, copied as a link) of this machine to the path ``dest`` in the container,
    owned by ``owner``; its directory must exist."""
    parent, _, name = dest.rstrip("/").rpartition("/")

    def own(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid, info.gid = owner
        info.uname = info.gname = ""
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(src, arcname=name, recursive=False, filter=own)
    if not container.put_archive(parent or "/", buf.getvalue()):
        raise HarnessError(f"could not copy {src} into {container.name}:{dest}")


def extract_safe(tar: tarfile.TarFile, dest: Path, limits: ExportLimits | None = None) -> None:
    """Every member of a tar the container made into ``dest``, except those that would land outside
    it (absolute names, ``..``, links out) or that are not plain files, directories or links inside:
    the agent or its tests wrote them, not the harness. Past ``limits`` (the default caps when
    None) ExportLimit is raised before the member's data is read."""
    for member in capped_members(tar, limits or ExportLimits()):
        # "./.git/x" is ".git/x": only the archive's own "." entry is dropped (stripping a
        # leading "." from every name exported .git as git/ and .gitignore as gitignore).
        name = member.name.removeprefix("./")
        if name in ("", ".") or name.startswith("/"):
            continue
        member.name = name
        try:
            safe = tarfile.data_filter(member, str(dest))
        except tarfile.FilterError:
            continue
        if safe is not None:
            tar.extract(safe, dest, filter="fully_trusted")


def extract_tar(data: bytes, dest: Path) -> bool:
    """``data``, a tar the container wrote, into ``dest``; False when it is not a tar."""
    if not data:
        return False
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            extract_safe(tar, dest)
    except tarfile.TarError:
        return False
    return True


class _Chunks(io.RawIOBase):
    """The engine's archive stream (an iterator of byte chunks) as a file that tarfile reads as
    it arrives: a member over a cap is refused from its header, before its data is sent."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._pending = chunk
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


def export_dir(container: "Container", path: str, dest: Path, limits: ExportLimits | None = None) -> None:
    """The contents of ``path`` in the container into ``dest`` on this machine (see extract_safe).

    Over ``limits`` (the default caps when None): ExportLimit, the transfer stopped where it was
    and ``dest`` removed, so nothing half-copied is left.
    """
    stream, _ = container.get_archive(path.rstrip("/") + "/.")
    try:
        with tarfile.open(fileobj=io.BufferedReader(_Chunks(stream), 1 << 20), mode="r|") as tar:
            extract_safe(tar, dest, limits)
    except ExportLimit:
        if dest.exists():
            remove_tree(dest)
        raise
    finally:
        # Unread, the rest of the archive is dropped with the engine's connection.
        getattr(stream, "close", lambda: None)()
