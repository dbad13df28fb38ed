"""The one configuration of a vLLM server launch; CLI flags and config-file keys map onto it."""

import sys
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.errors import HarnessError
from harness.server.cpu_dtype import VLLM_DTYPES

LOOPBACK = "127.0.0.1"
LOOPBACK_HOSTS = frozenset({LOOPBACK, "localhost", "::1"})
ALL_INTERFACES = frozenset({"0.0.0.0", "::"})
# Keys of a config file that run a program or expose the server: shown before they are used.
_SHOWN_KEYS = ("vllm_python", "host", "extra_args")
_announced: set[tuple[str, str]] = set()


def _names_host(arg: str) -> bool:
    """Whether vLLM's parser reads ``arg`` as its --host option: argparse takes any prefix of an
    option name (``--hos`` is --host there; ``--h`` is refused too, it is ambiguous today but need
    not stay so), ``--name=value`` forms, and vLLM's parser turns underscores into dashes."""
    name = str(arg).split("=", 1)[0].replace("_", "-")
    return len(name) > 2 and "--host".startswith(name)


def _reads_a_vllm_config(arg: str) -> bool:
    # vLLM's --config FILE.yaml turns every key of that file into a flag, host included
    return str(arg).split("=", 1)[0].replace("_", "-") == "--config"


def _note(message: str) -> None:
    print(f"harness: {message}", file=sys.stderr)


def _check_file_values(candidate: Path, section: str, values: dict[str, Any]) -> None:
    """Announce a config file found in the current directory (it may come with a cloned
    repository, not from the user) and what it sets that runs a program or opens the server;
    refuse a non-loopback host from a file: only the --host flag widens the server's reach."""
    from harness._text import clean

    where = str(candidate)
    host = values.get("host")
    extra = values.get("extra_args") or ()
    extra = extra if isinstance(extra, list | tuple) else ()
    if any(_reads_a_vllm_config(a) for a in extra):
        raise HarnessError(
            f"{where}: [{section}] extra_args passes vLLM a --config file, which may set its host; "
            "only the --host flag on the command line widens the server's reach. Remove it from the file"
        )
    if (host is not None and host not in LOOPBACK_HOSTS) or any(_names_host(a) for a in extra):
        raise HarnessError(
            f"{where}: [{section}] asks the server to listen beyond 127.0.0.1; only the --host flag on "
            "the command line does that. Remove it from the file, and pass --host if you mean it"
        )
    if (where, section) in _announced:
        return
    _announced.add((where, section))
    if not candidate.is_absolute() and candidate.parent == Path("."):
        _note(f"using [{section}] of ./{candidate.name} found in the current directory ({Path.cwd()})")
    for key in _SHOWN_KEYS:
        if key in values:
            _note(clean(f"{where} sets {section}.{key} = {values[key]!r}"))


GPU_MEMORY_UTILIZATION = 0.90  # vLLM's own default: the share of a GPU a server may take


class ServerOptions(BaseModel):
    """How a vLLM server is run, whatever it serves: every option of `harness serve` but the
    checkpoint and what `harness eval` sets per model (EvalConfig's ``server`` section)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_model: str | None = Field(
        None, description="Base model directory for a LoRA adapter whose recorded base cannot be found."
    )
    tool_call_parser: str | None = Field(
        None,
        description="vLLM tool-call parser (default: chosen from the checkpoint's family and chat template).",
    )
    chat_template: Path | None = Field(
        None,
        description="Jinja chat template file (default: the checkpoint's own, or the scaffold's ChatML+hermes template when it has no tools).",
    )
    max_model_len: int | None = Field(
        None, ge=16, description="Context length to serve (default: from the memory plan)."
    )
    gpu_memory_utilization: float = Field(
        GPU_MEMORY_UTILIZATION, gt=0.05, le=0.99, description="Fraction of GPU memory vLLM may take."
    )
    max_num_seqs: int | None = Field(
        None, ge=1, description="Concurrent sequences (default: from the memory plan)."
    )
    dtype: str | None = Field(
        None,
        description="Weights dtype passed to vLLM (default: the checkpoint's; on a CPU without 16-bit float "
        "instructions, float32).",
    )
    host: str = Field(
        LOOPBACK,
        description="Interface the server listens on: 127.0.0.1, or 0.0.0.0 / :: (every interface: other "
        "machines can reach it; the API key still guards /v1). Only this flag widens it, never a config file.",
    )
    vllm_python: Path | None = Field(
        None,
        description="Python of an existing environment that has vLLM (default: the one `harness server setup` made).",
    )
    enforce_eager: bool | None = Field(
        None,
        description="Skip CUDA graphs / torch.compile (default: on for CPU, where it cuts startup from ~2 min to ~30 s).",
    )
    cpu_kv_cache_gib: int = Field(
        2, ge=1, description="KV cache size in GiB on CPU servers (VLLM_CPU_KVCACHE_SPACE)."
    )
    extra_args: tuple[str, ...] = Field((), description="Further arguments passed to vLLM unchanged.")
    gpu_host: str | None = Field(
        None,
        description="Run vLLM on this host over SSH (anything `ssh HOST` accepts); model paths are paths there. "
        "It is reached through a tunnel on 127.0.0.1 and ended there when this harness stops renewing its lease.",
    )
    ssh_config: Path | None = Field(
        None, description="SSH config file for --gpu-host (default: the user's own)."
    )
    push: bool = Field(
        False,
        description="With --gpu-host: copy --model (a directory here) into the host's cache first "
        "(resumable, checked by SHA-256; a second push copies nothing).",
    )
    lease_grace: float = Field(
        30.0,
        ge=2,
        le=600,
        description="With --gpu-host: seconds the host keeps vLLM without hearing from this harness "
        "(killed, disconnected, suspended) before it ends it.",
    )
    metrics_interval: float = Field(
        2.0,
        ge=0,
        description="Scrape the server's /metrics every this many seconds into server_metrics.jsonl (0: off).",
    )

    @field_validator("dtype")
    @classmethod
    def _vllm_dtype(cls, value: str | None) -> str | None:
        if value is not None and value not in VLLM_DTYPES:
            raise ValueError(f"{value}: vLLM serves {', '.join(VLLM_DTYPES)}")
        return value

    @field_validator("host")
    @classmethod
    def _known_host(cls, value: str) -> str:
        if value not in LOOPBACK_HOSTS | ALL_INTERFACES:
            raise ValueError(f"{value}: give 127.0.0.1 (this machine only) or 0.0.0.0 / :: (every interface)")
        return value

    @field_validator("extra_args")
    @classmethod
    def _no_host_in_extra_args(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        # vLLM takes the last --host: one in extra_args would silently override the loopback bind
        if any(_names_host(a) for a in value):
            raise ValueError(
                "--host (or an abbreviation of it) is not passed through extra args; use the harness's own --host"
            )
        return value


class ServerConfig(ServerOptions):
    """Everything needed to bring up (or plan) a vLLM server for one checkpoint."""

    model: str = Field(
        description="Checkpoint directory (full model or LoRA adapter), or a bundled name such as smollm2-135m."
    )
    served_name: str | None = Field(
        None, description="Name the model is served under (default: the bundled name or the directory name)."
    )
    idle_timeout: float = Field(
        300.0,
        ge=0,
        description="Stop the server after this many seconds with no running or waiting request and no new tokens (0: never).",
    )
    startup_timeout: float = Field(
        900.0, gt=0, description="Give up when the server is not ready after this many seconds."
    )
    port: int | None = Field(None, ge=1, le=65535, description="Port on 127.0.0.1 (default: a free one).")


# ServerConfig fields that `harness eval` sets itself, per model and run.
PER_SERVER_FIELDS = frozenset(ServerConfig.model_fields) - frozenset(ServerOptions.model_fields)


def config_file_values(section: str) -> dict[str, Any]:
    """Keys of ``[section]`` from ./harness.toml, else $HARNESS_CONFIG, else ~/.config/harness/config.toml."""
    import os

    for candidate in (
        Path("harness.toml"),
        Path(os.environ["HARNESS_CONFIG"]) if os.environ.get("HARNESS_CONFIG") else None,
        Path.home() / ".config" / "harness" / "config.toml",
    ):
        if candidate is None or not candidate.is_file():
            continue
        try:
            data = tomllib.loads(candidate.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise HarnessError(f"{candidate}: not valid TOML ({exc}); fix or remove the file") from None
        values = data.get(section, {})
        if not isinstance(values, dict):
            raise HarnessError(f"{candidate}: [{section}] must be a table")
        if values:
            _check_file_values(candidate, section, values)
        return values
    return {}


def build_config(**flags: Any) -> ServerConfig:
    """Merge config-file keys with flags (flags win; None means 'not given') into a ServerConfig."""
    values = config_file_values("server")
    values.update({k: v for k, v in flags.items() if v is not None})
    try:
        return ServerConfig(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = ".".join(str(p) for p in err["loc"]) or "config"
        raise HarnessError(f"--{name.replace('_', '-')}: {err['msg']}") from None
