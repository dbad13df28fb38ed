"""Pick the runtime by its short name (harness/registry.py: ``local``, ``docker``), or ``auto``:
docker when an engine answers and the sandbox image can be had, else local, said in one line."""

from typing import Literal

from harness import registry
from harness.errors import HarnessError
from harness.progress import console
from harness.runtime.base import Runtime, SandboxConfig

RuntimeName = Literal["auto", "local", "docker"]


def _auto() -> str:
    """``docker`` when an engine answers and the sandbox image is there or can be made, else ``local``."""
    from harness.runtime.engine import docker_client, engine_answers
    from harness.runtime.images import ensure_sandbox_image

    if not engine_answers():
        console.print(
            "[yellow]warning:[/] no container engine answers: episodes run in local directories, and the "
            "agent's commands and the tasks' tests run unconfined on this machine (--runtime docker "
            "needs Docker or podman; --runtime local silences this)",
            highlight=False,
        )
        return "local"
    try:
        ensure_sandbox_image(docker_client())
    except HarnessError as exc:  # an engine, but no sandbox image to be had here
        console.print(
            f"[yellow]warning:[/] a container engine answers but the sandbox image cannot be made ({exc}): "
            "episodes run in local directories, unconfined on this machine",
            highlight=False,
        )
        return "local"
    return "docker"


def make_runtime(name: str, config: SandboxConfig | None = None) -> Runtime:
    """The runtime ``name`` stands for (``auto`` resolved here), made with ``config``."""
    if name == "auto":
        if config is not None and config.image_map:
            from harness.runtime.task_images import parse_image_map

            parse_image_map(config.image_map)  # a malformed entry fails before any engine work
        name = _auto()
    runtime: Runtime = registry.load("runtime", name, flag="--runtime")(config or SandboxConfig())
    return runtime
