"""A sandbox's files at a checkpoint, saved as what changed since the one before, and put back.

Each checkpoint that changed files adds a *generation* to the episode's checkpoint directory,
appended to its one ``data`` file (making a file costs more than the rest of a checkpoint here, so
none is made per turn) and named by where it lies there (``data@OFFSET+LENGTH``): a tar (every entry
whose metadata moved since the checkpoint before, directories as entries without their contents)
and, when the set of paths changed, a listing (every path present then, NUL-separated, as
``TYPE PATH`` where TYPE is f, d, l or o). A part named otherwise is a file of its own (checkpoints
made before the data file). The first is relative to
the sandbox as the task made it: a fresh sandbox is that state, so only the agent's changes are ever
copied. Restoring takes each path from the latest generation that holds it (one merged tar, made
here), removes from a fresh sandbox what the last listing lacks, and unpacks the tar there.

Three ways to read a sandbox: a local one's workspace directly (a walk of lstat calls, tree.py); a
container that shares a directory with the host through a watcher running in it (the same walk,
checkpointd.py; daemon_files.py); anything else through the seam's verbs (``find`` and ``tar`` in
the sandbox, one ``copy_out``; POSIX shell tools only, as root so that every file is read and
owners are kept), which is also what a container falls back to when it has no Python for the
watcher.
"""

import contextlib
import io
import os
import shlex
import shutil
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from harness.errors import HarnessError
from harness.resume import tree
from harness.runtime.export_caps import ExportLimits, over_cap, remove_tree
from harness.seam import Sandbox

STAMP = "/tmp/.harness-checkpoint-stamp"
_IN_MEMORY = 4 << 20  # a generation up to this many bytes of files is made in memory
_OUT = "/tmp/.harness-checkpoint-out"


class CheckpointUnusable(HarnessError):
    """A checkpoint that cannot be restored (corrupt, incomplete, or its sandbox refused it)."""


@dataclass(frozen=True)
class Generation:
    """What one checkpoint added (file names in the checkpoint directory; None: nothing of that)."""

    tar: str | None
    paths: str | None


class FileSnapshots(Protocol):
    def baseline(self) -> None:
        """The sandbox as it is now is what the next generation is relative to."""
        ...

    def snapshot(self, root: Path, turn: int) -> Generation:
        """The files changed since the last snapshot (or the baseline), saved in ``root``."""
        ...

    def restore(self, root: Path, tars: list[str], paths: str | None) -> None:
        """The sandbox (fresh from its task) made what the checkpoint saw: the generations' tars
        in order, the last listing (None: the set of paths never changed)."""
        ...


DATA = "data"


def _part(name: str) -> tuple[int, int] | None:
    """``data@OFFSET+LENGTH``: where the part lies in the data file (None: a file of its own, in the
    checkpoint's directory: a journal's name that reaches anywhere else is refused)."""
    if not name.startswith(f"{DATA}@"):
        if not name or "/" in name or "\0" in name or name in (".", ".."):
            raise CheckpointUnusable(f"a part name that is not a file of the checkpoint: {name[:80]!r}")
        return None
    offset, _, length = name.removeprefix(f"{DATA}@").partition("+")
    try:
        return int(offset), int(length)
    except ValueError:
        raise CheckpointUnusable(f"a malformed part name {name!r}") from None


def part_end(root: Path, name: str) -> int | None:
    """Where a part ends in the data file (None: a file of its own)."""
    at = _part(name)
    return None if at is None else at[0] + at[1]


def part_exists(root: Path, name: str) -> bool:
    end = part_end(root, name)
    if end is None:
        return (root / name).is_file()
    try:
        return (root / DATA).stat().st_size >= end
    except OSError:
        return False


def read_part(root: Path, name: str) -> bytes:
    at = _part(name)
    try:
        if at is None:
            return (root / name).read_bytes()
        with (root / DATA).open("rb") as f:
            f.seek(at[0])
            data = f.read(at[1])
    except OSError as exc:
        raise CheckpointUnusable(f"{name}: {exc.strerror or exc}") from None
    if len(data) != at[1]:
        raise CheckpointUnusable(f"{name}: the data file ends before it")
    return data


def _open_tar(root: Path, name: str, stack: "contextlib.ExitStack") -> tarfile.TarFile:
    """A generation's tar for reading: its own file, or the data file from its offset (a tar's
    members lie after its start; it ends at its end-of-archive blocks)."""
    at = _part(name)
    if at is None:
        return stack.enter_context(tarfile.open(root / name))
    f = stack.enter_context((root / DATA).open("rb"))
    f.seek(at[0])
    return stack.enter_context(tarfile.open(fileobj=f, mode="r:"))


def append_part(root: Path, data: "bytes | Path | IO[bytes]", size: int | None = None) -> str:
    """``data`` (bytes, a file's contents, or an open file's next ``size`` bytes at most) at the end
    of the data file; its part name. Whole in the file (flushed to the kernel) before the journal
    line that names it is written."""
    with (root / DATA).open("ab") as out:
        start = out.tell()
        if isinstance(data, Path):
            with data.open("rb") as src:
                shutil.copyfileobj(src, out, 1 << 20)
        elif isinstance(data, bytes):
            out.write(data)
        else:
            left = size if size is not None else -1
            while left:
                chunk = data.read(1 << 20 if left < 0 else min(left, 1 << 20))
                if not chunk:
                    break
                out.write(chunk)
                left -= len(chunk) if left > 0 else 0
        end = out.tell()
    return f"{DATA}@{start}+{end - start}"


def read_paths(root: Path, name: str) -> dict[str, str]:
    """A listing: path -> type."""
    raw = read_part(root, name)
    listing: dict[str, str] = {}
    for item in raw.split(b"\0"):
        if not item:
            continue
        kind, _, path = item.decode(errors="surrogateescape").partition(" ")
        if kind not in ("f", "d", "l", "o") or not path:
            raise CheckpointUnusable(f"{name}: a malformed entry {item[:80]!r}")
        listing[_clean(path)] = kind
    return listing


def _clean(path: str) -> str:
    return path[2:] if path.startswith("./") else path


def _refused(member: tarfile.TarInfo) -> str | None:
    """Why a generation's member is not put back: a checkpoint holds regular files, directories
    and links, and a sparse member would be written at its full declared size."""
    if member.issparse():
        return "a sparse file"
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        return "a device, pipe or other special file"
    return None


def merged_tar(
    root: Path, tars: list[str], final: dict[str, str] | None, out: Path, limits: ExportLimits | None = None
) -> None:
    """One tar of every path the checkpoint has (``final``; None: every one the generations hold),
    each from the latest generation that holds it, directories first. CheckpointUnusable for a
    member that is not a regular file, directory or link, and when the members' declared sizes or
    their number pass the export caps (``limits``): restoring must never write more than an
    episode may export."""
    caps = limits or ExportLimits()
    total = count = 0
    latest: dict[str, int] = {}
    for i, name in enumerate(tars):
        try:
            with contextlib.ExitStack() as stack:
                for n in _open_tar(root, name, stack).getnames():
                    latest[_clean(n)] = i
        except (OSError, tarfile.TarError) as exc:
            raise CheckpointUnusable(f"{name}: {exc}") from None
    with tarfile.open(out, "w") as merged:
        for i, name in enumerate(tars):
            with contextlib.ExitStack() as stack:
                tar = _open_tar(root, name, stack)
                members = [
                    m
                    for m in tar.getmembers()
                    if latest.get(_clean(m.name)) == i and (final is None or _clean(m.name) in final)
                ]
                for member in sorted(members, key=lambda m: (not m.isdir(), m.name)):
                    if (why := _refused(member)) is not None:
                        raise CheckpointUnusable(f"{name}: {member.name[:80]!r} is {why}")
                    total += member.size if member.isreg() else 0
                    count += 1
                    if total > caps.max_bytes or count > caps.max_files:
                        raise CheckpointUnusable(
                            f"{name}: its files declare more than the export caps ({caps.max_bytes} bytes, "
                            f"{caps.max_files} entries)"
                        )
                    member.name = _clean(member.name)
                    merged.addfile(member, tar.extractfile(member) if member.isreg() else None)


class LocalFiles:
    """A workspace on this machine, read and written directly."""

    def __init__(self, root: Path, limits: ExportLimits | None = None) -> None:
        self.root = root
        self.limits = limits or ExportLimits()
        self._seen: dict[str, tree.Facts] = {}

    def _walk(self) -> "dict[str, tree.Facts]":
        return tree.walk(str(self.root))

    def baseline(self) -> None:
        self._seen = self._walk()

    def snapshot(self, root: Path, turn: int) -> Generation:
        now = self._walk()
        # over the export cap: ExportLimit before a byte is read (the next snapshot, if the files
        # shrink back, still holds every change since the last one taken)
        why = tree.over_caps(now, self.limits.max_bytes, self.limits.max_files)
        if why is not None:
            raise over_cap(self.limits, why)
        changed = tree.changed(self._seen, now)
        tar_name = paths_name = None
        if changed:
            size = sum(now[p][3] for p in changed if stat.S_ISREG(now[p][0]))
            # A turn's few small edits: the tar made in memory and appended at once; a large one
            # streamed through a temporary file (never held in memory whole).
            if size <= _IN_MEMORY:
                buf = io.BytesIO()
                with tarfile.open(fileobj=buf, mode="w") as tar:
                    left_out = tree.add_changed(tar, str(self.root), changed, now)
                tar_name = append_part(root, buf.getvalue())
            else:
                with tempfile.TemporaryDirectory(prefix="harness-generation-", dir=root) as tmp:
                    with tarfile.open(Path(tmp) / "gen.tar", "w") as tar:
                        left_out = tree.add_changed(tar, str(self.root), changed, now)
                    tar_name = append_part(root, Path(tmp) / "gen.tar")
            for path in left_out:  # not in this checkpoint; new again to the next one
                del now[path]
        if now.keys() != self._seen.keys():
            paths_name = append_part(root, tree.listing(now))
        self._seen = now
        return Generation(tar_name, paths_name)

    def restore(self, root: Path, tars: list[str], paths: str | None) -> None:
        final = read_paths(root, paths) if paths is not None else None
        with tempfile.TemporaryDirectory(prefix="harness-restore-") as tmp:
            merged = Path(tmp) / "merged.tar"
            merged_tar(root, tars, final, merged, self.limits)
            if final is not None:
                present = self._walk()
                # deepest first: a directory's contents before the directory
                for path in sorted(present, key=lambda p: -p.count("/")):
                    if final.get(path) != tree.kind(present[path][0]):
                        _remove(self.root / path)
            try:
                with tarfile.open(merged) as tar:
                    tar.extractall(self.root, filter="tar")
            except (OSError, tarfile.TarError) as exc:
                raise CheckpointUnusable(f"the files could not be put back ({exc})") from None
        missing = [p for p in final or () if not os.path.lexists(self.root / p)]
        if missing:
            raise CheckpointUnusable(
                f"{len(missing)} file(s) of the checkpoint are missing, e.g. {missing[0]}"
            )
        self.baseline()


def _remove(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            remove_tree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        pass


class SandboxFiles:
    """Any sandbox, through its verbs: ``find`` / ``tar`` inside it and one copy out per checkpoint."""

    def __init__(self, sandbox: Sandbox, limits: ExportLimits | None = None) -> None:
        self.sandbox = sandbox
        self.limits = limits or ExportLimits()
        self.workdir = sandbox.workdir
        self._listing: bytes | None = None
        self._listing_sum: str | None = None  # the listing's cksum in the sandbox, as last copied out

    def _run(self, script: str, what: str) -> str:
        result = self.sandbox.exec(script, cwd=self.workdir, user="root", timeout=600)
        if result.exit_code != 0:
            raise CheckpointUnusable(
                f"{what} failed in the sandbox ({result.exit_code}): {result.output[-300:]}"
            )
        return result.output

    def _list(self) -> str:
        return "find . -mindepth 1 -printf '%y %p\\0' | sed -z 's/^[^fdl] /o /; s/^\\(.\\) \\.\\//\\1 /' | sort -z"

    def baseline(self) -> None:
        wd = shlex.quote(self.workdir)
        said = self._run(
            f"set -e; export LC_ALL=C; cd {wd}; touch {STAMP}; rm -rf {_OUT}; mkdir -p {_OUT}; "
            f"{self._list()} > {_OUT}/paths; {_said('0')}",
            "marking the checkpoint baseline",
        )
        with tempfile.TemporaryDirectory(prefix="harness-baseline-") as tmp:
            self.sandbox.copy_out(_OUT, Path(tmp))
            self._listing = (Path(tmp) / "paths").read_bytes()
        self._listing_sum = _said_sum(said)[1]

    def snapshot(self, root: Path, turn: int) -> Generation:
        wd = shlex.quote(self.workdir)
        said = self._run(
            f"set -e; export LC_ALL=C; cd {wd}; touch {STAMP}.new; rm -rf {_OUT}; mkdir -p {_OUT}; "
            # over the export cap (files at their full size, sparse ones too): nothing copied, the
            # stamp kept, so the next snapshot still holds every change since the last one taken
            f"if find . -mindepth 1 -printf '%y %s\\n' | awk -v mb={self.limits.max_bytes} "
            f"-v mf={self.limits.max_files} '{{n++; if ($1 == \"f\") b += $2}} END {{exit !(n > mf || b > mb)}}'; "
            f"then rm -f {STAMP}.new; echo '{_SAID} over'; exit 0; fi; "
            # no stamp (the in-container watcher was lost, daemon_files.py): every path, once
            f"if [ -e {STAMP} ]; then find . -mindepth 1 \\( -newer {STAMP} -o -cnewer {STAMP} \\) -print0; "
            f"else find . -mindepth 1 -print0; fi > {_OUT}/changed.list; "
            f"{self._list()} > {_OUT}/paths; "
            f"if [ -s {_OUT}/changed.list ]; then "
            f"tar -cf {_OUT}/changed.tar --null --no-recursion -T {_OUT}/changed.list; fi; "
            f"rm -f {_OUT}/changed.list; mv {STAMP}.new {STAMP}; "
            f"if [ -e {_OUT}/changed.tar ]; then {_said('1')}; else {_said('0')}; fi",
            "saving the sandbox's changed files",
        )
        if f"{_SAID} over" in said:
            raise over_cap(self.limits, "at a checkpoint, counted in the sandbox")
        changed, listing_sum = _said_sum(said)
        if changed is False and listing_sum is not None and listing_sum == self._listing_sum:
            # nothing changed and the same paths (a copy out costs as much as the exec): no generation
            return Generation(None, None)
        self._listing_sum = listing_sum
        with tempfile.TemporaryDirectory(prefix="harness-snapshot-", dir=root) as tmp:
            out = Path(tmp)
            self.sandbox.copy_out(_OUT, out)
            if not (out / "paths").is_file():
                raise CheckpointUnusable("the sandbox's changed files did not come out")
            tar_name = paths_name = None
            if (out / "changed.tar").is_file():
                tar_name = append_part(root, out / "changed.tar")
            listing = (out / "paths").read_bytes()
            if listing != self._listing:
                paths_name = append_part(root, listing)
                self._listing = listing
        return Generation(tar_name, paths_name)

    def restore(self, root: Path, tars: list[str], paths: str | None) -> None:
        self.put_back(root, tars, paths)
        self.baseline()

    def put_back(self, root: Path, tars: list[str], paths: str | None) -> None:
        """The checkpoint's files into the (fresh) sandbox: one copy in, one exec."""
        final = read_paths(root, paths) if paths is not None else None
        with tempfile.TemporaryDirectory(prefix="harness-restore-") as tmp:
            stage = Path(tmp) / "stage"
            stage.mkdir()
            merged_tar(root, tars, final, stage / "merged.tar", self.limits)
            if final is not None:
                (stage / "keep").write_bytes(tree.listing_of(final))
            self.sandbox.copy_in(stage, _OUT)
        wd = shlex.quote(self.workdir)
        # what the fresh sandbox has and the checkpoint has not (or as another kind): removed
        prune = (
            f"{self._list()} > {_OUT}/now; sort -z {_OUT}/keep > {_OUT}/keep.sorted; "
            f"comm -z -23 {_OUT}/now {_OUT}/keep.sorted | sed -z 's/^. //' | xargs -0 -r rm -rf --; "
            if final is not None
            else ""
        )
        self._run(
            f"set -e; export LC_ALL=C; cd {wd}; {prune}tar -xpf {_OUT}/merged.tar; rm -rf {_OUT}",
            "putting the checkpoint's files back",
        )


_SAID = "harness-checkpoint"


def _said(changed: str) -> str:
    """The shell that ends a checkpoint's exec with one line: whether files changed, and the
    listing's checksum (the same on a turn that changed nothing: no copy out then)."""
    return f"printf '{_SAID} {changed} %s\\n' \"$(cksum < {_OUT}/paths)\""


def _said_sum(output: str) -> tuple[bool | None, str | None]:
    """(files changed, the listing's checksum) from an exec's output; (None, None) when it has no
    such line (then the files are copied out as if changed)."""
    for line in reversed(output.splitlines()):
        if line.startswith(f"{_SAID} "):
            _, changed, listing_sum = line.split(" ", 2)
            return changed == "1", listing_sum.strip()
    return None, None


__all__ = [
    "DATA",
    "CheckpointUnusable",
    "FileSnapshots",
    "LocalFiles",
    "SandboxFiles",
    "append_part",
    "part_end",
    "part_exists",
]
