"""The workspace part of the episode seam: a runtime makes one sandbox per episode.

A sandbox is where an agent's commands run and where the task's tests run afterwards. A runner
sees only the seam's verbs (harness/seam.py: ``workdir``, exec, read, write, copy in, copy out,
close); the driver also ``finish()``es it when the agent is done (the final files exported into
the episode directory's ``workspace``), ``verify()``s it (in a fresh sandbox with the final files
for native and SWE-bench tasks, harness/tasks/fresh.py) and closes it; ``run_solution()`` applies
the task's reference solution instead of an agent, as Harbor's oracle does (``tasks verify``).
What a scaffold needs running inside (OpenHands' tool server) is its runner's ``SandboxPrep``.
"""

from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from harness.runtime.export_caps import ExportLimits
from harness.seam import Sandbox
from harness.tasks import Task, VerifyResult


class ContainerLimits(BaseModel):
    """What one episode's container may use."""

    model_config = ConfigDict(frozen=True)

    cpus: float = Field(2.0, gt=0, description="CPUs per episode container.")
    memory_gib: float = Field(4.0, gt=0, description="Memory per episode container, GiB (no swap).")
    pids: int = Field(512, ge=16, description="Processes per episode container.")


class SandboxConfig(BaseModel):
    """How episodes' sandboxes are made (the ``sandbox`` section of EvalConfig): limits of a
    container (docker runtime), image substitutions, and how much of the final files is copied out."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpus: float = Field(2.0, gt=0, description="CPUs per episode container (docker runtime).")
    memory_gib: float = Field(
        4.0, gt=0, description="Memory per episode container in GiB, no swap (docker runtime)."
    )
    pids: int = Field(512, ge=16, description="Processes per episode container (docker runtime).")
    image_map: tuple[str, ...] = Field(
        (),
        description="FROM=TO: use image TO wherever a task's docker_image or Dockerfile FROM names FROM "
        "(exact, or a prefix ending in / or :), e.g. for a mirror registry (docker runtime).",
        json_schema_extra={"flag": "image-map", "metavar": "FROM=TO"},
    )
    force_build: bool = Field(
        False,
        description="Build a Harbor task's environment/Dockerfile even when its task.toml names a prebuilt "
        "docker_image (Harbor's --force-build); without it the docker_image is pulled, and a failed pull is "
        "the task's error (docker runtime).",
        json_schema_extra={"flag": "force-build"},
    )
    network: Literal["task", "none", "public"] = Field(
        "task",
        description="Network of the task containers (docker runtime): task = as each Harbor task's task.toml "
        "says per phase (Harbor's default: public; other tasks: none), none = no network for any (a note names "
        "each task denied network it asks for), public = the engine's bridge network for all.",
        json_schema_extra={"flag": "network"},
    )
    swebench_images: str = Field(
        "swebench",
        description="Namespace of the official SWE-bench instance images (swebench's naming: "
        "NAMESPACE/sweb.eval.<arch>.<instance>:latest), pulled when missing: swebench is Docker Hub's; a mirror is "
        "REGISTRY/NAMESPACE. local: build each instance here from the sandbox image instead (air-gapped; needs a "
        "clone of each repository; the README says what differs).",
        json_schema_extra={"flag": "swebench-images", "metavar": "NAMESPACE"},
    )
    task_env: tuple[str, ...] = Field(
        (),
        description="VAR: a task's ${VAR} may take this machine's value of VAR (repeatable); a task that asks "
        "for any other (without a default) is refused, and the named values are masked in the run's files.",
        json_schema_extra={"flag": "task-env", "metavar": "VAR"},
    )
    export_max_gib: float = Field(
        1.0,
        gt=0,
        description="Most GiB of an episode's final files copied out of its sandbox (each file at its "
        "full size, sparse or not); over it the episode is an error naming the cap, and nothing is copied.",
        json_schema_extra={"flag": "export-max-gib"},
    )
    export_max_files: int = Field(
        100_000,
        ge=1,
        description="Most files (and directories) of an episode's final files copied out of its sandbox.",
        json_schema_extra={"flag": "export-max-files"},
    )

    @property
    def limits(self) -> ContainerLimits:
        return ContainerLimits(cpus=self.cpus, memory_gib=self.memory_gib, pids=self.pids)

    @property
    def exports(self) -> ExportLimits:
        return ExportLimits(max_bytes=int(self.export_max_gib * (1 << 30)), max_files=self.export_max_files)


class EpisodeSandbox(Sandbox, Protocol):
    """What the driver holds of an episode's sandbox: the seam's verbs (all a runner sees), and the
    episode's life around the agent: its instruction, the final files exported, verification."""

    def instruction(self) -> str:
        """The task's instruction as the agent reads it in here (local paths rewritten)."""
        ...

    def finish(self) -> None:
        """The agent is done: its final files in the episode directory's ``workspace``; ExportLimit
        (export_caps.py) when they are over the run's caps, and then none of them are there."""
        ...

    def run_solution(self) -> tuple[bool, str]:
        """Apply the task's reference solution here; (ok, output tail)."""
        ...

    def verify(self) -> VerifyResult: ...


class Verifiable(Protocol):
    """A finished episode, for its verification."""

    def verify(self) -> VerifyResult: ...

    def close(self) -> None: ...


class SandboxPrep(Protocol):
    """What a runner starts in a sandbox before its episode (OpenHands: the tool server in a
    container), which a runtime may do ahead, while earlier episodes run (warm.py)."""

    key: str  # sandboxes prepared by equal keys are interchangeable

    def start(self, sandbox: Sandbox) -> None:
        """Begin (returns once under way; idempotent: an episode calls it on what it is given)."""
        ...

    def settle(self, sandbox: Sandbox) -> None:
        """Until what ``start`` began is up (or has failed: the episode meets the error)."""
        ...


class Runtime(Protocol):
    name: str
    images: (
        bool  # whether its sandboxes run tasks' container images (a task needing one is skipped elsewhere)
    )

    def prepare(self, run_dir: Path, tasks: list[Task], keep: frozenset[str] = frozenset()) -> None:
        """Before any episode: what every episode of this run needs (images), and what killed runs
        left behind removed, except the sandboxes of ``keep`` (episode keys of this run that wait
        for verification)."""
        ...

    def warm_up(self, episodes: "list[tuple[Task, SandboxPrep | None]]", ahead: int) -> None:
        """The episodes' tasks (and their runners' preps) in the order their sandboxes will be
        opened: a runtime whose sandboxes are slow to start starts ``ahead`` of them, prepared,
        before they are asked for."""
        ...

    def cool_down(self) -> None:
        """After the episodes (and the verifications): what was started ahead and not taken, removed."""
        ...

    def halt(self) -> int:
        """The run is stopping: the verifications running now end at once (a container's tests
        with its container, a local test script's whole process tree); how many ended."""
        ...

    def expect_verifications(self, tasks: list[Task], ahead: int) -> None:
        """The tasks of the verifications to come, in order: a runtime whose fresh verification
        sandboxes are slow to start starts ``ahead`` of them now (``cool_down`` removes the rest)."""
        ...

    def open(
        self,
        task: Task,
        episode_dir: Path,
        key: str,
        *,
        agent: bool = True,
        prep: "SandboxPrep | None" = None,
    ) -> EpisodeSandbox:
        """A new sandbox for the episode ``key`` (a rollout's, or ``tasks verify``'s), one started
        ahead with ``prep`` when there is one. ``agent=False``: no agent will act in it, so what
        only an agent needs is skipped."""
        ...

    def reopen(self, task: Task, episode_dir: Path, key: str) -> "Verifiable":
        """Where the episode ``key``, finished, is verified: the sandbox its rollout left, or what
        stands in for it (a fresh one, or one rebuilt from the exported files)."""
        ...
