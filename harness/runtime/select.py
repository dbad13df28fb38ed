"""Pick the runtime by its short name: ``local``, ``docker``, or ``auto`` (docker when an engine answers)."""

from typing import Literal

from harness.progress import console
from harness.runtime.base import ContainerLimits, Runtime
from harness.runtime.export_caps import ExportLimits
from harness.runtime.local import LocalRuntime

RuntimeName = Literal["auto", "local", "docker"]


def get_runtime(
    name: RuntimeName,
    limits: ContainerLimits | None = None,
    image_map: tuple[str, ...] = (),
    exports: ExportLimits | None = None,
) -> Runtime:
    """``image_map``: --image-map FROM=TO entries for task images (docker runtime); ``exports``: the
    caps on an episode's final files copied out of its sandbox."""
    if name == "local":
        return LocalRuntime(exports)
    from harness.runtime.engine import docker_client, engine_answers

    if name == "auto" and not engine_answers():
        console.print(
            "[yellow]warning:[/] no container engine answers: episodes run in local directories, and the "
            "agent's commands and the tasks' tests run unconfined on this machine (--runtime docker "
            "needs Docker or podman; --runtime local silences this)",
            highlight=False,
        )
        return LocalRuntime(exports)
    from harness.errors import HarnessError
    from harness.runtime.container import ContainerRuntime
    from harness.runtime.images import ensure_sandbox_image
    from harness.runtime.task_images import parse_image_map

    mapping = parse_image_map(image_map)  # a malformed entry fails before any engine work
    client = docker_client()
    if name == "auto":
        try:
            ensure_sandbox_image(client)
        except HarnessError as exc:  # an engine, but no sandbox image to be had here
            console.print(
                f"[yellow]warning:[/] a container engine answers but the sandbox image cannot be made ({exc}): "
                "episodes run in local directories, unconfined on this machine",
                highlight=False,
            )
            return LocalRuntime(exports)
    return ContainerRuntime(client, limits, mapping, exports)
