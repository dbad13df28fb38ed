"""Verification the agent cannot reach: which tasks get a fresh sandbox, and what runs and counts there.

A task is verified in one of two modes (``verify_mode``):

- ``fresh``: native tasks (a task directory with ``environment/workspace/``, the built-in suites)
  and SWE-bench instances. The tests run in a new sandbox that holds only the task's own files
  plus the agent's final workspace (as SWE-bench applies a patch to a clean image): a new
  container from the task's image (the agent's container is removed), or under --runtime local a
  private directory with a copy of the workspace (links copied as links, never followed). Nothing
  the agent changed elsewhere in its sandbox (an interpreter, pytest, PATH, its home) counts. A
  native task's tests run through the guarded runner (guard.py: ``$PYTHON`` and ``python``,
  ``python3``, ``pytest`` first on PATH), from a private copy the tested code cannot write (a
  container's root-owned ``/tests``, the tests running as the unprivileged ``agent``), and its
  reward is the test script's exit status alone: a reward file written while the tests ran is
  ignored (the tested code could have written it) and the note says so. A SWE-bench instance's
  tests run as SWE-bench runs them (as root, its own test command) and the log is graded here.
- ``shared``: Harbor tasks, in the agent's own sandbox after the agent, as Harbor does by default
  (its ``[verifier] environment_mode = "separate"`` is not run yet, issue 23: such tasks are
  verified shared too). The agent could have tampered with what the tests use there: the record
  says ``verify_mode = "shared"`` and the headline counts such episodes.

Residual risk (see guard.py for the runner's): the tested code still runs with the tests, so it
can attack them from inside their process; under --runtime local it runs with your privileges
and could change the interpreter or pytest the tests use, or the harness itself.
"""

import functools
import hashlib
import importlib.metadata
import os
import re
import shlex
import shutil
from pathlib import Path
from typing import BinaryIO, Literal

from harness.tasks.loader import Task
from harness.tasks.swebench import SPEC_FILE

VerifyMode = Literal["fresh", "shared", "separate"]
GUARD_SOURCE = Path(__file__).with_name("guard.py")
CHECKS_SOURCE = Path(__file__).with_name("checks.py")  # the tests' ``harness_checks``
GUARD_PREFIX = "[harness-guard]"
CONTAINER_GUARD_DIR = "/opt/harness-verify"
OUTPUT_CAP = 1 << 20  # bytes of a verifier's output kept (its head and its end)
WORKSPACE_COPY_CAP = 2 << 30  # bytes of a local workspace copied for its tests
_GUARD_LINE = re.compile(r"^\[harness-guard\] (.+)$", re.MULTILINE)


# Benchmarks only (bench/fresh_verify.py compares the two modes' cost): every task verified in
# this mode. Never set it for an evaluation: "shared" hands the tests back to the agent's sandbox.
FORCED_MODE: VerifyMode | None = None


def is_swebench(task: Task) -> bool:
    return (task.tests_dir / SPEC_FILE).is_file()


def verify_mode(task: Task) -> VerifyMode:
    """``fresh`` for native and SWE-bench tasks, ``shared`` for Harbor tasks (module docstring),
    ``separate`` for a Harbor task whose verifier has an environment of its own."""
    if FORCED_MODE is not None:
        return FORCED_MODE
    if task.harbor is not None and task.harbor.verifier_mode == "separate":
        return "separate"  # Harbor's separate verifier (runtime/separate_verify.py)
    if task.image is None and task.container is None:
        return "fresh"
    return "fresh" if is_swebench(task) else "shared"


def guarded(task: Task) -> bool:
    """Whether the task's tests run through guard.py and score by exit status alone."""
    return task.image is None and task.container is None


# ---- the guarded runner's files ------------------------------------------------------------------


def _wrapper(python: str, guard: str) -> str:
    # -S: the guard itself needs the standard library alone (and starts faster without site)
    return f'#!/bin/sh\nexec {python} -I -S {shlex.quote(guard)} "$@"\n'


def write_guard(dest: Path, *, runner_path: list[str], site: bool, python: str | None, bin_dir: str) -> None:
    """guard.py, guard.conf and the ``bin/`` of wrappers (python, python3, pytest) in ``dest``.

    ``bin_dir`` and the guard's path are as the tests will see them (a container's paths may differ
    from ``dest``); ``python``: the interpreter, else the first ``python3`` on PATH after ``bin_dir``
    (a container image's). ``site``/``runner_path``: see guard.py.
    """
    guard_dir = bin_dir.rsplit("/", 1)[0]
    (dest / "bin").mkdir(parents=True, exist_ok=True)
    (dest / "lib").mkdir(exist_ok=True)
    shutil.copy(GUARD_SOURCE, dest / "guard.py")
    shutil.copy(CHECKS_SOURCE, dest / "lib" / "harness_checks.py")
    (dest / "lib" / "harness_checks.py").chmod(0o644)
    conf = [f"site {int(site)}", *(f"path {p}" for p in runner_path)]
    (dest / "guard.conf").write_text("".join(f"{line}\n" for line in conf))
    if python is None:
        lookup = f'"$(PATH=${{PATH#{bin_dir}:}}; command -v python3 || echo python3)"'
        launcher = _wrapper(lookup, f"{guard_dir}/guard.py")
    else:
        launcher = _wrapper(shlex.quote(python), f"{guard_dir}/guard.py")
    for name in ("python", "python3"):
        (dest / "bin" / name).write_text(launcher)
    (dest / "bin" / "pytest").write_text(f'#!/bin/sh\nexec {shlex.quote(bin_dir)}/python -m pytest "$@"\n')
    for f in (dest / "bin").iterdir():
        f.chmod(0o755)
    (dest / "guard.py").chmod(0o644)


@functools.cache
def _pytest_closure() -> tuple[str, ...]:
    """The files and directories that make up pytest and what it requires here (markers
    evaluated): what a local runner's ``sys.path`` holds besides the standard library."""
    from packaging.requirements import Requirement

    seen: set[str] = set()
    paths: list[str] = []
    todo = ["pytest"]
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        tops = {Path(str(f)).parts[0] for f in dist.files or () if not str(f).startswith("..")}
        for top in sorted(tops):
            if top.endswith((".dist-info", ".egg-info", ".data")) or top == "__pycache__":
                if top.endswith(".dist-info"):  # entry points and versions, as pytest reads them
                    paths.append(str(dist.locate_file(top)))
                continue
            located = Path(str(dist.locate_file(top)))
            if located.exists() and (located.is_dir() or located.suffix in (".py", ".so")):
                paths.append(str(located))
        for req in dist.requires or ():
            parsed = Requirement(req)
            if parsed.marker is None or parsed.marker.evaluate({"extra": ""}):
                todo.append(parsed.name)
    return tuple(paths)


def write_local_guard(dest: Path, python: str | None) -> Path:
    """The guarded runner for --runtime local in ``dest``; its ``bin/``. ``python``: the user's
    interpreter for tasks ($HARNESS_TASK_PYTHON: its own packages, isolated); None: this
    harness's, with the standard library and pytest's files alone (linked into ``dest/view``),
    so neither the harness's packages nor the workspace can shadow what the tests import."""
    import sys

    runner_path: list[str] = []
    if python is None:
        view = dest / "view"
        view.mkdir(parents=True)
        for p in _pytest_closure():
            link = view / Path(p).name
            if not link.exists():
                link.symlink_to(p)
        runner_path = [str(view)]
    write_guard(
        dest,
        runner_path=runner_path,
        site=python is not None,
        python=python or sys.executable,
        bin_dir=str(dest / "bin"),
    )
    return dest / "bin"


# ---- what the tests left ------------------------------------------------------------------------


def read_capped(fh: BinaryIO, cap: int = OUTPUT_CAP) -> str:
    """An output file's text, its middle left out past ``cap`` bytes."""
    size = fh.seek(0, os.SEEK_END)
    fh.seek(0)
    if size <= cap:
        return fh.read().decode(errors="replace")
    head = fh.read(cap // 2)
    fh.seek(size - cap // 2)
    tail = fh.read()
    cut = f"\n[harness] ... {size - len(head) - len(tail)} bytes of output left out ...\n".encode()
    return (head + cut + tail).decode(errors="replace")


class CappedBytes:
    """A stream's bytes kept up to ``cap``: its head, and its end in a rolling window."""

    def __init__(self, cap: int = OUTPUT_CAP) -> None:
        self.cap = cap
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.cap // 2 - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.cap // 2:
                self.dropped += len(self.tail) - self.cap // 2
                del self.tail[: len(self.tail) - self.cap // 2]

    def text(self) -> str:
        cut = f"\n[harness] ... {self.dropped} bytes of output left out ...\n" if self.dropped else ""
        return bytes(self.head).decode(errors="replace") + cut + bytes(self.tail).decode(errors="replace")


def guard_findings(output: str) -> list[str]:
    """What guard.py reported as tampering in a test run's output."""
    return [m.strip() for m in _GUARD_LINE.findall(output)]


def score_exit(
    code: int | None, timed_out: bool, written: tuple[float, str] | None, reward_file: str, output: str
) -> tuple[float, str | None, str]:
    """A guarded (native) task's reward: its test script's exit status alone. Also what the
    harness saw of tampering (the guard's findings; a reward file claiming more than the exit
    status gives), and a remark for the output when a reward file was written and ignored."""
    reward = 1.0 if code == 0 and not timed_out else 0.0
    found = guard_findings(output)
    if found:
        reward = 0.0
    remark = ""
    if written is not None:
        ignored = (
            f"{reward_file} was written while the tests ran (reward {written[0]:g}) and ignored: a "
            "native task's reward is its test script's exit status"
        )
        if written[0] > reward:
            found.append(ignored)
        else:
            remark = f"\n[harness] {ignored}"
    return reward, "; ".join(found) or None, remark


def tree_digest(*roots: Path) -> str:
    """A digest of every file, link and directory under ``roots`` (names, contents, link targets)."""
    h = hashlib.sha256()
    for root in roots:
        if not root.exists():
            continue
        for parent, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(parent, d))]):
                path = os.path.join(parent, name)
                h.update(os.path.relpath(path, root).encode() + b"\0")
                if os.path.islink(path):
                    h.update(b"L" + os.readlink(path).encode())
                else:
                    try:
                        with open(path, "rb") as fh:
                            h.update(hashlib.sha256(fh.read()).digest())
                    except OSError:
                        h.update(b"?")
                h.update(b"%o" % (os.lstat(path).st_mode & 0o7777))
            for d in dirs:
                h.update(os.path.relpath(os.path.join(parent, d), root).encode() + b"/\0")
    return h.hexdigest()


def copy_workspace(src: Path, dest: Path, cap: int = WORKSPACE_COPY_CAP) -> str | None:
    """``src``'s files into the new directory ``dest``: links as links (never followed), other
    special files and what cannot be read left out, files past ``cap`` bytes in all left out;
    why anything was left out, or None."""
    dest.mkdir(parents=True)
    total = 0
    over: list[str] = []
    unreadable = 0
    for parent, dirs, files in os.walk(src):
        rel = os.path.relpath(parent, src)
        out = dest / rel if rel != "." else dest
        for name in sorted(dirs + files):
            path = os.path.join(parent, name)
            target = out / name
            try:
                st = os.lstat(path)
                if os.path.islink(path):
                    os.symlink(os.readlink(path), target)
                elif name in dirs:
                    target.mkdir()
                elif os.path.isfile(path):
                    if total + st.st_size > cap:
                        over.append(os.path.relpath(path, src))
                        continue
                    shutil.copy2(path, target, follow_symlinks=False)
                    total += st.st_size
            except OSError:
                unreadable += 1
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(parent, d))]
    notes = []
    if over:
        notes.append(
            f"{len(over)} file(s) past the {cap >> 30} GiB copied for the tests left out (e.g. {over[0]})"
        )
    if unreadable:
        notes.append(f"{unreadable} unreadable entr{'y' if unreadable == 1 else 'ies'} left out")
    return "; ".join(notes) or None
