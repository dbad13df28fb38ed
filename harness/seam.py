"""The episode seam's contracts: what every scaffold, sandbox, model endpoint and executor agrees on.

A low module on purpose: it imports only pydantic, the monitor's records and the task model, and
everything else depends on it, never the other way round. Each contract is the smallest set of
verbs its users need (mini-swe-agent's ``Environment.execute``, Inspect's ``SandboxEnvironment``,
the OpenHands SDK's ``BaseWorkspace`` were the anchors):

- ``EpisodeSpec``: one episode to run (task, seed, model, scaffold, limits), scaffold-neutral;
- ``Sandbox``: where an episode's commands run: exec / read / write / copy in / copy out / close;
- ``ModelEndpoint``: an OpenAI URL ending in ``/v1`` and the name requests carry, brought up and
  given back on demand, its server's facts as data (never the server object);
- ``EpisodeRunner``: run(spec, sandbox, endpoint) -> ``EpisodeOutcome`` (turns as ``Turn`` records).

Above them: the runtimes that make sandboxes (harness/runtime/base.py), the executors that run
episodes (harness/executor.py: threads here, Ray in harness/cluster), both through one
``run_attempts`` (harness/rollout.py); each kind picked by name (harness/registry.py).
"""

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from harness.monitor import LoopFinding, Turn
from harness.tasks.loader import Task

EpisodeStatus = Literal["finished", "loop_stopped", "max_iterations", "stuck", "error"]


class ResumeState(BaseModel):
    """Where an interrupted episode goes on from: its last checkpoint (harness/resume)."""

    model_config = ConfigDict(frozen=True)

    turn: int = Field(ge=1, description="Turns complete at the checkpoint.")
    state: dict[str, Any] = Field(description="The runner's own state, as its ``state()`` gave it.")


@runtime_checkable
class Checkpointing(Protocol):
    """An episode's checkpoints: a runner tells it of every completed turn (harness/resume)."""

    @property
    def resume(self) -> ResumeState | None:
        """The checkpoint to go on from (its sandbox files are back already); None: from turn 1."""
        ...

    def turn_done(self, turns: int, state: Callable[[], dict[str, Any]]) -> bool:
        """``turns`` turns are complete (their tools ran) and the next model call has not begun: a
        checkpoint of ``state()`` (JSON data) and the sandbox's files, as often as the run asks.
        True: the run is stopping; end the episode now (its outcome says ``stopped``)."""
        ...

    def before_tools(self) -> None:
        """The model has answered and its tools are about to run. A runner that calls this before
        every tool call of every turn lets the sandbox's files of a checkpoint be saved while the
        model thinks (off the episode's path); one that never calls it gets them saved within
        ``turn_done``. Raises what the save raised."""
        ...


@runtime_checkable
class LocalHelpers(Protocol):
    """A sandbox on this machine that confines its processes (runtime/bwrap.py): a long-lived helper
    of a runner (the agent's shell) starts under its command prefix, and a tool that acts in the
    harness process (a file editor) keeps to one directory."""

    def helper_prefix(self, writable: Sequence[Path] = ()) -> tuple[str, ...]:
        """The command prefix that runs a helper confined as ``exec`` runs a command; ``writable``:
        paths on this machine it may write besides the workspace (its history)."""
        ...

    @property
    def confined_to(self) -> Path | None:
        """The one directory an in-process tool may touch (None: unconfined)."""
        ...


class EpisodeSpec(BaseModel):
    """One episode: which task, seed, model and scaffold, with what limits, writing where."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    key: str = Field(description="The episode's key in the run (model/task/seedN, scaffold-qualified).")
    task: Task
    seed: int = Field(ge=1)
    model: str = Field(description="The model name the records carry.")
    scaffold: str = Field(description="The scaffold's short name (scaffolds/NAME).")
    out_dir: Path = Field(description="The episode's directory in the run (absolute).")
    instruction: str = Field(description="The task's instruction as the agent reads it in its sandbox.")
    max_iterations: int | None = Field(None, ge=1, description="Model turns at most (None: scaffold's).")
    temperature: float | None = Field(None, ge=0, le=2, description="None: the scaffold's sampling.")
    max_output_tokens: int | None = Field(
        None, ge=1, description="Tokens a turn may generate (None: the scaffold's)."
    )
    time_limit_s: float | None = Field(None, gt=0, description="Wall time of the agent's part.")
    checkpoint: Checkpointing | None = Field(
        None, exclude=True, description="Where its turns are checkpointed and resumed from (None: nowhere)."
    )


class ExecResult(BaseModel):
    """What a command in a sandbox did: its exit code (None when it timed out) and its output
    (stdout and stderr as they came, decoded, replacing undecodable bytes)."""

    model_config = ConfigDict(frozen=True)

    exit_code: int | None
    output: str
    timed_out: bool = False


class Sandbox(Protocol):
    """Where an episode's commands run: a local directory or a container. Paths are as commands
    in the sandbox see them; ``workdir`` is the agent's working directory."""

    @property
    def workdir(self) -> str: ...

    def exec(
        self,
        cmd: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """Run ``cmd`` (a string: through ``bash -c``) and wait for it, at most ``timeout`` seconds;
        everything it started ends with it. ``user``: None is the agent's user, ``"root"`` root."""
        ...

    def read(self, path: str) -> bytes: ...

    def write(self, path: str, data: bytes) -> None: ...

    def copy_in(self, src: Path, dest: str) -> None:
        """A host file or directory copied to ``dest`` in the sandbox (links copied as links)."""
        ...

    def copy_out(self, src: str, dest: Path) -> None:
        """``src`` of the sandbox copied to ``dest`` on the host (links never followed out)."""
        ...

    def close(self) -> None: ...


class ServerFacts(BaseModel):
    """What a model server did in a run, as data: seconds up and busy over every start."""

    model_config = ConfigDict(frozen=True)

    up_s: float = 0.0
    busy_s: float = 0.0


class ModelEndpoint(Protocol):
    """Where an episode's model requests go (managed vLLM, a server someone runs, replay, proxy)."""

    name: str  # the model name requests carry
    path: str  # what the episode record calls the model (checkpoint path or the name)

    @property
    def openai_url(self) -> str: ...

    @property
    def api_key(self) -> str: ...

    @property
    def server_id(self) -> str:
        """Endpoints with equal ids share one server (a LoRA adapter and its base): brought up and
        given back together."""
        ...

    def ensure_up(self) -> None: ...

    def healthy(self) -> bool: ...

    def release(self, *, now: bool = False) -> None:
        """The server given back (its GPU free); ``now``: the run is stopping, no grace."""
        ...

    def facts(self) -> ServerFacts | None:
        """The server's up and busy seconds so far, over every start (None: no server the
        harness runs)."""
        ...


class EpisodeOutcome(BaseModel):
    """What a runner hands back, whatever the scaffold: the driver turns it into a record."""

    model_config = ConfigDict(frozen=True)

    status: EpisodeStatus
    turns: list[Turn]
    loop: LoopFinding | None = None
    error: str | None = None
    error_type: str | None = None
    wall_s: float = 0.0
    llm_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    timed_out: bool = False
    infra: bool = False  # failed because of the infrastructure: retried, never scored
    stopped: bool = False  # the run was stopped while it ran: it is not recorded
    resumed_turns: int = 0  # turns taken from a checkpoint of an earlier, interrupted attempt
    resume_note: str | None = None  # why a checkpoint on disk was not used (the episode began again)
    checkpoint_s: float = 0.0  # seconds spent saving checkpoints
    details: dict[str, str] = Field(
        default_factory=dict, description="Scaffold-specific facts kept beside the record (exit status, ...)."
    )


class EpisodeRunner(Protocol):
    """One scaffold: drives its agent in ``sandbox`` against ``endpoint``; ``stop`` set means the
    run is stopping (end at once: the outcome says ``stopped``). ``loggers``: the ``logging``
    names its framework logs under (sent to the run's log file, not the terminal)."""

    loggers: tuple[str, ...]
    # True: it runs the loop monitor on its own turns (the model-call proxy only records its
    # requests); False: the proxy watches its requests and stops it on a certain loop.
    watches_loops: bool

    def run(
        self, spec: EpisodeSpec, sandbox: Sandbox, endpoint: ModelEndpoint, stop: threading.Event
    ) -> EpisodeOutcome: ...
