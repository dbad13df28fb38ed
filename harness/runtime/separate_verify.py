"""Harbor's separate verifier (``[verifier] environment_mode = "separate"``) under the docker runtime.

When the agent is done, its artifacts are collected from its container (Harbor's convention
directory ``/logs/artifacts`` and the task's ``artifacts`` paths) into the episode directory's
``artifacts/`` (mirroring their absolute paths, as Harbor lays them out), and the agent's
container is removed: in separate mode it has no further use. The tests then run in a new
container of the verifier's own image (built from ``tests/Dockerfile`` with ``tests/`` as its
context, or ``[verifier.environment] docker_image``, else a fresh container of the task's own
image), on the verifier phase's network, with the artifacts put back at their paths. A verifier
image built from ``tests/`` holds its tests already (Harbor uploads none then); otherwise
``tests/`` goes to ``/tests``. ``test.sh`` runs as root; the reward is read from
``/logs/verifier`` as in shared mode. The agent's workspace never reaches the verifier.
"""

import contextlib
import shutil
import tarfile
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from harness.runtime.container_exec import exec_capped
from harness.runtime.container_files import export_dir, extract_safe, extract_tar, tar_tree
from harness.runtime.container_verify import VerifierHost
from harness.tasks import Task, VerifyResult
from harness.tasks.harbor import LOGS_DIR, TESTS_DIR
from harness.tasks.verify import score_tests

if TYPE_CHECKING:
    from docker.models.containers import Container


class SeparateHost(VerifierHost, Protocol):
    """What a separate verifier needs of its runtime (ContainerRuntime, as for VerifierHost)."""

    def verifier_image(self, task: Task) -> tuple[str, bool]: ...

    def verifier_env(self, task: Task) -> dict[str, str]: ...

    def image_workdir(self, ref: str) -> str: ...

    def new_verifier(self, task: Task, image: str, env: dict[str, str]) -> "Container": ...


ARTIFACTS = "artifacts"  # under the episode directory
# $1 the working directory, $2 whether tests were uploaded (1) or are in the image (0), then the command.
_SCRIPT = f"""
rm -rf {LOGS_DIR}/verifier && mkdir -p {LOGS_DIR}/verifier {LOGS_DIR}/agent "$1" && cd "$1" || exit 90
shift 1
"$@" 1>&2
code=$?
tar -C {LOGS_DIR}/verifier -cf - . 2>/dev/null
exit $code
"""


def collect_artifacts(container: "Container", task: Task, episode_dir: Path) -> Path:
    """The task's artifacts from the agent's container into ``episode_dir/artifacts`` (absolute
    paths mirrored below it); a source that is not there is left out, as Harbor does."""
    dest = episode_dir / ARTIFACTS
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    sources = task.harbor.artifacts if task.harbor else ()
    for source in sources:
        target = dest / source.strip("/")
        try:
            export_dir(container, source, target)  # a directory
            continue
        except Exception:
            shutil.rmtree(target, ignore_errors=True)
        with contextlib.suppress(Exception):  # a single file, or nothing there
            stream, _ = container.get_archive(source)
            data = b"".join(stream)
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile() as fh:
                fh.write(data)
                fh.seek(0)
                with tarfile.open(fileobj=fh, mode="r") as tar:
                    extract_safe(tar, target.parent)
    return dest


def _artifact_parts(root: Path, sources: tuple[str, ...]) -> list[tuple[Path | None, str, tuple[int, int]]]:
    """tar_tree parts putting each collected artifact back at its path (a file: through its directory)."""
    parts: list[tuple[Path | None, str, tuple[int, int]]] = []
    for source in sources:
        here = root / source.strip("/")
        if here.is_dir():
            parts.append((here, source.strip("/"), (0, 0)))
        elif here.is_file():
            holder = Path(tempfile.mkdtemp(prefix="harness-artifact-", dir=root.parent))
            shutil.copy2(here, holder / here.name)
            parts.append((holder, source.strip("/").rpartition("/")[0], (0, 0)))
    return parts


def verify_separate(runtime: "SeparateHost", task: Task, episode_dir: Path) -> VerifyResult:
    """The task's tests in a new container of its verifier image, with the collected artifacts."""
    start = time.monotonic()
    timeout = task.limits.verify_timeout_s
    spec = task.harbor
    assert spec is not None
    image, bundled = runtime.verifier_image(task)
    env = runtime.verifier_env(task)
    container = runtime.new_verifier(task, image, env)
    runtime.verifying(container, True)
    try:
        with tempfile.TemporaryDirectory(prefix="harness-separate-") as tmp_name:
            tmp = Path(tmp_name)
            root = episode_dir / ARTIFACTS
            staged = tmp / "artifacts"
            if root.is_dir():
                shutil.copytree(root, staged, symlinks=True)
            else:
                staged.mkdir()
            parts = _artifact_parts(staged, spec.artifacts)
            if not bundled:
                parts.append((task.tests_dir, TESTS_DIR.strip("/"), (0, 0)))
            if parts and not container.put_archive("/", tar_tree(parts)):
                raise RuntimeError(f"could not copy the artifacts and tests into {container.name}")
            workdir = runtime.image_workdir(image)
            env = {
                **env,
                "TESTS_DIR": TESTS_DIR,
                "TEST_DIR": TESTS_DIR,
                "REWARD_FILE": f"{LOGS_DIR}/verifier/reward.txt",
            }
            cmd = [
                "sh",
                "-c",
                _SCRIPT,
                "-",
                workdir,
                "timeout",
                "-k",
                "5",
                f"{timeout:g}",
                "bash",
                f"{TESTS_DIR}/test.sh",
            ]
            code, logs, err = exec_capped(container, cmd, user="0", workdir="/", env=env)
            timed_out = code in (124, 137)
            got = tmp / "logs"
            got.mkdir()
            if not extract_tar(logs, got):
                with contextlib.suppress(Exception):
                    export_dir(container, f"{LOGS_DIR}/verifier", got)
            reward, output = score_tests(code, timed_out, got, err.text(), timeout)
            container.reload()
            network = str((container.attrs.get("HostConfig") or {}).get("NetworkMode") or "none")
        return VerifyResult(
            resolved=reward >= 1.0,
            reward=reward,
            exit_code=None if timed_out else code,
            timed_out=timed_out,
            seconds=time.monotonic() - start,
            output_tail=output[-2000:],
            mode="separate",
            output=output,
            network=network,
        )
    finally:
        runtime.verifying(container, False)
        runtime.remove_later(container)
