"""Fresh-sandbox verification under the docker runtime (harness/tasks/fresh.py says which tasks).

A new container from the task's image (started ahead when the runtime expects verifications:
its start is hidden as episode sandboxes' are), with no network, into which only the agent's
exported final workspace is copied, then the pristine tests; the agent's own container is gone
by then. One archive copy and one exec per verification:

- a native task: the workspace replaces the working directory (owned by the unprivileged
  ``agent``), the tests go to a root-owned ``/tests`` and the guarded runner to a root-owned
  ``/opt/harness-verify`` (guard.py), and test.sh runs as ``agent``: the code under test can
  write neither the tests nor the runner, and the reward is the exit status;
- a SWE-bench instance (or a Harbor task verified fresh): the workspace replaces the working
  directory but for the image's own ``.git`` (SWE-bench's: the agent's history, hooks and
  config never run), and test.sh runs as root as the task expects; the log is graded here.
"""

import contextlib
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from harness.runtime.container_exec import exec_capped
from harness.runtime.container_files import export_dir, extract_tar, stage_name, tar_tree
from harness.runtime.task_env import container_env
from harness.tasks import Task, VerifyResult
from harness.tasks.fresh import (
    CONTAINER_GUARD_DIR,
    CappedBytes,
    guarded,
    is_swebench,
    score_exit,
    write_guard,
)
from harness.tasks.harbor import LOGS_DIR, TESTS_DIR, read_reward
from harness.tasks.harbor_config import resolve_env
from harness.tasks.swebench_grading import grade_logs
from harness.tasks.verify import score_tests

if TYPE_CHECKING:
    from docker.models.containers import Container


class VerifierHost(Protocol):
    """What a fresh verification needs of its runtime (runtime/container.py's ContainerRuntime,
    which imports this module: a protocol here, not the class, keeps the two out of a circle)."""

    def verifier(self, task: Task) -> "Container": ...

    def verifying(self, container: "Container", running: bool) -> None: ...

    def remove_later(self, container: "Container") -> None: ...

    def workdir(self, task: Task) -> str: ...


AGENT_UID = 1000
# A native task's tests, as ``agent``: $1 the time limit. The tests' output on stderr, then the
# verifier's log directory as a tar on stdout (only to say when a reward file was written).
_NATIVE_SCRIPT = f"""
export PATH={CONTAINER_GUARD_DIR}/bin:$PATH
cd "$WORKSPACE" || exit 90
timeout -k 5 "$1" bash {TESTS_DIR}/test.sh 1>&2
code=$?
tar -C {LOGS_DIR}/verifier -cf - . 2>/dev/null
exit $code
"""
# Anything else, as root: $1 the working directory, $2 the staged files (ws/, tests/), $3 a name
# kept from the image's working directory ("" keeps nothing), then the command.
_ROOT_SCRIPT = f"""
ws=$1 stage=$2 keep=$3
shift 3
mkdir -p "$ws" || exit 90
if [ -n "$keep" ]; then find "$ws" -mindepth 1 -maxdepth 1 ! -name "$keep" -exec rm -rf -- {{}} +
else find "$ws" -mindepth 1 -maxdepth 1 -exec rm -rf -- {{}} +; fi
find "$stage/ws" -mindepth 1 -maxdepth 1 -exec mv -t "$ws" -- {{}} + &&
  rm -rf {TESTS_DIR} {LOGS_DIR}/verifier && mkdir -p {LOGS_DIR}/verifier {LOGS_DIR}/agent &&
  mv "$stage/tests" {TESTS_DIR} && rm -rf "$stage" && cd "$ws" || exit 90
"$@" 1>&2
code=$?
tar -C {LOGS_DIR}/verifier -cf - . 2>/dev/null
exit $code
"""


def _guard_files(tmp: Path) -> Path:
    dest = tmp / "guard"
    write_guard(dest, runner_path=[], site=True, python=None, bin_dir=f"{CONTAINER_GUARD_DIR}/bin")
    return dest


def verify_fresh(runtime: "VerifierHost", task: Task, workspace: Path, episode_dir: Path) -> VerifyResult:
    """The task's tests on ``workspace`` (the agent's exported final files) in a new container."""
    start = time.monotonic()
    timeout = task.limits.verify_timeout_s
    container = runtime.verifier(task)
    runtime.verifying(container, True)
    try:
        with tempfile.TemporaryDirectory(prefix="harness-verify-") as tmp_name:
            tmp = Path(tmp_name)
            if guarded(task):
                code, logs, err = _run_native(runtime, container, task, workspace, tmp, timeout)
            else:
                code, logs, err = _run_as_root(runtime, container, task, workspace, timeout)
            timed_out = code in (124, 137)
            output = err.text()
            got = tmp / "logs"
            got.mkdir()
            if not extract_tar(logs, got):  # no tar in the image, or too much: the engine's copy
                with contextlib.suppress(Exception):
                    export_dir(container, f"{LOGS_DIR}/verifier", got)
            result = _result(task, code, timed_out, output, got, episode_dir, timeout, start)
            container.reload()
            network = str((container.attrs.get("HostConfig") or {}).get("NetworkMode") or "none")
            return result.model_copy(update={"network": network})
    finally:
        runtime.verifying(container, False)
        runtime.remove_later(container)


def _run_native(
    runtime: "VerifierHost",
    container: "Container",
    task: Task,
    workspace: Path,
    tmp: Path,
    timeout: float,
) -> tuple[int, bytes, CappedBytes]:
    workdir = runtime.workdir(task).strip("/")
    agent = (AGENT_UID, AGENT_UID)
    data = tar_tree(
        [
            (workspace, workdir, agent),
            (task.tests_dir, TESTS_DIR.strip("/"), (0, 0)),
            (_guard_files(tmp), CONTAINER_GUARD_DIR.strip("/"), (0, 0)),
            (None, f"{LOGS_DIR.strip('/')}/verifier", agent),  # test.sh may write $REWARD_FILE
            (None, f"{LOGS_DIR.strip('/')}/agent", agent),
        ]
    )
    if not container.put_archive("/", data):
        raise RuntimeError(f"could not copy the workspace and tests into {container.name}")
    env = {
        **resolve_env(task.verifier_env),
        "WORKSPACE": "/" + workdir,
        "PYTHON": f"{CONTAINER_GUARD_DIR}/bin/python",
        "TESTS_DIR": TESTS_DIR,
        "TEST_DIR": TESTS_DIR,
        "REWARD_FILE": f"{LOGS_DIR}/verifier/reward.txt",
        "HOME": "/home/agent",
        "USER": "agent",
    }
    cmd = ["sh", "-c", _NATIVE_SCRIPT, "-", f"{timeout:g}"]
    return exec_capped(container, cmd, user=f"{AGENT_UID}:{AGENT_UID}", workdir="/", env=env)


def _run_as_root(
    runtime: "VerifierHost", container: "Container", task: Task, workspace: Path, timeout: float
) -> tuple[int, bytes, CappedBytes]:
    stage = stage_name()
    keep = ".git" if is_swebench(task) else ""
    data = tar_tree(
        [
            (None, stage.strip("/"), (0, 0)),
            (workspace, f"{stage.strip('/')}/ws", (0, 0)),
            (task.tests_dir, f"{stage.strip('/')}/tests", (0, 0)),
        ],
        skip={f"{stage.strip('/')}/ws/.git"} if keep else frozenset(),
        # SWE-bench grades a patch on a clean image, and a patch carries no bytecode: a fix
        # compiled, its buggy source put back, must not pass here where it fails there.
        no_bytecode=is_swebench(task),
    )
    if not container.put_archive("/", data):
        raise RuntimeError(f"could not copy the workspace and tests into {container.name}")
    env = {
        **container_env(task),
        **resolve_env(task.verifier_env),
        "WORKSPACE": runtime.workdir(task),
        "PYTHON": "python3",
        "TESTS_DIR": TESTS_DIR,
        "TEST_DIR": TESTS_DIR,
        "REWARD_FILE": f"{LOGS_DIR}/verifier/reward.txt",
    }
    cmd = ["sh", "-c", _ROOT_SCRIPT, "-", runtime.workdir(task), stage, keep]
    cmd += ["timeout", "-k", "5", f"{timeout:g}", "bash", f"{TESTS_DIR}/test.sh"]
    return exec_capped(container, cmd, user="0", workdir="/", env=env)


def _result(
    task: Task,
    code: int,
    timed_out: bool,
    output: str,
    logs: Path,
    episode_dir: Path,
    timeout: float,
    start: float,
) -> VerifyResult:
    tampering: str | None = None
    if guarded(task):
        try:
            written = read_reward(logs)
        except ValueError:
            written = None
        reward, tampering, remark = score_exit(code, timed_out, written, "$REWARD_FILE", output)
        output += remark
        if timed_out:
            output += f"\n[harness] tests timed out after {timeout:g} s"
        if tampering:
            output += f"\n[harness] scored 0: {tampering}"
    else:
        if not timed_out and (graded := grade_logs(task.tests_dir, logs)) is not None:
            output += f"\n[harness] {graded}"  # a SWE-bench task: its log graded by swebench
            with contextlib.suppress(OSError):
                episode_dir.mkdir(parents=True, exist_ok=True)
                (episode_dir / "swebench_report.json").write_bytes((logs / "report.json").read_bytes())
        reward, output = score_tests(code, timed_out, logs, output, timeout)
    return VerifyResult(
        resolved=reward >= 1.0,
        reward=reward,
        exit_code=None if timed_out else code,
        timed_out=timed_out,
        seconds=time.monotonic() - start,
        output_tail=output[-2000:],
        tampering=tampering,
        mode="fresh",
        output=output,
    )


def verifier_name(run: str) -> str:
    return f"harness-{run}-verify-{uuid.uuid4().hex[:12]}"
