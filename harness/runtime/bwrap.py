"""The bwrap runtime: the episode's workspace is a directory on this machine, and every process of
the episode (the agent's commands and shell, the task's tests and solution) runs confined by
bubblewrap (Debian's ``bubblewrap``: Flatpak's sandbox; no daemon, no image).

What a confined process sees (an allow-list, not a deny-list): the system's programs and libraries
(``/usr`` and ``/etc`` read-only, with the shadow files and SSH keys hidden), the Python that runs
the tools and tests (read-only), its workspace (the only writable path), an empty ``/tmp``, a
``/proc`` of its own. Not the host user's home, ``/root``, other users' files, nor the harness's own
files and runs. It has namespaces of its own for PIDs (a ``kill -9 -1`` reaches only what it
started; no host process is visible), IPC, UTS and the network (only its own loopback: the model
server, this machine's services and the internet are out of reach; the agent's model calls are made
by the harness, outside), runs with no capabilities, and dies with the harness. Its environment is
the episode's own (harness/host_env.py), never the harness's.

The one tool that acts in the harness process, OpenHands' file editor, is confined by path: a
path that resolves outside the workspace is refused (sdk_tuning.py).
"""

import contextlib
import functools
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.errors import HarnessError
from harness.host_env import task_env
from harness.leader import Leader
from harness.runtime.base import SandboxConfig, SandboxPrep
from harness.runtime.export_caps import ExportLimits
from harness.runtime.local import LocalRuntime, LocalSandbox
from harness.runtime.procs import kill_session
from harness.seam import ExecResult
from harness.tasks import Task, VerifyResult, prepare_workspace, run_solution, run_tests
from harness.tasks.fresh import read_capped

INSTALL = "install bubblewrap (Debian: apt-get install bubblewrap; scripts/bootstrap does it as root)"
# Read-only system paths, where they exist; /bin, /lib, /lib64 and /sbin as they are on this
# machine (a merged-/usr system's symlinks, or directories of their own).
_SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
# What of /etc stays out of reach: the password hashes, SSH host keys, sudo's rules.
_HIDDEN_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/sudoers")
_HIDDEN_DIRS = ("/etc/ssh", "/etc/sudoers.d", "/etc/ssl/private")


def _pythons() -> list[Path]:
    """The prefixes the tools' and the tests' Python needs (this venv, its base interpreter, the
    task Python given by $HARNESS_TASK_PYTHON), read-only inside."""
    found = {Path(sys.prefix), Path(sys.base_prefix), Path(sysconfig.get_paths()["stdlib"]).parent}
    task = os.environ.get("HARNESS_TASK_PYTHON")
    if task and os.path.isabs(task):
        found.add(Path(os.path.realpath(task)).parent.parent)
    return sorted(p.resolve() for p in found if p.exists())


def _reaper() -> Path:
    from harness.runtime import procs

    return Path(procs.__file__).with_name("reaper.py").resolve()


def bwrap_argv(
    argv: Sequence[str],
    *,
    writable: Sequence[Path],
    cwd: Path,
    readable: Sequence[Path] = (),
    die_with_parent: bool = True,
) -> list[str]:
    """``argv`` confined (module docstring): ``writable`` bound read-write at their own paths (the
    workspace), ``readable`` read-only, the working directory ``cwd``. ``die_with_parent``: killed
    when the thread that started it ends (Linux's parent-death signal follows the thread, not the
    process: a helper started from a short-lived pool thread must go without it)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise HarnessError(f"--runtime bwrap: no bwrap on PATH; {INSTALL}")
    out = [
        bwrap,
        *(["--die-with-parent"] if die_with_parent else []),
        "--unshare-all",  # user, IPC, PID, network, UTS and cgroup namespaces of its own
        "--cap-drop",
        "ALL",
        "--hostname",
        "sandbox",
    ]
    for path in _SYSTEM:
        if os.path.islink(path):
            out += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            out += ["--ro-bind", path, path]
    out += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp", "--tmpfs", "/run"]
    out += ["--dir", "/home/agent", "--setenv", "HOME", "/home/agent"]
    for path in _HIDDEN_FILES:
        if os.path.exists(path):
            out += ["--ro-bind", "/dev/null", path]
    for path in _HIDDEN_DIRS:
        if os.path.isdir(path):
            out += ["--tmpfs", path]
    for ro in sorted({*_pythons(), _reaper(), *(p.resolve() for p in readable)}):
        out += ["--ro-bind", str(ro), str(ro)]
    for rw in writable:
        resolved = os.path.abspath(rw)
        out += ["--bind", resolved, resolved]
    return [*out, "--chdir", str(Path(os.path.abspath(cwd))), "--", *argv]


@functools.cache
def usable() -> str | None:
    """None when bwrap confines a command here; else why not (one line). Probed once per process."""
    if shutil.which("bwrap") is None:
        return f"no bwrap on PATH; {INSTALL}"
    try:
        probe = subprocess.run(
            bwrap_argv(["/bin/sh", "-c", "test ! -e /proc/1/root/nonexistent"], writable=[], cwd=Path("/")),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap does not run here ({exc})"
    if probe.returncode != 0:
        why = " ".join(probe.stderr.split())[:200] or f"exit status {probe.returncode}"
        return f"bwrap cannot make its namespaces here ({why}): unprivileged user namespaces may be off"
    return None


class BwrapSandbox(LocalSandbox):
    """A directory on this machine whose every process runs confined (module docstring)."""

    def confine(
        self,
        argv: Sequence[str],
        writable: Sequence[Path] = (),
        cwd: Path | None = None,
        helper: bool = False,
    ) -> list[str]:
        """``argv`` confined to this sandbox: its workspace and ``writable`` the paths it may write."""
        return bwrap_argv(
            argv,
            writable=[self._workspace, *writable],
            cwd=cwd or self._workspace,
            die_with_parent=not helper,
        )

    def helper_prefix(self, writable: Sequence[Path] = ()) -> tuple[str, ...]:
        """The command prefix of a long-lived helper in this sandbox (the agent's shell: the episode
        ends its session, the run's stop kills it)."""
        return tuple(self.confine([], writable, helper=True))

    @property
    def confined_to(self) -> Path | None:
        """The one directory an in-process tool (the file editor) may touch."""
        return self._workspace

    def exec(
        self,
        cmd: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """``cmd`` confined, its output to a file (as LocalSandbox.exec: a daemon it leaves holds no
        pipe); it and everything it started end with it (its PID namespace's init dies)."""
        import tempfile

        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        where = self._path(cwd) if cwd else self._workspace
        with tempfile.TemporaryFile() as out:
            proc = subprocess.Popen(
                self.confine(argv, cwd=where),
                env=task_env(env or {}),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            leader = Leader.of(proc.pid)
            try:
                code: int | None = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                code = None
            finally:
                kill_session(leader)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
            return ExecResult(exit_code=code, output=read_capped(out), timed_out=code is None)

    def run_solution(self) -> tuple[bool, str]:
        return run_solution(
            self.task, self._workspace, timeout=self.task.limits.agent_timeout_s, wrap=self._wrap
        )

    def verify(self) -> VerifyResult:
        return run_tests(self.task, self._workspace, wrap=self._wrap)

    @staticmethod
    def _wrap(argv: list[str], writable: Sequence[Path], readable: Sequence[Path], cwd: Path) -> list[str]:
        """How verify.py runs a test script or solution here: confined, writing only ``writable``
        (its scratch directory and the workspace), reading ``readable`` too (the script's directory)."""
        return bwrap_argv(argv, writable=writable, readable=readable, cwd=cwd)


class BwrapRuntime(LocalRuntime):
    name = "bwrap"
    images = False

    def prepare(self, run_dir: Path, tasks: list[Task], keep: frozenset[str] = frozenset()) -> None:
        if (why := usable()) is not None:
            raise HarnessError(f"--runtime bwrap: {why}")

    def open(
        self, task: Task, episode_dir: Path, key: str, *, agent: bool = True, prep: SandboxPrep | None = None
    ) -> BwrapSandbox:
        workspace = episode_dir / "workspace"
        prepare_workspace(task, workspace)
        return BwrapSandbox(task, workspace, self.exports)

    def reopen(self, task: Task, episode_dir: Path, key: str) -> BwrapSandbox:
        return BwrapSandbox(task, episode_dir / "workspace", self.exports)


def make_runtime(config: SandboxConfig) -> BwrapRuntime:
    """The registry's factory (harness/registry.py)."""
    return BwrapRuntime(config.exports if config else ExportLimits())
