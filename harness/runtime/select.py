"""Pick the runtime by its short name (harness/registry.py: ``local``, ``bwrap``, ``docker``), or
``auto``: docker when an engine answers and the sandbox image can be had, else bwrap where
bubblewrap confines a command here, else local (unconfined), said in one line."""

from typing import Literal

from harness import registry
from harness.errors import HarnessError
from harness.progress import console
from harness.runtime.base import Runtime, SandboxConfig

RuntimeName = Literal["auto", "local", "bwrap", "docker"]


def _auto() -> str:
    """``docker`` when an engine answers and the sandbox image is there or can be made, else
    ``bwrap`` where it confines a command here, else ``local``."""
    from harness.runtime.engine import docker_client, engine_answers
    from harness.runtime.images import ensure_sandbox_image

    if engine_answers():
        try:
            ensure_sandbox_image(docker_client())
            return "docker"
        except HarnessError as exc:  # an engine, but no sandbox image to be had here
            why = f"a container engine answers but the sandbox image cannot be made ({exc})"
    else:
        why = "no container engine answers"
    return _without_engine(why)


def _without_engine(why: str) -> str:
    from harness.runtime.bwrap import INSTALL, usable

    refused = usable()
    if refused is None:
        console.print(
            f"{why}: episodes run in local directories confined by bubblewrap (--runtime bwrap)",
            highlight=False,
        )
        return "bwrap"
    console.print(
        f"[yellow]warning:[/] {why}, and {refused.replace(INSTALL, '').rstrip('; ')}: episodes run in local "
        "directories, and the agent's commands and the tasks' tests run unconfined on this machine "
        f"({INSTALL}; --runtime docker needs Docker or podman; --runtime local silences this)",
        highlight=False,
    )
    return "local"


def make_runtime(name: str, config: SandboxConfig | None = None) -> Runtime:
    """The runtime ``name`` stands for (``auto`` resolved here), made with ``config``."""
    if name == "auto":
        if config is not None and config.image_map:
            from harness.runtime.task_images import parse_image_map

            parse_image_map(config.image_map)  # a malformed entry fails before any engine work
        name = _auto()
    runtime: Runtime = registry.load("runtime", name, flag="--runtime")(config or SandboxConfig())
    return runtime
