"""mini-swe-agent's scaffold as data: scaffolds/<name>/scaffold.toml (the fields every scaffold
has: sampling, iterations, the tool schema the format checks use) plus ``mini-swe-agent.toml`` and
the prompt templates beside it (action format, submit marker, command timeout, environment)."""

import re
import tomllib
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.episodes.scaffold import Scaffold, load_scaffold
from harness.errors import HarnessError

RUNNER_FILE = "mini-swe-agent.toml"
TEMPLATES = ("system", "instance", "observation", "format_error")


class Templates(BaseModel):
    """mini-swe-agent's four Jinja templates, as its config calls them."""

    model_config = ConfigDict(frozen=True)

    system: str
    instance: str
    observation: str
    format_error: str


class MiniSweAgentConfig(BaseModel):
    """``mini-swe-agent.toml``: how the agent acts and is answered."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(description="Which upstream file and version the templates come from.")
    actions: Literal["text", "toolcall"] = Field(
        description="text: one fenced block per response, parsed by action_regex; toolcall: `bash` tool calls."
    )
    action_regex: str = Field(
        r"```mswea_bash_command\s*\n(.*?)\n```",
        description="text actions: the block that holds the command (one group, matched with DOTALL).",
    )
    submit_marker: str = Field(
        "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
        description="A command whose output starts with this line, exiting 0, submits.",
    )
    max_consecutive_format_errors: int = Field(
        3, ge=0, description="Format errors in a row that end it (0: none)."
    )
    command_timeout_s: float = Field(60, gt=0, le=86400, description="Wall time of one command.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment of every command.")

    @model_validator(mode="after")
    def _regex(self) -> "MiniSweAgentConfig":
        try:
            groups = re.compile(self.action_regex).groups
        except re.error as exc:
            raise ValueError(f"action_regex: {exc}") from None
        if groups != 1:
            raise ValueError(f"action_regex: needs exactly one group (the command), has {groups}")
        return self

    @property
    def submit_command(self) -> str:
        return f"echo {self.submit_marker}"


class MiniSweAgentScaffold(BaseModel):
    """Everything the runner reads from a mini-swe-agent scaffold folder."""

    model_config = ConfigDict(frozen=True)

    scaffold: Scaffold
    config: MiniSweAgentConfig
    templates: Templates


@lru_cache(maxsize=16)
def load_mini_swe_agent(name_or_path: str) -> MiniSweAgentScaffold:
    """The scaffold ``name_or_path`` (a name under scaffolds/ or a directory) with its runner data;
    a folder that is not a mini-swe-agent scaffold is a HarnessError naming what is missing."""
    scaffold = load_scaffold(name_or_path)
    toml = scaffold.directory / RUNNER_FILE
    if not toml.is_file():
        raise HarnessError(
            f"--scaffold {name_or_path}: no {RUNNER_FILE} there: not a mini-swe-agent scaffold"
        )
    try:
        config = MiniSweAgentConfig(**tomllib.loads(toml.read_text()))
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise HarnessError(f"{toml}: {str(exc).splitlines()[0]}") from None
    missing = [f"{t}.jinja" for t in TEMPLATES if not (scaffold.directory / f"{t}.jinja").is_file()]
    if missing:
        raise HarnessError(f"{scaffold.directory}: missing {', '.join(missing)}")
    templates = Templates(**{t: (scaffold.directory / f"{t}.jinja").read_text() for t in TEMPLATES})
    if config.submit_command not in templates.instance + templates.system:
        raise HarnessError(
            f"{scaffold.directory}: the prompts never tell the model to submit with `{config.submit_command}`"
        )
    return MiniSweAgentScaffold(scaffold=scaffold, config=config, templates=templates)
