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
  cleanup) is rebuilt from the image and the exported files. A multi-step task's steps each run
  and are verified in the one container (begin_step / verify_step, harness/tasks/steps.py).

Containers a killed run left behind are removed by the next run's ``prepare`` (kept only when
their episode still waits for verification in that very run).
"""

import contextlib
import hashlib
import os
import secrets
import shlex
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from harness.errors import HarnessError
from harness.progress import console
from harness.runtime.base import ContainerLimits, SandboxConfig, SandboxPrep
from harness.runtime.container_exec import exec_capped
from harness.runtime.container_files import export_dir, extract_tar, put_dir, put_file, stage_name
from harness.runtime.container_verify import verifier_name, verify_fresh
from harness.runtime.engine import containers_now
from harness.runtime.export_caps import ExportLimit, ExportLimits
from harness.runtime.images import ensure_sandbox_image
from harness.runtime.owner import owner_labels, owner_state
from harness.runtime.separate_verify import collect_artifacts, verify_separate
from harness.runtime.task_env import (
    NetworkChoice,
    Phase,
    TaskRefusedAtRun,
    container_env,
    denied,
    phase_network,
    run_healthcheck,
)
from harness.runtime.task_images import (
    VERIFIER_SUFFIX,
    TaskImageError,
    build_task_image,
    image_workdir,
    resolve_task_images,
    verifier_task,
)
from harness.runtime.warm import WarmPool
from harness.seam import ExecResult
from harness.tasks import Task, VerifyResult, prepare_workspace
from harness.tasks.fresh import verify_mode
from harness.tasks.harbor import LOGS_DIR, SOLUTION_DIR, TESTS_DIR, read_rewards
from harness.tasks.harbor_config import StepSpec, resolve_env
from harness.tasks.swebench_grading import grade_logs
from harness.tasks.verify import score_tests

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

LABEL = "harness.episode"  # value: the episode key; every harness container has it
LABEL_RUN = "harness.run"  # a hash of the run directory's path
LABEL_IPC = "harness.ipc"  # its tool server's directory under IPC_ROOT (a warm container is renamed)
WARM = "warm"  # LABEL of a container started ahead of the episode that will take it (warm.py)
VERIFIER = "verify"  # LABEL of a fresh container for one verification (container_verify.py)
IPC_ROOT = Path(tempfile.gettempdir()) / "harness-ipc"  # short: a unix socket path holds 108 bytes
IPC_MOUNT = "/run/harness"
DEFAULT_WORKDIR = "/workspace"
AGENT_USER = "1000:1000"  # the sandbox image's `agent`
# _fit in the container: 0 with a user `agent` (the working directory made and given to it), 4
# without one (made, left to root).
_FIT_SCRIPT = """
mkdir -p "$1"
id -u agent >/dev/null 2>&1 || exit 4
[ "$1" = / ] || chown -R "$2" "$1" || true  # as before: a failed chown leaves the user agent
"""
# run_solution() in the container: $1 solution dir, $2 where its files were copied, $3 logs dir,
# $4 working directory (made: an image's WORKDIR need not exist), then the command.
_SOLVE_SCRIPT = """
rm -rf "$1" && mkdir -p "$3/agent" "$4" && mv "$2" "$1" && cd "$4" || exit 90
shift 4
exec "$@" 2>&1
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

# begin_step(): the directories given emptied (kept: an image's own /tests stays a directory).
_EMPTY_SCRIPT = """
for d; do [ ! -d "$d" ] || find "$d" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + || exit 1; done
"""


def run_label(run_dir: Path) -> str:
    return hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:12]


def container_name(run: str, key: str) -> str:
    return f"harness-{run}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


class ContainerSandbox:
    """An episode's container. ``channel``: a directory of this machine mounted at IPC_MOUNT in
    it, for what a runner starts inside to talk back (OpenHands' tool server); None for sandboxes
    no agent acts in."""

    def __init__(
        self,
        runtime: "ContainerRuntime",
        task: Task,
        container: "Container",
        episode_dir: Path,
        channel: Path | None,
        prep: SandboxPrep | None = None,
    ) -> None:
        self.runtime, self.task, self.container = runtime, task, container
        self.episode_dir = episode_dir
        self.channel = channel
        self.prep = prep  # what a runner started in it ahead of its episode
        self._exported = False
        self._phase_images: list[str] = []  # committed for a verifier on another network

    @property
    def workdir(self) -> str:
        return self.runtime.workdir(self.task)

    @property
    def user(self) -> str:
        """Who the agent is in here: the image's ``agent`` (uid:gid), or ``0`` where there is none."""
        return self.runtime.user(self.task)

    @property
    def limits(self) -> ContainerLimits:
        return self.runtime.limits_for(self.task)

    @property
    def _final(self) -> Path:
        return self.episode_dir / "workspace"

    def _in(self, path: str) -> str:
        return path if path.startswith("/") else f"{self.workdir.rstrip('/')}/{path}"

    def exec(
        self,
        cmd: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """``cmd`` in the container as the agent (``user="root"``: as root), in ``cwd`` (default the
        working directory); its output read as a stream and capped; ``timeout`` ends it (and what
        it started in its process group) with ``timeout -k``."""
        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if timeout is not None:
            argv = ["timeout", "-k", "5", f"{timeout:g}", *argv]
        who = "0" if user == "root" else (user or self.user)
        code, out, err = exec_capped(
            self.container,
            argv,
            user=who,
            workdir=self._in(cwd) if cwd else self.workdir,
            env=dict(env or {}),
        )
        timed_out = timeout is not None and code in (124, 137)
        text = out.decode(errors="replace") + err.text()
        return ExecResult(exit_code=None if timed_out else code, output=text, timed_out=timed_out)

    def read(self, path: str) -> bytes:
        with tempfile.TemporaryDirectory(prefix="harness-read-") as tmp:
            export_dir(self.container, self._in(path), Path(tmp), self.runtime.exports)
            files = [p for p in Path(tmp).rglob("*") if p.is_file()]
            if len(files) != 1:
                raise IsADirectoryError(f"{path} in container {self.container.name} is not one file")
            return files[0].read_bytes()

    def write(self, path: str, data: bytes) -> None:
        target = self._in(path)
        with tempfile.TemporaryDirectory(prefix="harness-write-") as tmp:
            src = Path(tmp) / "f"
            src.write_bytes(data)
            put_file(self.container, src, target, owner=_owner(self.user))

    def copy_in(self, src: Path, dest: str) -> None:
        if src.is_dir() and not src.is_symlink():
            put_dir(self.container, src, self._in(dest), owner=_owner(self.user), make=True)
        else:
            put_file(self.container, src, self._in(dest), owner=_owner(self.user))

    def copy_out(self, src: str, dest: Path) -> None:
        export_dir(self.container, self._in(src), dest, self.runtime.exports)

    def instruction(self) -> str:
        return self.task.instruction  # container paths are real in here: nothing to rewrite

    def finish(self) -> None:
        """The agent is done: tools closed, final files exported, processes stopped. Files over the
        run's export caps are not exported (ExportLimit, raised once the container is stopped)."""
        too_big: ExportLimit | None = None
        try:
            self._export()
        except ExportLimit as exc:
            too_big = exc
        mode = verify_mode(self.task)
        if mode == "separate":  # what the agent published, for a verifier of its own
            with contextlib.suppress(Exception):
                collect_artifacts(self.container, self.task, self.episode_dir)
        fresh = mode in ("fresh", "separate")
        with contextlib.suppress(Exception):
            if fresh:  # verified elsewhere: nothing here counts
                self.container.remove(force=True)
            else:
                # At once: the files are out, and ``sleep`` as PID 1 ignores SIGTERM, so a grace
                # period is only waited out (it was a second per episode).
                self.container.stop(timeout=0)
        if fresh and self.channel is not None:  # nothing mounts it again
            shutil.rmtree(self.channel, ignore_errors=True)
        # Else the (now empty) shared directory stays until close: the stopped container mounts
        # it again when verification starts it.
        else:
            self._empty_channel()
        if too_big is not None:
            raise too_big

    def _empty_channel(self) -> None:
        """What the last runner started inside (its tool server, which serves one run) has ended:
        its files out of the shared directory, so that the next one starts its own."""
        if self.channel is None:
            return
        for leftover in self.channel.iterdir():
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)

    def _export(self) -> None:
        """The agent's final files into the episode directory; ExportLimit over the run's caps."""
        self._final.mkdir(parents=True, exist_ok=True)
        self._exported = True
        try:
            export_dir(self.container, self.workdir, self._final, self.runtime.exports)
        except ExportLimit:
            raise
        except Exception:  # a container already gone has nothing to export
            pass

    def _ensure_running(self) -> None:
        self.container.reload()
        if self.container.status != "running":
            self.container.start()  # the image's ENTRYPOINT runs again: its services come back
            run_healthcheck(self.container, self.task)

    def _for_verification(self) -> None:
        """This container on the network the task gives its verifier: when that is not the agent's,
        its files are committed to an image and the tests run in a new container of it (the
        agent's processes end either way: a stopped container restarts), removed at close."""
        want = self.runtime.network_for(self.task, "verifier")
        self.container.reload()
        if _network_mode(self.container) == want:
            self._ensure_running()
            return
        with contextlib.suppress(Exception):
            self.container.stop(timeout=0)
        image = self.container.commit(repository=PHASE_IMAGE, tag=uuid.uuid4().hex[:12])
        try:
            new = self.runtime._create(
                self.task,
                verifier_name(self.runtime._run),
                VERIFIER,
                None,
                fit=False,
                phase="verifier",
                image=image.id,
            )
        except Exception:
            with contextlib.suppress(Exception):
                self.runtime.client.images.remove(image.id, force=True)
            raise
        old, self.container = self.container, new
        self._phase_images.append(str(image.id))
        with contextlib.suppress(Exception):
            old.remove(force=True)

    def run_solution(self, solution: Path | None = None, timeout: float | None = None) -> tuple[bool, str]:
        """The reference solution as Harbor's oracle runs it: solution/ copied to /solution, then
        ``bash /solution/solve.sh`` as root in the working directory with ``[solution] env``,
        within the agent's time limit; (ok, output tail). ``solution``: another solution/ (a step's)."""
        task = self.task
        script = (solution / "solve.sh") if solution is not None else task.solution
        if not script.is_file():
            return False, f"{script} is missing"
        timeout = timeout or task.limits.agent_timeout_s
        self._ensure_running()
        # Read through the exec handshake (container_exec.py): a plain exec_run lost the whole output
        # of a solve.sh that failed at once under load (fresh7), and the oracle's reason with it.
        code, output, _ = self._staged_run(
            _SOLVE_SCRIPT,
            script.parent,
            SOLUTION_DIR,
            script.name,
            timeout,
            {**container_env(task), **resolve_env(task.solution_env)},
            demux=True,
        )
        tail = output.decode(errors="replace")[-2000:] if output else ""
        if code in (124, 137):
            tail += f"\n[harness] solve.sh timed out after {timeout:g} s"
        elif code != 0:
            tail += f"\n[harness] solve.sh exited with {code}"
        return code == 0, tail

    # ---- the steps of a multi-step task (harness/tasks/steps.py) --------------------------------
    def begin_step(self, step: StepSpec, first: bool) -> None:
        """Before the step's agent, as Harbor's MultiStepTrial: the last step's tests and verifier
        logs emptied, the agent's logs too, workdir/ copied in, setup.sh run there (as the agent's
        user), the step's healthcheck; HarnessError when one fails."""
        self._ensure_running()
        if not first:  # a new run of the scaffold: what the last one started inside has ended
            self._empty_channel()
        dirs = [f"{LOGS_DIR}/agent"] + ([] if first else [TESTS_DIR, f"{LOGS_DIR}/verifier"])
        emptied = self.exec(["sh", "-c", _EMPTY_SCRIPT, "-", *dirs], cwd="/", user="root")
        if emptied.exit_code != 0:
            raise HarnessError(f"could not empty {', '.join(dirs)}: {emptied.output.strip()[-200:]}")
        if step.workdir_dir is not None:
            self.copy_in(step.workdir_dir, self.workdir)
            if (step.workdir_dir / "setup.sh").is_file():
                done = self.exec(
                    f"bash {shlex.quote(self.workdir.rstrip('/') + '/setup.sh')}",
                    env=container_env(self.task),
                )
                if done.exit_code != 0:
                    tail = done.output.strip().splitlines()[-1:] or ["no output"]
                    raise HarnessError(f"setup.sh exited with {done.exit_code}: {tail[0][:200]}")
        if step.healthcheck is not None:
            run_healthcheck(
                self.container,
                self.task,
                check=step.healthcheck,
                field=f"[[steps]] {step.name!r} healthcheck",
            )

    def run_step_solution(self, step: StepSpec) -> tuple[bool, str]:
        """The step's solution/ (else the task's), as Harbor's oracle runs a step."""
        solution = step.solution_dir or self.task.path / "solution"
        return self.run_solution(solution, step.agent_timeout_s)

    def verify_step(self, step: StepSpec) -> VerifyResult:
        """The task's tests/ with the step's tests/ over them, run here with the step's verifier
        timeout and env over the task's."""
        with tempfile.TemporaryDirectory(prefix="harness-step-tests-") as tmp:
            tests = Path(tmp) / "tests"
            tests.mkdir()
            for source in (self.task.tests_dir, step.tests_dir):
                if source is not None and source.is_dir():
                    shutil.copytree(source, tests, symlinks=True, dirs_exist_ok=True)
            return self._verify_shared(tests, step.verify_timeout_s, step.verifier_env)

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
        cmd = ["sh", "-c", script, "-", dest, stage, LOGS_DIR, self.workdir,
               "timeout", "-k", "5", f"{timeout:g}", "bash", f"{dest}/{entry}"]  # fmt: skip
        if demux:  # read as a stream through the exec handshake, capped (verify, the solution)
            return exec_capped(self.container, cmd, user="0", workdir="/", env=env)
        return self.container.exec_run(cmd, user="0", workdir="/", environment=env)  # workdir: see script

    def verify(self) -> VerifyResult:
        """The task's tests: in a fresh container with this one's final files (a native or
        SWE-bench task: this one is removed first), or in this container (Harbor's shared mode)."""
        mode = verify_mode(self.task)
        if mode in ("fresh", "separate"):
            if not self._exported:  # tasks verify: the reference solution ran here
                self._export()
                if mode == "separate":
                    collect_artifacts(self.container, self.task, self.episode_dir)
            with contextlib.suppress(Exception):
                self.container.remove(force=True)
            if mode == "separate":
                return verify_separate(self.runtime, self.task, self.episode_dir)
            return verify_fresh(self.runtime, self.task, self._final, self.episode_dir)
        return self._verify_shared()

    def _verify_shared(
        self,
        tests_dir: Path | None = None,
        timeout: float | None = None,
        step_env: dict[str, str] | None = None,
    ) -> VerifyResult:
        """The task's tests (or ``tests_dir``) in this container, copied in only now, run as root
        with a time limit."""
        task = self.task
        start = time.monotonic()
        timeout = timeout or task.limits.verify_timeout_s
        self._for_verification()
        tests = TESTS_DIR
        env = {
            **container_env(task),
            **resolve_env(task.verifier_env),
            **resolve_env(step_env or {}),
            "WORKSPACE": self.workdir,
            "PYTHON": "python3",
            "TESTS_DIR": tests,
            "TEST_DIR": tests,  # Terminal-Bench's name for it
            "REWARD_FILE": f"{LOGS_DIR}/verifier/reward.txt",
            # Bytecode from a private prefix, unguessable (the agent had this container): the
            # workspace's __pycache__ is never read (harness/tasks/verify.py says why).
            "PYTHONPYCACHEPREFIX": f"/tmp/harness-pycache-{secrets.token_hex(8)}",
        }
        # The tests' output (stdout and stderr in order) on stderr, then what they wrote in the
        # verifier's log directory as a tar on stdout: fetching that with the engine's archive
        # call instead costs more than the tests of a small task.
        code, stdout, stderr = self._staged_run(
            _VERIFY_SCRIPT, tests_dir or task.tests_dir, tests, "test.sh", timeout, env, demux=True
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
                    self.episode_dir.mkdir(parents=True, exist_ok=True)
                    shutil.copy(Path(tmp) / "report.json", self.episode_dir / "swebench_report.json")
            reward, tail = score_tests(code, timed_out, Path(tmp), tail, timeout)
            rewards = (None if timed_out else read_rewards(Path(tmp))) or {"reward": reward}
        return VerifyResult(
            rewards=rewards,
            resolved=reward >= 1.0,
            reward=reward,
            exit_code=None if timed_out else code,
            timed_out=timed_out,
            seconds=time.monotonic() - start,
            output_tail=tail[-2000:],
            output=tail,
            network=_network_mode(self.container),
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.container.remove(force=True)
        for image in self._phase_images:
            with contextlib.suppress(Exception):
                self.runtime.client.images.remove(image, force=True)
        if self.channel is not None:
            shutil.rmtree(self.channel, ignore_errors=True)


PHASE_IMAGE = "localhost/harness-phase"  # an agent's container committed for its verifier's network


def _network_mode(container: "Container") -> str:
    """The container's network mode as the engine reports it (``none``, ``bridge``)."""
    mode = str((container.attrs.get("HostConfig") or {}).get("NetworkMode") or "none")
    return "bridge" if mode == "default" else mode


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
    images = True  # a task's container image is what its sandbox runs

    def __init__(
        self,
        client: "docker.DockerClient",
        limits: ContainerLimits | None = None,
        image_map: dict[str, str] | None = None,
        exports: ExportLimits | None = None,
        *,
        force_build: bool = False,
        network: NetworkChoice = "task",
    ) -> None:
        self.client = client
        self.force_build = force_build
        self.network: NetworkChoice = network
        self._refused: dict[str, TaskRefusedAtRun] = {}
        self._verifier_images: dict[str, str | TaskImageError] = {}
        self.limits = limits or ContainerLimits()
        self.image_map = image_map or {}
        self.exports = exports or ExportLimits()
        self._run = ""
        self._image = ""
        self._task_images: dict[str, str | TaskImageError] = {}
        self._workdirs: dict[str, str] = {}
        self._users: dict[str, str] = {}
        self._lock = threading.Lock()
        self._pool: WarmPool[tuple[Task, SandboxPrep | None], ContainerSandbox] = WarmPool(
            self._make_warm, self._drop_warm, self._warm_spec, settle=self._settle_warm
        )
        self._verifiers: WarmPool[Task, Container] = WarmPool(
            self._make_verifier, self._drop_verifier, self._verifier_spec
        )
        self._removing: list[threading.Thread] = []  # verifier containers being removed
        self._verifying: set[Container] = set()  # fresh verifier containers whose tests run now

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
        for task in tasks:
            try:
                for phase in ("agent", "verifier"):
                    phase_network(task, phase, self.network)  # type: ignore[arg-type]
            except TaskRefusedAtRun as exc:
                self._refused[task.id] = exc
                console.print(
                    f"  [red]refused[/] (its episodes will error): {escape(str(exc))}", highlight=False
                )
            if note := denied(task, self.network):
                console.print(f"[yellow]note[/]: {escape(note)}", highlight=False)
        if sized := [t.id for t in tasks if t.harbor is not None and t.harbor.storage_mb]:
            console.print(
                f"[yellow]note[/]: \\[environment] storage_mb of {len(sized)} task(s) is not enforced: the engine's "
                "overlay storage has no per-container quota (Harbor's docker environment does not enforce it either)",
                highlight=False,
            )
        self._task_images = resolve_task_images(
            self.client, tasks, self.image_map, force_build=self.force_build
        )
        separate = [v for t in tasks if (v := verifier_task(t)) is not None]
        built = resolve_task_images(self.client, separate, self.image_map, force_build=self.force_build)
        self._verifier_images = {task_id.removesuffix(VERIFIER_SUFFIX): ref for task_id, ref in built.items()}
        for task_id, ref in self._task_images.items():
            if isinstance(ref, str):
                try:
                    self._workdirs[task_id] = image_workdir(self.client, ref)
                except Exception as exc:  # that task's error, not the run's
                    self._task_images[task_id] = TaskImageError(f"{ref}: {type(exc).__name__}: {exc}")

    def verifier_image(self, task: Task) -> tuple[str, bool]:
        """A separate verifier's image, and whether it holds its tests (built from tests/)."""
        if (refused := self._refused.get(task.id)) is not None:
            raise refused
        vtask = verifier_task(task)
        if vtask is None:  # a fresh container of the task's own image
            return self.image(task), False
        ref = self._verifier_images.get(task.id)
        if ref is None:
            ref = self._verifier_images[task.id] = build_task_image(
                self.client, vtask, self.image_map, force_build=self.force_build
            )
        if isinstance(ref, TaskImageError):
            raise ref
        return ref, vtask.image is not None and vtask.image.ref is None

    def verifier_env(self, task: Task) -> dict[str, str]:
        """A separate verifier's environment: its environment's env, then ``[verifier] env``."""
        spec = task.harbor
        own = resolve_env(spec.verifier_env) if spec is not None else container_env(task)
        return {**own, **resolve_env(task.verifier_env)}

    def image_workdir(self, ref: str) -> str:
        return image_workdir(self.client, ref)

    def network_for(self, task: Task, phase: Phase) -> str:
        """The network mode of the task's container in ``phase`` (task_env.py)."""
        return phase_network(task, phase, self.network)

    def image(self, task: Task) -> str:
        """The task's image: its own (TaskImageError when that failed), else the sandbox image."""
        if (refused := self._refused.get(task.id)) is not None:
            raise refused
        if task.image is None:
            return self._image
        ref = self._task_images.get(task.id)
        if ref is None:  # a task prepare() did not see
            ref = self._task_images[task.id] = build_task_image(
                self.client, task, self.image_map, force_build=self.force_build
            )
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
        if task.harbor is not None and task.harbor.workdir:  # [environment] workdir over the image's
            return task.harbor.workdir
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
        for c in containers_now(self.client, {"label": LABEL}):
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
                for c in containers_now(self.client, {"label": LABEL})
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
        self,
        task: Task,
        name: str,
        key: str,
        ipc_dir: Path | None,
        *,
        fit: bool = True,
        phase: Phase = "agent",
        image: str | None = None,
        env: dict[str, str] | None = None,
    ) -> "Container":
        """A started container of the task's image (``image``: another one) for ``phase``: its
        network, the task's environment, limits; the image's ENTRYPOINT runs (with Harbor's
        ``sh -c "sleep infinity"`` as its command, the sleep exec'd) and the task's healthcheck
        passes first."""
        image = image or self.image(task)
        limits = self.limits_for(task)
        memory = f"{int(limits.memory_gib * 1024)}m"
        container = self.client.containers.create(
            image,
            # exec: the sleep is the container's process 1, which no signal from inside ends. A
            # sleep forked by sh was the one process a root agent's `kill -9 -1` ended the
            # container with: its stop read as the engine's loss, retried (fresh6)
            command=["sh", "-c", "exec sleep infinity"] if task.image is not None else ["sleep", "infinity"],
            name=name,
            labels={
                LABEL: key,
                LABEL_RUN: self._run,
                **owner_labels(),  # the process that made it: cleanup never touches a live one's
                **({LABEL_IPC: ipc_dir.name} if ipc_dir else {}),
            },
            working_dir="/",
            user="0",
            environment=container_env(task) if env is None else env,
            network_mode=self.network_for(task, phase),
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
            if phase == "agent" or verify_mode(task) == "shared":
                run_healthcheck(container, task)
        except Exception:
            container.remove(force=True)
            raise
        return container

    def warm_up(self, episodes: list[tuple[Task, SandboxPrep | None]], ahead: int) -> None:
        """The episodes to come, in the order they will open their sandboxes: ``ahead`` sandboxes
        start now (each prepared by its runner's prep), and each one an episode takes starts the
        next (warm.py)."""
        self._pool.expect(episodes, ahead)

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
        env = tuple(sorted(container_env(task).items()))
        return (image, env, self.limits_for(task), self.network_for(task, "verifier"))

    def _make_verifier(self, task: Task) -> "Container":
        return self._create(task, verifier_name(self._run), VERIFIER, None, fit=False, phase="verifier")

    @staticmethod
    def _drop_verifier(container: "Container") -> None:
        with contextlib.suppress(Exception):
            container.remove(force=True)

    def verifying(self, container: "Container", running: bool) -> None:
        """A fresh verifier container's tests started (``running``) or ended: ``halt`` ends those running."""
        with self._lock:
            (self._verifying.add if running else self._verifying.discard)(container)

    def halt(self) -> int:
        """The run is stopping: every fresh verification running now ends (its container removed,
        its tests with it); the number ended. An episode's own sandbox is closed by its owner."""
        with self._lock:
            running, self._verifying = list(self._verifying), set()
        for container in running:
            self._drop_verifier(container)
        return len(running)

    def remove_later(self, container: "Container") -> None:
        """Remove a verifier container in the background (a running container's removal costs
        ~0.3 s of the engine's time: not the verification's); ``cool_down`` waits for it."""
        thread = threading.Thread(target=self._drop_verifier, args=(container,), daemon=True)
        thread.start()
        with self._lock:
            self._removing = [t for t in self._removing if t.is_alive()] + [thread]

    def new_verifier(self, task: Task, image: str, env: dict[str, str]) -> "Container":
        """A started container for a separate verifier: ``image`` with ``env`` (separate_verify.py)."""
        return self._create(
            task, verifier_name(self._run), VERIFIER, None, fit=False, phase="verifier", image=image, env=env
        )

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

    def _warm_spec(self, episode: tuple[Task, SandboxPrep | None]) -> tuple[Any, ...] | None:
        """What a sandbox depends on: episodes with equal specs can take each other's."""
        task, prep = episode
        try:
            image = self.image(task)
        except Exception:  # its image failed: the episode meets the error when it opens
            return None
        env = tuple(sorted(container_env(task).items()))
        network = self.network_for(task, "agent")
        return (image, self.workdir(task), env, self.limits_for(task), network, prep.key if prep else None)

    def _make_warm(self, episode: tuple[Task, SandboxPrep | None]) -> ContainerSandbox:
        """A sandbox for an episode still to come (its directory is set when one takes it), with
        what the runner starts in it under way."""
        task, prep = episode
        name = f"harness-{self._run}-{WARM}-{uuid.uuid4().hex[:12]}"
        channel = _new_ipc_dir(name)
        try:
            container = self._create(task, name, WARM, channel)
        except Exception:
            shutil.rmtree(channel, ignore_errors=True)
            raise
        warm = ContainerSandbox(self, task, container, Path(), channel, prep)
        if prep is not None:
            try:
                prep.start(warm)
            except Exception:
                self._drop_warm(warm)
                raise
        return warm

    @staticmethod
    def _settle_warm(warm: ContainerSandbox) -> None:
        if warm.prep is not None:
            warm.prep.settle(warm)

    @staticmethod
    def _drop_warm(warm: ContainerSandbox) -> None:
        warm.close()

    def _take_warm(
        self, task: Task, episode_dir: Path, key: str, prep: SandboxPrep | None
    ) -> ContainerSandbox | None:
        """A warm sandbox made the episode's: its name, its directory, the task's files; None when
        none is there."""
        warm = self._pool.take((task, prep))
        if warm is None:
            return None
        warm.episode_dir = episode_dir
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
        return warm

    def _fit(self, container: "Container", task: Task) -> None:
        """Make a started container an episode sandbox: its working directory there and owned by
        the user the agent runs as (what a scaffold needs inside is its runner's SandboxPrep)."""
        workdir = self.workdir(task)
        # One exec for all of it: each costs a process start in the engine (~0.1 s of CPU).
        code, _ = container.exec_run(["sh", "-c", _FIT_SCRIPT, "fit", workdir, AGENT_USER], user="0")
        self._users[task.id] = AGENT_USER if code == 0 else "0"

    def open(
        self, task: Task, episode_dir: Path, key: str, *, agent: bool = True, prep: SandboxPrep | None = None
    ) -> ContainerSandbox:
        """A new sandbox for an episode. ``agent=False``: one where nothing runs as the agent
        (``tasks verify``'s): no channel directory, and the image is not fitted for the agent."""
        if (old := self._find(key)) is not None:
            old.remove(force=True)  # an interrupted attempt's container
        if agent and (warm := self._take_warm(task, episode_dir, key, prep)) is not None:
            return warm
        name = container_name(self._run, key)
        channel = _new_ipc_dir(name) if agent else None
        container = self._create(task, name, key, channel, fit=agent)
        sandbox = ContainerSandbox(self, task, container, episode_dir, channel)
        if task.image is None:  # else the task's files are in its image
            with tempfile.TemporaryDirectory(prefix="harness-start-") as tmp:
                start = prepare_workspace(task, Path(tmp) / "ws")
                put_dir(container, start, self.workdir(task), owner=(1000, 1000), make=True)
        return sandbox

    def reopen(self, task: Task, episode_dir: Path, key: str) -> "ContainerSandbox | ExportedSandbox":
        """Where the episode is verified: the files it exported (a native or SWE-bench task: a
        fresh container at verify()), else the rollout's container, stopped (Harbor's shared mode),
        or one rebuilt from the image and the exported files when that is gone."""
        old = self._find(key)
        if verify_mode(task) in ("fresh", "separate"):
            if old is not None:  # the rollout's container, left by a killed run: nothing in it counts
                with contextlib.suppress(Exception):
                    old.remove(force=True)
                shutil.rmtree(IPC_ROOT / ((old.labels or {}).get(LABEL_IPC) or old.name), ignore_errors=True)
            return ExportedSandbox(self, task, episode_dir)
        if old is None:  # verification without the rollout's container runs as root: no fitting
            container = self._create(
                task, container_name(self._run, key), key, None, fit=False, phase="verifier"
            )
            put_dir(container, episode_dir / "workspace", self.workdir(task), owner=(1000, 1000), make=True)
            return ContainerSandbox(self, task, container, episode_dir, None)
        # The rollout's container, stopped; the directory it mounts must be there to start it.
        channel = IPC_ROOT / ((old.labels or {}).get(LABEL_IPC) or old.name)
        channel.mkdir(parents=True, mode=0o700, exist_ok=True)
        return ContainerSandbox(self, task, old, episode_dir, channel)


def _owner(user: str) -> tuple[int, int]:
    """A ``uid:gid`` (or ``0``) as the owner of files copied in."""
    uid, _, gid = user.partition(":")
    return int(uid), int(gid or uid)


class ExportedSandbox:
    """An episode whose rollout is over and whose files were exported: verified in a fresh
    container; nothing else is done with it (Runtime.reopen's Verifiable)."""

    def __init__(self, runtime: "ContainerRuntime", task: Task, episode_dir: Path) -> None:
        self.runtime, self.task, self._episode_dir = runtime, task, episode_dir

    def verify(self) -> VerifyResult:
        if self.task.harbor is not None and self.task.harbor.verifier_mode == "separate":
            return verify_separate(self.runtime, self.task, self._episode_dir)
        return verify_fresh(self.runtime, self.task, self._episode_dir / "workspace", self._episode_dir)

    def close(self) -> None:
        pass


def make_runtime(config: SandboxConfig) -> ContainerRuntime:
    """The registry's factory (harness/registry.py): this machine's engine (engine.py)."""
    from harness.runtime.engine import docker_client
    from harness.runtime.task_images import parse_image_map

    mapping = parse_image_map(config.image_map)  # a malformed entry fails before any engine work
    return ContainerRuntime(
        docker_client(),
        config.limits,
        mapping,
        config.exports,
        force_build=config.force_build,
        network=config.network,
    )
