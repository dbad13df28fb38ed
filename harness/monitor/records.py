"""The Turn record: what the monitor sees of one model turn, independent of any agent framework."""

from pydantic import BaseModel, ConfigDict, Field


class ToolCall(BaseModel):
    """One tool call as the model produced it (arguments kept as the raw string)."""

    model_config = ConfigDict(frozen=True)

    name: str
    arguments: str = Field("", description="Raw arguments string, exactly as returned by the server.")
    id: str | None = None


class Turn(BaseModel):
    """One model turn and what followed it (DESIGN.md data contract)."""

    model_config = ConfigDict(frozen=True)

    index: int
    text: str = Field("", description="Assistant text (content) of the turn.")
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    observation: str = Field("", description="Tool output or error text that followed the turn.")
    observation_is_error: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
