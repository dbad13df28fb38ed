"""`harness eval`'s options, each defined once: the CLI's flags and the ``[eval]`` table of
harness.toml are generated from these fields, and the sections nest the options of each part
(``server``: how vLLM runs; ``sandbox``: where episodes run; ``loop``: the loop detector;
``executor``: where episodes are spread). A section's flag is ``--SECTION-FIELD`` unless its field
names another (``json_schema_extra={"flag": ...}``)."""

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness._cli_options import flag_for
from harness.errors import HarnessError
from harness.monitor import LoopConfig
from harness.paths import absolute
from harness.runtime.base import SandboxConfig
from harness.server.config import PER_SERVER_FIELDS, ServerOptions, config_file_values
from harness.tasks.selection import TaskLimit, TaskPatterns


class ExecutorConfig(BaseModel):
    """Where episodes are spread (the ``executor`` section)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Literal["threads", "ray"] = Field(
        "threads",
        description="How episodes are spread: threads of this process, or ray: model replicas and "
        "episodes over a Ray cluster (pip install 'harness[ray]').",
        json_schema_extra={"flag": "executor"},
    )
    ray_address: str | None = Field(
        None,
        description="--executor ray: the cluster to join (auto: the one started on this machine with "
        "`ray start`; HOST:PORT: its head) [default: RAY_ADDRESS, else a one-machine Ray started for the run].",
        json_schema_extra={"flag": "ray-address"},
    )
    ray_replicas: int | None = Field(
        None,
        ge=1,
        description="--executor ray: model replicas at most [default: one per GPU group the plan "
        "asks for on every node; one per node on a cluster without GPUs].",
        json_schema_extra={"flag": "ray-replicas"},
    )


class EvalConfig(BaseModel):
    """Everything `harness eval` needs (module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    models: tuple[str, ...] = Field(
        min_length=1,
        description="Checkpoint, bundled name, or replay:SCRIPT (a replay script served on demand); give twice "
        "for base + fine-tuned (with --base-url: served names).",
        json_schema_extra={"flag": "model"},
    )
    seeds: int = Field(1, ge=1, le=100, description="Seeds per task.")
    tasks: str = Field("smoke", description="Built-in suite, a directory of tasks, or a SWE-bench .jsonl.")
    task: TaskPatterns = ()
    limit: TaskLimit = None
    skip_unsupported: bool = Field(
        False, description="Skip tasks this runtime cannot run (listing them) instead of stopping."
    )
    concurrency: Annotated[int, Field(ge=1, le=64)] | Literal["auto"] = Field(
        "auto",
        description="Episodes in flight at once per model server (--executor ray: per replica): a number, "
        "or auto: start from the memory plan and the sandboxes the host holds, then follow the server's "
        "KV cache, queue and preemptions.",
        json_schema_extra={"metavar": "N|auto"},
    )
    max_concurrency: int | None = Field(
        None,
        ge=1,
        le=64,
        description="--concurrency auto: at most this many episodes in flight per model server "
        "[default: as many sandboxes as the host holds].",
        json_schema_extra={"metavar": "N"},
    )
    max_iterations: int | None = Field(
        None, ge=1, description="Model turns per episode (default: the task's, then the scaffold's)."
    )
    temperature: float | None = Field(
        None, ge=0, le=2, description="Sampling temperature (default: the scaffold's)."
    )
    max_output_tokens: int | None = Field(
        None,
        ge=1,
        description="Tokens one model turn may generate (default: the scaffold's).",
        json_schema_extra={"metavar": "N"},
    )
    base_url: str | None = Field(
        None, description="Use this OpenAI-compatible server instead of starting vLLM."
    )
    api_key: str = Field("EMPTY", description="API key for --base-url.")
    run_dir: Path | None = Field(
        None, description="Run directory; rerunning resumes it (default: results/<suite>-<time>)."
    )
    scaffolds: tuple[str, ...] = Field(
        ("openhands-codeact",),
        min_length=1,
        description="Scaffold name or directory; give twice to run the same models under both "
        "(their episodes are then MODEL@SCAFFOLD, compared like models).",
        json_schema_extra={"flag": "scaffold", "metavar": "NAME"},
    )
    runtime: str = Field(
        "auto",
        description="Where episodes run: docker (a container each), bwrap (a directory here, every process "
        "confined by bubblewrap), local (a directory here, unconfined), auto (docker when an engine answers, "
        "else bwrap where it works, else local).",
        json_schema_extra={"metavar": "auto|docker|bwrap|local"},
    )

    @field_validator("runtime")
    @classmethod
    def _known_runtime(cls, value: str) -> str:
        from harness import registry

        known = ["auto", *registry.names("runtime")]
        if value not in known:
            raise ValueError(f"{value!r}: unknown runtime (known: {', '.join(known)})")
        return value

    idle_timeout: float = Field(300.0, ge=0, description="Stop the server after this many idle seconds.")
    stop_grace: float = Field(
        30.0,
        ge=0,
        description="Seconds the first Ctrl-C or SIGTERM gives running episodes to finish the turn in "
        "flight and checkpoint (a second signal, or the grace running out, stops at once); 0: at once.",
    )
    checkpoint_every: int = Field(
        1,
        ge=0,
        description="Checkpoint an episode (its agent's state and its sandbox's files, in its directory) "
        "every N completed turns and at every graceful stop; a rerun resumes it from there. 0: only at a stop.",
    )
    force_resume: bool = Field(
        False,
        description="Resume the run directory even though its manifest differs in what changes results "
        "(a model's checkpoint, chat template or tool-call parser, its server's vLLM or torch version, "
        "the tasks' content, the sampling); "
        "run.json records what changed.",
    )
    sandbox: SandboxConfig = SandboxConfig()
    executor: ExecutorConfig = ExecutorConfig()
    loop: LoopConfig = LoopConfig()
    server: ServerOptions = Field(
        ServerOptions(), description="How the vLLM servers run (the [server] table and the vLLM flags)."
    )

    @field_validator("scaffolds", mode="before")
    @classmethod
    def _one_or_more(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    @field_validator("concurrency", mode="before")
    @classmethod
    def _number_or_auto(cls, value: Any) -> Any:
        """A flag's text: a whole number or auto (one clear message for anything else)."""
        if isinstance(value, str):
            text = value.strip().lower()
            if text == "auto":
                return "auto"
            if not text.isdigit():
                raise ValueError(f"{value!r}: give a number of episodes (1 to 64) or auto")
            return int(text)
        return value

    def fixed_concurrency(self) -> int:
        """Sandboxes at once outside the rollouts (verification): --concurrency, or with auto the
        sandboxes the host holds (capped by --max-concurrency)."""
        if self.concurrency != "auto":
            return self.concurrency
        from harness.admission.start import host_room, sandbox_capacity

        n, _ = sandbox_capacity(host_room(), self.sandbox.cpus, self.sandbox.memory_gib)
        return min(n, self.max_concurrency or n)

    @field_validator("base_url")
    @classmethod
    def _base_url_usable(cls, value: str | None) -> str | None:
        from harness.server.base_url import check_base_url

        return None if value is None else check_base_url(value)

    @field_validator("run_dir")
    @classmethod
    def _run_dir_absolute(cls, value: Path | None) -> Path | None:
        """Resolved once, here: a relative --run-dir means the same directory to every shell,
        test script and tool the run starts, wherever they start."""
        return None if value is None else absolute(value)


# Sections whose flags are not prefixed by the section's name (the server's are vLLM's own).
UNPREFIXED = frozenset({"server"})


def build_eval_config(flags: dict[str, Any]) -> EvalConfig:
    """Flags over the ``[eval]`` table over the ``[server]`` table of the config file (None: not
    given); ``flags`` nests the sections' values as EvalConfig does."""
    server_file = {k: v for k, v in config_file_values("server").items() if k not in PER_SERVER_FIELDS}
    values: dict[str, Any] = {}
    if "idle_timeout" in config_file_values("server"):
        values["idle_timeout"] = config_file_values("server")["idle_timeout"]
    values |= config_file_values("eval")
    values |= {k: v for k, v in flags.items() if v is not None and not isinstance(v, dict)}
    for section in ("sandbox", "executor", "loop", "server"):
        given = {k: v for k, v in (flags.get(section) or {}).items() if v is not None}
        base = server_file if section == "server" else {}
        values[section] = {**base, **(values.get(section) or {}), **given}
    if "scaffold" in values:  # the [eval] table's singular key
        values["scaffolds"] = values.pop("scaffold")
    try:
        config = EvalConfig(**values)
    except ValidationError as exc:
        raise HarnessError(_flag_error(exc)) from None
    ray_only = [
        f"--{k.replace('_', '-')}"
        for k in ("ray_address", "ray_replicas")
        if getattr(config.executor, k) is not None
    ]
    if config.max_concurrency is not None and config.concurrency != "auto":
        raise HarnessError(
            f"--max-concurrency caps --concurrency auto; --concurrency is {config.concurrency}: give one of them"
        )
    if ray_only and config.executor.name != "ray":  # silently running on threads would not be what was asked
        raise HarnessError(
            f"{' and '.join(ray_only)}: only with --executor ray (the executor is {config.executor.name})"
        )
    return config


def _flag_error(exc: ValidationError) -> str:
    """A validation error as the flag that was wrong and why, on one line."""
    err = exc.errors()[0]
    err["msg"] = err["msg"].removeprefix("Value error, ")  # a validator's own sentence, as it wrote it
    loc = [str(p) for p in err["loc"]]
    field = EvalConfig.model_fields.get(loc[0]) if loc else None
    if field is None:
        return f"--{(loc[0] if loc else 'config').replace('_', '-')}: {err['msg']}"
    section = field.annotation
    if (
        len(loc) >= 2
        and isinstance(section, type)
        and issubclass(section, BaseModel)
        and loc[1] in section.model_fields
    ):
        prefix = None if loc[0] in UNPREFIXED else loc[0]
        return f"{flag_for(loc[1], section.model_fields[loc[1]], prefix)}: {err['msg']}"
    return f"{flag_for(loc[0], field)}: {err['msg']}"
