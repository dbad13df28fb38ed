"""The docker runtime: each episode in its own container, through the docker SDK.

Any engine that speaks the Docker API works (Docker, podman's API service; engine.py finds or
starts one). Per episode:

- a container from the task's image (the default sandbox image for tasks that bring none),
  labelled with the run and the episode, with no network at all (the agent loop and the model
  calls stay in the harness process; only tool calls cross over, through a unix socket in a
  directory shared for that alone), limits on CPUs, memory and processes, the unprivileged user
  ``agent``, and no other file of this machine visible;
- the task's starting files copied into its working directory, the scaffold's tools served
  inside it by toolserver.py (the SDK's own executors);
- when the agent is done, the final files exported to the episode directory (up to the run's
  export caps: over them the episode is an error and nothing is exported). A native or
  SWE-bench task's container is removed then: its tests run in a fresh container from the image
  with only those files (container_verify.py). A Harbor task's container is stopped (Harbor's
  shared mode): verification starts it again, copies the tests in only then, runs them as root
  there, and removes the container; one that is gone by verification time (a killed run, a
  cleanup) is rebuilt from the image and the exported files.

Containers a killed run left behind are removed by the next run's ``prepare`` (kept only when
their episode still waits for verification in that very run).
"""

import contextlib
import hashlib
import os
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.progress import console
from harness.runtime.base import ContainerLimits
from harness.runtime.container_files import export_dir, extract_tar, put_dir, stage_name
from harness.runtime.container_verify import ExportedSandbox, exec_capped, verifier_name, verify_fresh
from harness.runtime.export_caps import ExportLimit, ExportLimits
from harness.runtime.images import AGENT_PYTHON, ensure_sandbox_image
from harness.runtime.owner import owner_labels, owner_state
from harness.runtime.task_images import TaskImageError, build_task_image, image_workdir, resolve_task_images
from harness.runtime.warm import WarmPool
from harness.tasks import Task, VerifyResult, prepare_workspace
from harness.tasks.fresh import verify_mode
from harness.tasks.harbor import LOGS_DIR, SOLUTION_DIR, TESTS_DIR
from harness.tasks.swebench_grading import grade_logs
from harness.tasks.verify import score_tests

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

    from harness.runtime.remote_tools import ToolClient

LABEL = "harness.episode"  # value: the episode key; every harness container has it
LABEL_RUN = "harness.run"  # a hash of the run directory's path
LABEL_IPC = "harness.ipc"  # its tool server's directory under IPC_ROOT (a warm container is renamed)
WARM = "warm"  # LABEL of a container started ahead of the episode that will take it (warm.py)
VERIFIER = "verify"  # LABEL of a fresh container for one verification (container_verify.py)
IPC_ROOT = Path(tempfile.gettempdir()) / "harness-ipc"  # short: a unix socket path holds 108 bytes
IPC_MOUNT = "/run/harness"
DEFAULT_WORKDIR = "/workspace"
AGENT_USER = "1000:1000"  # the sandbox image's `agent`
_TOOLS_START_TIMEOUT_S = 60.0
# What runs the tools in the container (standard library and openhands only: no harness there).
_TOOL_SERVER_FILES = (
    Path(__file__).with_name("toolserver.py"),
    Path(__file__).with_name("import_stubs.py"),
    Path(__file__).parent.parent / "episodes" / "ready_terminal.py",
)
# _fit in the container: exit 3 without the agent's tools, 0 with a user `agent` (the working
# directory made and given to it), 4 without one (made, left to root).
_FIT_SCRIPT = """
test -x "$1" || exit 3
mkdir -p "$2"
id -u agent >/dev/null 2>&1 || exit 4
[ "$2" = / ] || chown -R "$3" "$2" || true  # as before: a failed chown leaves the user agent
"""
# run_solution() in the container: $1 solution dir, $2 where its files were copied, $3 logs dir,
# $4 working directory (made: an image's WORKDIR need not exist), then the command.
_SOLVE_SCRIPT = """
rm -rf "$1" && mkdir -p "$3/agent" "$4" && mv "$2" "$1" && cd "$4" || exit 90
shift 4
exec "$@"
"""
# verify() in the container: $1 tests dir, $2 where they were copied, $3 logs dir, $4 working
# directory, then the command. The tests' output goes to stderr, then the verifier logs as a tar
# to stdout (nothing when the image has no tar: the caller copies them out then); the tests'
# exit code.
_VERIFY_SCRIPT = """
rm -rf "$1" "$3/verifier" && mkdir -p "$3/verifier" "$3/agent" "$4" && mv "$2" "$1" && cd "$4" || exit 90
logs=$3/verifier
shift 4
"$@" 1>&2
code=$?
tar -C "$logs" -cf - . 2>/dev/null
exit $code
"""


def run_label(run_dir: Path) -> str:
    return hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:12]


def container_name(run: str, key: str) -> str:
    return f"harness-{run}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


class ContainerSandbox:
    def __init__(
        self,
        runtime: "ContainerRuntime",
        task: Task,
        container: "Container",
        episode_dir: Path,
        ipc_dir: Path | None,
        *,
        launched: bool = False,
    ) -> None:
        self.runtime, self.task, self.container = runtime, task, container
        self._episode_dir = episode_dir
        self._ipc_dir = ipc_dir
        self._launched = launched  # a warm container's tool server is already starting
        self._id = uuid.uuid4().hex
        self._client: ToolClient | None = None
        self._exported = False

    @property
    def host_workspace(self) -> Path:
        return self._episode_dir / "workspace"

    @property
    def agent_workdir(self) -> str:
        return self.runtime.workdir(self.task)

    def instruction(self) -> str:
        return self.task.instruction  # container paths are real in here: nothing to rewrite

    def tool_params(self) -> dict[str, dict[str, Any]]:
        return {"terminal": {"sandbox": self._id}, "file_editor": {"sandbox": self._id}}

    def start_tools(self, terminal_type: str) -> None:
        """Start the tool server in the container (before the conversation; the first tool call
        waits for it to answer); a warm container's is already starting."""
        from harness.runtime.remote_tools import ToolClient, attach

        assert self._ipc_dir is not None
        if not self._launched:
            self.runtime.launch_tools(self.container, self._ipc_dir, self.task, terminal_type)
        limits = self.runtime.limits_for(self.task)
        client = ToolClient(
            self._ipc_dir / "tools.sock",
            self.loss,
            f"{limits.memory_gib:g} GiB",
            probe=self.probe,
            call_limit_s=self.task.limits.agent_timeout_s,
        )
        client.connect_later(_TOOLS_START_TIMEOUT_S, alive=self._running)
        self._client = client
        attach(self._id, client, self.agent_workdir)

    def _running(self) -> bool:
        from docker.errors import NotFound

        try:
            self.container.reload()
        except NotFound:
            return False
        except Exception:  # a slow or busy engine is not a dead container: the deadline decides
            return True
        return bool(self.container.status == "running")

    def probe(self) -> RuntimeError | None:
        """The container seen from outside while a tool call is pending: gone, or at its process limit."""
        from harness.runtime.remote_tools import SandboxLimit

        try:
            stats = self.container.stats(stream=False, one_shot=True)
            self.container.reload()
        except Exception:
            return self.loss()
        if self.container.status != "running":
            return self.loss()
        pids = (stats.get("pids_stats") or {}).get("current")
        limit = self.runtime.limits_for(self.task).pids
        if isinstance(pids, int) and pids >= limit - 2:
            return SandboxLimit(f"the container reached its limit of {limit} processes ({pids} running)")
        return None

    def failure(self) -> BaseException | None:
        return self._client.failure if self._client is not None else None

    def loss(self) -> RuntimeError:
        """Why the tools stopped answering, decided by cause: the container gone or stopped from
        outside, or the tool server failing on its own, is the infrastructure's (SandboxLost: retried,
        never scored); a memory limit the agent's commands hit (SandboxLimit) and a tool server the
        agent killed (SandboxDestroyed) are the model's outcome. The agent can kill it only where it
        runs as root (an image without the user ``agent``): elsewhere the server is root's and the
        agent's processes are not (toolserver.py)."""
        from harness.runtime.remote_tools import FAILED_NOTE, SandboxDestroyed, SandboxLimit, SandboxLost

        name = self.container.name
        try:
            self.container.reload()
        except Exception:
            return SandboxLost(f"container {name} is gone (removed or the engine restarted)")
        state = self.container.attrs.get("State") or {}
        memory = f"{self.runtime.limits_for(self.task).memory_gib:g} GiB"
        oom = "the kernel killed a process out of memory"
        if state.get("OOMKilled") or (self.container.status == "running" and (oom := self._oom_kills())):
            return SandboxLimit(f"the container's memory limit ({memory}) was exceeded: {oom}")
        if self.container.status != "running":
            return SandboxLost(
                f"container {name} stopped ({self.container.status}, exit code {state.get('ExitCode')})"
            )
        note = self._ipc_dir / FAILED_NOTE if self._ipc_dir is not None else None
        if note is not None and note.exists():
            tail = " ".join(note.read_text(errors="replace").strip().splitlines()[-1:])
            return SandboxLost(f"the tool server in container {name} failed: {tail}")
        if self.runtime.user(self.task) != "0":
            return SandboxLost(
                f"the tool server in container {name} exited (it runs as root: the agent's commands cannot end it)"
            )
        return SandboxDestroyed(
            f"the agent's commands killed the tool server in container {name} (e.g. kill -9 -1 or pkill python: "
            "the task's image has no user `agent`, so the agent runs as root and can end any process there); "
            "the container still runs and hit no limit: the model's outcome, scored 0"
        )

    def _oom_kills(self) -> str:
        """The container's out-of-memory kills as words ("" when none), read from its cgroup."""
        try:
            _, out = self.container.exec_run(
                ["cat", "/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"], user="0"
            )
        except Exception:
            return ""
        for line in (out or b"").decode(errors="replace").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit() and int(value) > 0:
                return f"the kernel killed {int(value)} process(es) out of memory"
        return ""

    def finish(self) -> None:
        """The agent is done: tools closed, final files exported, processes stopped. Files over the
        run's export caps are not exported (ExportLimit, raised once the container is stopped)."""
        from harness.runtime.remote_tools import detach

        detach(self._id)
        if self._client is not None:
            self._client.close()
        too_big: ExportLimit | None = None
        try:
            self._export()
        except ExportLimit as exc:
            too_big = exc
        fresh = verify_mode(self.task) == "fresh"
        with contextlib.suppress(Exception):
            if fresh:  # verified elsewhere: nothing here counts
                self.container.remove(force=True)
            else:
                # At once: the files are out, and ``sleep`` as PID 1 ignores SIGTERM, so a grace
                # period is only waited out (it was a second per episode).
                self.container.stop(timeout=0)
        if fresh and self._ipc_dir is not None:  # nothing mounts it again
            shutil.rmtree(self._ipc_dir, ignore_errors=True)
        # Else the (now empty) shared directory stays until close: the stopped container mounts
        # it again when verification starts it.
        elif self._ipc_dir is not None:
            for leftover in self._ipc_dir.iterdir():
                if leftover.is_dir() and not leftover.is_symlink():
                    shutil.rmtree(leftover, ignore_errors=True)
                else:
                    leftover.unlink(missing_ok=True)
        if too_big is not None:
            raise too_big

    def _export(self) -> None:
        """The agent's final files into the episode directory; ExportLimit over the run's caps."""
        self.host_workspace.mkdir(parents=True, exist_ok=True)
        self._exported = True
        try:
            export_dir(self.container, self.agent_workdir, self.host_workspace, self.runtime.exports)
        except ExportLimit:
            raise
        except Exception:  # a container already gone has nothing to export
            pass

    def _ensure_running(self) -> None:
        self.container.reload()
        if self.container.status != "running":
            self.container.start()

    def run_solution(self) -> tuple[bool, str]:
        """The reference solution as Harbor's oracle runs it: solution/ copied to /solution, then
        ``bash /solution/solve.sh`` as root in the working directory with ``[solution] env``,
        within the agent's time limit; (ok, output tail)."""
        task = self.task
        if not task.solution.is_file():
            return False, f"{task.solution} is missing"
        timeout = task.limits.agent_timeout_s
        self._ensure_running()
        code, output = self._staged_run(
            _SOLVE_SCRIPT,
            task.solution.parent,
            SOLUTION_DIR,
            task.solution.name,
            timeout,
            {**(task.container.env if task.container else {}), **task.solution_env},
        )
        tail = output.decode(errors="replace")[-2000:] if output else ""
        if code in (124, 137):
            tail += f"\n[harness] solve.sh timed out after {timeout:g} s"
        elif code != 0:
            tail += f"\n[harness] solve.sh exited with {code}"
        return code == 0, tail

    def _staged_run(
        self,
        script: str,
        src: Path,
        dest: str,
        entry: str,
        timeout: float,
        env: dict[str, str],
        *,
        demux: bool = False,
    ) -> Any:
        """``src`` copied to ``dest`` and ``bash dest/entry`` run there as root within ``timeout``,
        by ``script`` (_SOLVE_SCRIPT, _VERIFY_SCRIPT) in one exec: each exec is a process start in
        the engine (~50 ms of CPU). The files go to a fresh place nothing in the container can
        know beforehand, and the exec moves them to ``dest``."""
        stage = stage_name()
        put_dir(self.container, src, stage, owner=(0, 0), make=True)
        cmd = ["sh", "-c", script, "-", dest, stage, LOGS_DIR, self.agent_workdir,
               "timeout", "-k", "5", f"{timeout:g}", "bash", f"{dest}/{entry}"]  # fmt: skip
        if demux:  # the tests' output read as a stream, capped (verify)
            return exec_capped(self.container, cmd, user="0", workdir="/", env=env)
        return self.container.exec_run(cmd, user="0", workdir="/", environment=env)  # workdir: see script

    def verify(self) -> VerifyResult:
        """The task's tests: in a fresh container with this one's final files (a native or
        SWE-bench task: this one is removed first), or in this container (Harbor's shared mode)."""
        if verify_mode(self.task) == "fresh":
            if not self._exported:  # tasks verify: the reference solution ran here
                self._export()
            with contextlib.suppress(Exception):
                self.container.remove(force=True)
            return verify_fresh(self.runtime, self.task, self.host_workspace, self._episode_dir)
        return self._verify_shared()

    def _verify_shared(self) -> VerifyResult:
        """The task's tests in this container, copied in only now, run as root with a time limit."""
        task = self.task
        start = time.monotonic()
        timeout = task.limits.verify_timeout_s
        self._ensure_running()
        tests = TESTS_DIR
        env = {
            **(task.container.env if task.container else {}),
            **task.verifier_env,
            "WORKSPACE": self.agent_workdir,
            "PYTHON": "python3",
            "TESTS_DIR": tests,
            "TEST_DIR": tests,  # Terminal-Bench's name for it
            "REWARD_FILE": f"{LOGS_DIR}/verifier/reward.txt",
        }
        # The tests' output (stdout and stderr in order) on stderr, then what they wrote in the
        # verifier's log directory as a tar on stdout: fetching that with the engine's archive
        # call instead costs more than the tests of a small task.
        code, stdout, stderr = self._staged_run(
            _VERIFY_SCRIPT, task.tests_dir, tests, "test.sh", timeout, env, demux=True
        )
        tail = stderr.text()
        timed_out = code in (124, 137)
        with tempfile.TemporaryDirectory(prefix="harness-reward-") as tmp:
            if not extract_tar(stdout, Path(tmp)):  # no tar in the image: the engine's copy
                with contextlib.suppress(Exception):
                    export_dir(self.container, f"{LOGS_DIR}/verifier", Path(tmp))
            if not timed_out and (graded := grade_logs(task.tests_dir, Path(tmp))) is not None:
                tail += f"\n[harness] {graded}"  # a SWE-bench task: its log graded by swebench
                with contextlib.suppress(OSError):
                    self._episode_dir.mkdir(parents=True, exist_ok=True)
                    shutil.copy(Path(tmp) / "report.json", self._episode_dir / "swebench_report.json")
            reward, tail = score_tests(code, timed_out, Path(tmp), tail, timeout)
        return VerifyResult(
            resolved=reward >= 1.0,
            reward=reward,
            exit_code=None if timed_out else code,
            timed_out=timed_out,
            seconds=time.monotonic() - start,
            output_tail=tail[-2000:],
            output=tail,
        )

    def close(self) -> None:
        if self._client is not None:  # tools were started (not so for tasks verify's sandboxes)
            # Imported only here: remote_tools imports the OpenHands SDK (~4 s the first time).
            from harness.runtime.remote_tools import detach

            detach(self._id)
            self._client.close()
        with contextlib.suppress(Exception):
            self.container.remove(force=True)
        if self._ipc_dir is not None:
            shutil.rmtree(self._ipc_dir, ignore_errors=True)


@dataclass(frozen=True)
class _Warm:
    """A container started ahead of its episode, its tool server launched."""

    container: "Container"
    ipc_dir: Path
    user: str


_IPC_STALE_S = 3600.0  # a tool server's directory without a container this long is no run's


def _older(path: Path, seconds: float) -> bool:
    try:
        return time.time() - path.stat().st_mtime > seconds
    except OSError:
        return False


def _new_ipc_dir(name: str) -> Path:
    """The (empty) directory a container's tool server shares with the host: this user's, so the
    agent reads the tool server's files there but cannot change them (its socket is made by the
    server, which runs as root, and given to this user: only the harness connects)."""
    ipc_dir = IPC_ROOT / name
    shutil.rmtree(ipc_dir, ignore_errors=True)
    ipc_dir.mkdir(parents=True, mode=0o755)
    ipc_dir.chmod(0o755)  # whatever the umask: the agent's user runs the files in it
    return ipc_dir


class ContainerRuntime:
    name = "docker"

    def __init__(
        self,
        client: "docker.DockerClient",
        limits: ContainerLimits | None = None,
        image_map: dict[str, str] | None = None,
        exports: ExportLimits | None = None,
    ) -> None:
        self.client = client
        self.limits = limits or ContainerLimits()
        self.image_map = image_map or {}
        self.exports = exports or ExportLimits()
        self._run = ""
        self._image = ""
        self._task_images: dict[str, str | TaskImageError] = {}
        self._workdirs: dict[str, str] = {}
        self._users: dict[str, str] = {}
        self._lock = threading.Lock()
        self._terminal_type = "subprocess"
        self._pool: WarmPool[Task, _Warm] = WarmPool(
            self._make_warm, self._drop_warm, self._warm_spec, settle=self._settle_warm
        )
        self._verifiers: WarmPool[Task, Container] = WarmPool(
            self._make_verifier, self._drop_verifier, self._verifier_spec
        )
        self._removing: list[threading.Thread] = []  # verifier containers being removed

    def prepare(self, run_dir: Path, tasks: list[Task], keep: frozenset[str] = frozenset()) -> None:
        """The sandbox image, and orphans of killed runs removed (``keep``: episode keys of this
        run that still wait for verification in their container)."""
        self._run = run_label(run_dir)
        self._image = ensure_sandbox_image(self.client)
        from harness.runtime.engine import engine

        info = engine()[1]
        console.print(
            f"episodes run in containers ({info.name} {info.version} at {info.url}; default image {self._image})",
            highlight=False,
        )
        self.remove_orphans(keep)
        self._task_images = resolve_task_images(self.client, tasks, self.image_map)
        for task_id, ref in self._task_images.items():
            if isinstance(ref, str):
                try:
                    self._workdirs[task_id] = image_workdir(self.client, ref)
                except Exception as exc:  # that task's error, not the run's
                    self._task_images[task_id] = TaskImageError(f"{ref}: {type(exc).__name__}: {exc}")

    def image(self, task: Task) -> str:
        """The task's image: its own (TaskImageError when that failed), else the sandbox image."""
        if task.image is None:
            return self._image
        ref = self._task_images.get(task.id)
        if ref is None:  # a task prepare() did not see
            ref = self._task_images[task.id] = build_task_image(self.client, task, self.image_map)
            self._workdirs[task.id] = image_workdir(self.client, ref)
        if isinstance(ref, TaskImageError):
            raise ref
        return ref

    def limits_for(self, task: Task) -> ContainerLimits:
        """The run's limits with the task's own ([environment] cpus / memory) over them; CPUs
        capped at this machine's (an engine refuses more than it has)."""
        cpus = task.limits.cpus or self.limits.cpus
        return self.limits.model_copy(
            update={
                "cpus": min(cpus, float(os.cpu_count() or cpus)),
                "memory_gib": task.limits.memory_gib or self.limits.memory_gib,
            }
        )

    def workdir(self, task: Task) -> str:
        if task.image is not None:
            return self._workdirs.get(task.id, "/")
        return task.container.workdir if task.container else DEFAULT_WORKDIR

    def user(self, task: Task) -> str:
        """The sandbox image's unprivileged ``agent``; root in a task image without that user."""
        return self._users.get(task.id, AGENT_USER)

    def remove_orphans(self, keep: frozenset[str] = frozenset()) -> int:
        """What harness processes that have ended left behind (owner.py): this run's containers
        removed, except ``keep``'s; another run's stopped, not removed (that run's next eval
        verifies in them or removes them), except those never handed to an episode. A container
        whose owner is alive (any run, this process's included) or cannot be judged (another
        machine or PID namespace) is never touched. The number removed."""
        removed = stopped = 0
        kept = {container_name(self._run, key) for key in keep}  # by name: a warm one was renamed
        for c in self.client.containers.list(all=True, filters={"label": LABEL}, ignore_removed=True):
            labels = c.labels or {}
            if owner_state(labels) != "gone":
                continue
            if labels.get(LABEL_RUN) == self._run and c.name in kept:
                continue
            if labels.get(LABEL_RUN) != self._run and f"-{WARM}-" not in c.name:
                if c.status == "running":  # its processes end; its files stay for its run
                    with contextlib.suppress(Exception):
                        c.stop(timeout=0)
                        stopped += 1
                continue
            with contextlib.suppress(Exception):
                c.remove(force=True)
                removed += 1
        if removed:
            console.print(f"removed {removed} container(s) that a stopped harness run left behind")
        if stopped:
            console.print(
                f"stopped {stopped} container(s) that other stopped harness runs left running (kept for "
                "their runs: the next harness eval of each verifies in them or removes them)"
            )
        if IPC_ROOT.is_dir():
            live = {
                (c.labels or {}).get(LABEL_IPC) or c.name
                for c in self.client.containers.list(all=True, filters={"label": LABEL}, ignore_removed=True)
            }
            for d in IPC_ROOT.iterdir():
                # Without a container: this run's, or old. Another run may be between making a
                # directory and the container that mounts it right now.
                if d.name not in live and (
                    d.name.startswith(f"harness-{self._run}-") or _older(d, _IPC_STALE_S)
                ):
                    shutil.rmtree(d, ignore_errors=True)
        return removed

    def _find(self, key: str) -> "Container | None":
        from docker.errors import NotFound

        try:
            return self.client.containers.get(container_name(self._run, key))
        except NotFound:
            return None

    def _create(
        self, task: Task, name: str, key: str, ipc_dir: Path | None, *, fit: bool = True
    ) -> "Container":
        image = self.image(task)
        limits = self.limits_for(task)
        memory = f"{int(limits.memory_gib * 1024)}m"
        container = self.client.containers.create(
            image,
            command=["sleep", "infinity"],
            name=name,
            labels={
                LABEL: key,
                LABEL_RUN: self._run,
                **owner_labels(),  # the process that made it: cleanup never touches a live one's
                **({LABEL_IPC: ipc_dir.name} if ipc_dir else {}),
            },
            working_dir="/",
            user="0",
            environment=task.container.env if task.container else {},
            network_mode="none",
            mem_limit=memory,
            memswap_limit=memory,
            nano_cpus=int(limits.cpus * 1e9),
            pids_limit=limits.pids,
            security_opt=["no-new-privileges"],
            volumes={str(ipc_dir): {"bind": IPC_MOUNT, "mode": "rw"}} if ipc_dir else None,
        )
        try:
            container.start()
            if fit:
                self._fit(container, task)
        except Exception:
            container.remove(force=True)
            raise
        return container

    def launch_tools(self, container: "Container", ipc_dir: Path, task: Task, terminal_type: str) -> None:
        """The tool server started in the container (it answers once it has imported the SDK): its
        supervisor as root, out of the agent's reach, the tools as the agent's user (toolserver.py)."""
        for source in _TOOL_SERVER_FILES:
            shutil.copy(source, ipc_dir / source.name)
        user = self.user(task)
        container.exec_run(
            [
                AGENT_PYTHON,
                "-B",  # no __pycache__ of ready_terminal.py in the shared directory
                f"{IPC_MOUNT}/toolserver.py",
                "--socket",
                f"{IPC_MOUNT}/tools.sock",
                "--workdir",
                self.workdir(task),
                "--terminal-type",
                terminal_type,
                *(["--user", user] if user != "0" else []),
            ],
            user="0",
            workdir=self.workdir(task),
            environment={"HOME": "/home/agent", "USER": "agent"} if user == AGENT_USER else {},
            detach=True,
        )

    def warm_up(self, tasks: list[Task], terminal_type: str, ahead: int) -> None:
        """The episodes to come, in the order they will open their sandboxes: ``ahead`` sandboxes
        start now, and each one an episode takes starts the next (warm.py)."""
        self._terminal_type = terminal_type
        self._pool.expect(tasks, ahead)

    def cool_down(self) -> None:
        """The sandboxes started ahead that no episode (or verification) took, removed."""
        self._pool.discard()
        self._verifiers.discard()
        with self._lock:
            removing, self._removing = self._removing, []
        for thread in removing:
            thread.join(timeout=60)

    def expect_verifications(self, tasks: list[Task], ahead: int) -> None:
        """The verifications to come, in order: ``ahead`` fresh containers for those verified in
        one (fresh.verify_mode) start now, and each one taken starts the next."""
        self._verifiers.expect([t for t in tasks if verify_mode(t) == "fresh"], ahead)

    def _verifier_spec(self, task: Task) -> tuple[Any, ...] | None:
        try:
            image = self.image(task)
        except Exception:
            return None
        env = tuple(sorted((task.container.env if task.container else {}).items()))
        return (image, env, self.limits_for(task))

    def _make_verifier(self, task: Task) -> "Container":
        return self._create(task, verifier_name(self._run), VERIFIER, None, fit=False)

    @staticmethod
    def _drop_verifier(container: "Container") -> None:
        with contextlib.suppress(Exception):
            container.remove(force=True)

    def remove_later(self, container: "Container") -> None:
        """Remove a verifier container in the background (a running container's removal costs
        ~0.3 s of the engine's time: not the verification's); ``cool_down`` waits for it."""
        thread = threading.Thread(target=self._drop_verifier, args=(container,), daemon=True)
        thread.start()
        with self._lock:
            self._removing = [t for t in self._removing if t.is_alive()] + [thread]

    def verifier(self, task: Task) -> "Container":
        """A new running container from the task's image for one verification (one started ahead
        when there is one: see expect_verifications)."""
        container = self._verifiers.take(task)
        if container is not None:
            try:
                container.reload()
                if container.status == "running":
                    return container
            except Exception:
                pass
            self._drop_verifier(container)
        return self._make_verifier(task)

    def _warm_spec(self, task: Task) -> tuple[Any, ...] | None:
        """What a sandbox depends on: episodes with equal specs can take each other's."""
        try:
            image = self.image(task)
        except Exception:  # its image failed: the episode meets the error when it opens
            return None
        env = tuple(sorted((task.container.env if task.container else {}).items()))
        return (image, self.workdir(task), env, self.limits_for(task), self._terminal_type)

    def _make_warm(self, task: Task) -> "_Warm":
        name = f"harness-{self._run}-{WARM}-{uuid.uuid4().hex[:12]}"
        ipc_dir = _new_ipc_dir(name)
        try:
            container = self._create(task, name, WARM, ipc_dir)
        except Exception:
            shutil.rmtree(ipc_dir, ignore_errors=True)
            raise
        warm = _Warm(container, ipc_dir, self.user(task))
        try:
            self.launch_tools(container, ipc_dir, task, self._terminal_type)
        except Exception:
            self._drop_warm(warm)
            raise
        return warm

    @staticmethod
    def _settle_warm(warm: "_Warm") -> None:
        """Until its tool server answers (its socket appears only once it accepts), or its
        container is gone."""
        deadline = time.monotonic() + _TOOLS_START_TIMEOUT_S
        next_look = time.monotonic() + 1.0
        while not (warm.ipc_dir / "tools.sock").exists() and time.monotonic() < deadline:
            if time.monotonic() > next_look:
                warm.container.reload()  # raises when it was removed: settled all the same
                if warm.container.status != "running":
                    return
                next_look = time.monotonic() + 1.0
            time.sleep(0.02)

    @staticmethod
    def _drop_warm(warm: "_Warm") -> None:
        with contextlib.suppress(Exception):
            warm.container.remove(force=True)
        shutil.rmtree(warm.ipc_dir, ignore_errors=True)

    def _take_warm(self, task: Task, episode_dir: Path, key: str) -> ContainerSandbox | None:
        """A warm sandbox made the episode's: its name, the task's files; None when none is there."""
        warm = self._pool.take(task)
        if warm is None:
            return None
        try:
            warm.container.reload()
            if warm.container.status != "running":  # killed or stopped while it waited
                raise RuntimeError(warm.container.status)
            warm.container.rename(container_name(self._run, key))
            warm.container.reload()  # its name as the engine now has it (messages name it)
            with tempfile.TemporaryDirectory(prefix="harness-start-") as tmp:
                if task.image is None:  # else the task's files are in its image
                    start = prepare_workspace(task, Path(tmp) / "ws")
                    put_dir(warm.container, start, self.workdir(task), owner=(1000, 1000), make=True)
        except Exception:  # it went away while it waited: the episode starts its own
            self._drop_warm(warm)
            return None
        self._users[task.id] = warm.user
        return ContainerSandbox(self, task, warm.container, episode_dir, warm.ipc_dir, launched=True)

    def _fit(self, container: "Container", task: Task) -> None:
        """Make a started container an episode sandbox: the agent's tools there, its working
        directory there and owned by the user the agent runs as."""
        workdir = self.workdir(task)
        # One exec for all of it: each costs a process start in the engine (~0.1 s of CPU).
        code, _ = container.exec_run(
            ["sh", "-c", _FIT_SCRIPT, "fit", AGENT_PYTHON, workdir, AGENT_USER], user="0"
        )
        if code == 3:
            raise TaskImageError(
                f"image {self.image(task)} has no agent tools at {AGENT_PYTHON}: build it FROM the harness "
                "sandbox image or with docker/agent-runtime.Dockerfile (docker/README.md)"
            )
        self._users[task.id] = AGENT_USER if code == 0 else "0"

    def open(
        self, task: Task, episode_dir: Path, key: str, *, fresh: bool, tools: bool = True
    ) -> "ContainerSandbox | ExportedSandbox":
        """``tools=False``: a sandbox where nothing runs as the agent (``tasks verify``'s): no tool
        server's directory, and the image is not fitted for the agent (one exec less)."""
        old = self._find(key)
        if not fresh and verify_mode(task) == "fresh":
            if old is not None:  # the rollout's container, left by a killed run: nothing in it counts
                with contextlib.suppress(Exception):
                    old.remove(force=True)
                shutil.rmtree(IPC_ROOT / ((old.labels or {}).get(LABEL_IPC) or old.name), ignore_errors=True)
            return ExportedSandbox(self, task, episode_dir)
        if fresh or old is None:
            if old is not None:
                old.remove(force=True)  # an interrupted attempt's container
            if fresh and tools and (warm := self._take_warm(task, episode_dir, key)) is not None:
                return warm
            name = container_name(self._run, key)
            ipc_dir = _new_ipc_dir(name) if fresh and tools else None
            # Verification without the rollout's container runs as root: no fitting either.
            container = self._create(task, name, key, ipc_dir, fit=fresh and tools)
            sandbox = ContainerSandbox(self, task, container, episode_dir, ipc_dir)
            with tempfile.TemporaryDirectory(prefix="harness-start-") as tmp:
                # verification without the rollout's container starts from the exported final files
                if fresh and task.image is not None:
                    start = None  # the task's files are in its image
                else:
                    start = prepare_workspace(task, Path(tmp) / "ws") if fresh else episode_dir / "workspace"
                if start is not None:
                    put_dir(container, start, self.workdir(task), owner=(1000, 1000), make=True)
            return sandbox
        # The rollout's container, stopped; the directory it mounts must be there to start it.
        ipc_dir = IPC_ROOT / ((old.labels or {}).get(LABEL_IPC) or old.name)
        ipc_dir.mkdir(parents=True, mode=0o700, exist_ok=True)
        return ContainerSandbox(self, task, old, episode_dir, ipc_dir)
