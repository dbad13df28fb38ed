"""What changed in a directory tree since the last look, as a tar: the one walk behind every file
checkpoint.

Standard library only, and Python 3.6 syntax: the same file runs on the host (a local workspace,
files.LocalFiles) and inside an episode's container (checkpointd.py, under whatever Python the
image has), so that both take a checkpoint by the same rules.

A path's facts are what lstat says of it (mode, mtime and ctime in ns, size, inode, owner, group):
a path is changed when any of them moved, which catches an edit that keeps the size and an mtime set
back by ``touch -d``/``cp -p`` (its ctime still moves). Only the tree's own entries are looked at;
a link is recorded as a link, never followed.
"""

import os
import stat
import tarfile
import typing

# mode, mtime_ns, ctime_ns, size, inode, uid, gid (annotations are strings: never evaluated, so an
# old Python reads them as it reads a comment)
if typing.TYPE_CHECKING:  # subscripting tuple is 3.9's: never evaluated here
    Facts = tuple[int, int, int, int, int, int, int]


def walk(root: "str", skip: "tuple[str, ...]" = ()) -> "dict[str, Facts]":
    """Every entry under ``root`` (relative paths, '/'-separated) -> its facts, but the top-level
    names in ``skip`` and what is under them. Entries that vanish or cannot be read meanwhile are
    left out: that is what the agent did to them. A root that is no longer a directory (an agent
    that replaced its workspace with a link to ``/``) has no entries: the walk never follows it."""
    try:
        if not stat.S_ISDIR(os.lstat(root).st_mode):
            return {}
    except OSError:
        return {}
    found = {}
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            entries = list(os.scandir(os.path.join(root, rel) if rel else root))
        except OSError:
            continue
        for entry in entries:
            if not rel and entry.name in skip:
                continue
            path = rel + "/" + entry.name if rel else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            found[path] = (
                st.st_mode, st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_uid, st.st_gid
            )  # fmt: skip
            if stat.S_ISDIR(st.st_mode):
                stack.append(path)
    return found


def kind(mode: "int") -> "str":
    """A listing's type letter: d, l, f, or o for anything else."""
    if stat.S_ISDIR(mode):
        return "d"
    if stat.S_ISLNK(mode):
        return "l"
    return "f" if stat.S_ISREG(mode) else "o"


def over_caps(now: "dict[str, Facts]", max_bytes: "int", max_files: "int") -> "str | None":
    """Why the tree is over the caps (regular files at their full size, sparse ones too), or None."""
    if len(now) > max_files:
        return f"more than {max_files:,} files"
    total = 0
    for path in sorted(now):
        facts = now[path]
        if stat.S_ISREG(facts[0]):
            total += facts[3]
            if total > max_bytes:
                if facts[3] > max_bytes:
                    return f"{path} is {facts[3]:,} bytes"
                return f"{total:,} bytes up to {path}"
    return None


def changed(seen: "dict[str, Facts]", now: "dict[str, Facts]") -> "list[str]":
    """The paths whose facts differ from ``seen`` (new ones included), sorted."""
    return sorted(p for p, facts in now.items() if seen.get(p) != facts)


def listing(now: "dict[str, Facts]") -> "bytes":
    """Every path present, as ``TYPE PATH`` entries, NUL-terminated, sorted by path."""
    return listing_of({p: kind(facts[0]) for p, facts in now.items()})


def listing_of(kinds: "dict[str, str]") -> "bytes":
    """A listing of these paths and their type letters."""
    return b"".join((kinds[p] + " " + p).encode("utf-8", "surrogateescape") + b"\0" for p in sorted(kinds))


def add_changed(
    tar: "tarfile.TarFile", root: "str", paths: "list[str]", now: "dict[str, Facts]"
) -> "list[str]":
    """``paths`` into ``tar``, each entry's header from the walk's facts (no second lstat, no user or
    group name looked up: the numeric owner is what a restore sets); the paths left out (gone or
    swapped since the walk), which the caller must not count as saved.

    What the walk saw is what is read, and no more: a regular file is opened without following a
    link and must be the very file the walk saw (its inode: a directory swapped for a link to
    elsewhere since the walk is never read through, even as root), and it is read at the smaller of
    its size then and now, so the caps checked on the walk's sizes hold for the tar (a file grown to
    a terabyte meanwhile is cut, one cut short is padded: the tar stays whole)."""
    left_out = []
    for path in paths:
        mode, mtime_ns, _, size, ino, uid, gid = now[path]
        full = os.path.join(root, path)
        info = tarfile.TarInfo(path)
        info.mode, info.uid, info.gid = stat.S_IMODE(mode), uid, gid
        info.mtime = mtime_ns / 1e9
        try:
            if stat.S_ISREG(mode):
                fd = os.open(full, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
                with os.fdopen(fd, "rb") as src:
                    st = os.fstat(fd)
                    if not stat.S_ISREG(st.st_mode) or st.st_ino != ino:
                        left_out.append(path)
                        continue
                    info.size = min(st.st_size, size)
                    tar.addfile(info, _Exactly(src, info.size))
            elif stat.S_ISDIR(mode):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif stat.S_ISLNK(mode):
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(full)
                tar.addfile(info)
            else:  # a FIFO, a device: as tar itself records them
                tar.add(full, arcname=path, recursive=False)
        except OSError:
            left_out.append(path)  # removed between the walk and here
    return left_out


class _Exactly:
    """A file read as exactly ``size`` bytes: one cut short meanwhile is padded with zeros, so the tar
    stays whole (its header already promised the size)."""

    def __init__(self, src: "typing.BinaryIO", size: "int") -> "None":
        self._src, self._left = src, size

    def read(self, n: "int | None" = -1) -> "bytes":
        n = self._left if n is None or n < 0 else min(n, self._left)
        data = self._src.read(n) if n else b""
        if len(data) < n:
            data += b"\0" * (n - len(data))
        self._left -= n
        return data
