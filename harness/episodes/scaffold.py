"""Scaffold definitions as data (scaffolds/<name>/scaffold.toml + tools.schema.json).

The tool schema snapshot is what the validator in harness/monitor checks calls against, and what
`harness check` expects the chat template to render. It is exported from the installed SDK, and a
test fails when the SDK's schemas drift from the snapshot.
"""

import json
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import HarnessError
from harness.monitor.formats import ToolSchemas
from harness.paths import repo_root
from harness.proxy.config import ActionFormat

DEFAULT_SCAFFOLD = "openhands-codeact"


class Sampling(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float = Field(0.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    max_output_tokens: int = Field(1024, ge=1)


class Scaffold(BaseModel):
    """An agent scaffold: tools, tool-calling mode, iteration limit, sampling defaults."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    runner: str = Field(
        "openhands-sdk", description="The runner that drives it (a name of harness/registry.py's runners)."
    )
    tools: list[str]
    builtin_tools: list[str] = ["FinishTool", "ThinkTool"]
    native_tool_calling: bool = True
    parallel_tool_calls: bool = Field(
        False, description="A response may carry several tool calls, all run (not a format error)."
    )
    max_iterations: int = Field(30, ge=1)
    terminal_type: str = "subprocess"
    actions: ActionFormat | None = Field(
        None,
        description="A text-action scaffold's action format (its [actions] table); None: native tool "
        "calls. The model-call proxy parses and validates turns by it.",
    )
    sampling: Sampling = Sampling()
    directory: Path = Field(Path("."), exclude=True)

    @property
    def schema_path(self) -> Path:
        return self.directory / "tools.schema.json"

    def snapshot(self) -> dict[str, Any]:
        if not self.schema_path.is_file():
            raise HarnessError(f"{self.schema_path}: missing; run `harness scaffold export {self.name}`")
        data: dict[str, Any] = json.loads(self.schema_path.read_text())
        return data

    def tool_schemas(self) -> ToolSchemas:
        snap = self.snapshot()
        return ToolSchemas.from_openai_tools(snap["tools"], aliases=snap.get("aliases", {}))


def load_scaffold(name_or_path: str = DEFAULT_SCAFFOLD) -> Scaffold:
    path = Path(name_or_path)
    directory = path if path.is_dir() else repo_root() / "scaffolds" / name_or_path
    toml = directory / "scaffold.toml"
    if not toml.is_file():
        known = ", ".join(sorted(p.parent.name for p in (repo_root() / "scaffolds").glob("*/scaffold.toml")))
        raise HarnessError(f"--scaffold {name_or_path}: no scaffold.toml there (known scaffolds: {known})")
    try:
        return Scaffold(**tomllib.loads(toml.read_text()), directory=directory)
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise HarnessError(f"{toml}: {str(exc).splitlines()[0]}") from None
