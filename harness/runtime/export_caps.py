"""Caps on what the harness copies out of an episode: its final files, in bytes and in entries.

What the agent leaves is the model's doing, and the copies the harness makes of it (the export of
a container's workspace into the run directory, a verification's copy, Ray's tar of the episode)
would otherwise take whatever it made: ``truncate -s 3G big`` in a container became 3 GB in the
run directory, and a 1 TB sparse file would fill the disk. Sizes are counted as a copy writes them:
a file's full (apparent) size, sparse or not. Over a cap the episode is an error that names it
(``ExportLimit``), nothing of the copy is left, and the run goes on.
"""

import contextlib
import os
import shutil
import stat
import tarfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import HarnessError

_GIB = 1 << 30


class ExportLimits(BaseModel):
    """How much of one episode's final files the harness copies out of its sandbox."""

    model_config = ConfigDict(frozen=True)

    max_bytes: int = Field(
        _GIB, ge=0, description="Bytes at most, each file counted at its full size (a sparse file too)."
    )
    max_files: int = Field(100_000, ge=1, description="Entries at most (files, directories, links).")


class ExportLimit(HarnessError):
    """The episode's files are over an export cap: the model's outcome (an error, scored 0)."""


def _size(n: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", _GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def over_cap(limits: ExportLimits, what: str) -> ExportLimit:
    return ExportLimit(
        f"the episode's files are over the export cap of {_size(limits.max_bytes)} and "
        f"{limits.max_files:,} files ({what}): they were not copied; a task that needs more can "
        "raise --export-max-gib / --export-max-files ([eval] export_max_gib / export_max_files)"
    )


class Tally:
    """Entries and bytes counted so far against ``limits``; ``add`` raises ExportLimit past either."""

    def __init__(self, limits: ExportLimits) -> None:
        self.limits = limits
        self.files = 0
        self.bytes = 0

    def add(self, name: str, size: int) -> None:
        self.files += 1
        self.bytes += size
        if self.files > self.limits.max_files:
            raise over_cap(self.limits, f"more than {self.limits.max_files:,} files")
        if self.bytes > self.limits.max_bytes:
            alone = size > self.limits.max_bytes
            raise over_cap(
                self.limits, f"{name} is {_size(size)}" if alone else f"{_size(self.bytes)} up to {name}"
            )


def capped_members(members: Iterable[tarfile.TarInfo], limits: ExportLimits) -> Iterator[tarfile.TarInfo]:
    """The members of a tar read as a stream, each counted before its data is read: the first
    one over a cap raises, so a 1 TB file's bytes are never read, let alone written."""
    tally = Tally(limits)
    for member in members:
        if member.name.removeprefix("./") not in ("", "."):
            tally.add(member.name.removeprefix("./"), member.size if member.isreg() else 0)
        yield member


def check_tree(root: Path, limits: ExportLimits) -> None:
    """ExportLimit when the directory ``root`` holds more than ``limits`` (links not followed, ``root``
    itself included; the walk stops at the first entry over a cap)."""
    tally = Tally(limits)
    stack = [] if root.is_symlink() else [root]
    while stack:
        with (
            contextlib.suppress(OSError),
            os.scandir(stack.pop()) as entries,
        ):  # unreadable: not copied either
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                tally.add(
                    os.path.relpath(entry.path, root), info.st_size if stat.S_ISREG(info.st_mode) else 0
                )
                if stat.S_ISDIR(info.st_mode):
                    stack.append(Path(entry.path))


def remove_tree(path: Path) -> None:
    """``rmtree`` that also removes what the agent made unreadable (its own files: chmod back)."""

    def unlock(func: Any, name: str, _exc: BaseException) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(name), stat.S_IRWXU)
            if not os.path.islink(name):
                os.chmod(name, stat.S_IRWXU)
        func(name)

    shutil.rmtree(path, onexc=unlock)
