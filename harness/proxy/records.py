"""What the proxy writes for an episode: one JSON line per exchange, per turn and per loop.

Secrets are never written: request headers are not recorded at all (the Authorization header
carries a key), and body fields that name a key are dropped. A request's messages are recorded as
the ones added since the episode's previous request (``messages_from`` says how many of that
request's messages come first, unchanged), so an episode's file grows with its turns, not with
their square; ``read_records(path, full=True)`` puts the whole lists back.
"""

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from harness.monitor import LoopFinding, Turn, TurnFormat


class Exchange(BaseModel):
    """One request and its answer."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["exchange"] = "exchange"
    n: int = Field(description="The exchange's number in the episode, in arrival order (from 0).")
    at: float = Field(description="When the request arrived (Unix time).")
    path: str = Field(description="What was asked: chat/completions or models.")
    stream: bool = False
    request: dict[str, Any] | None = Field(None, description="The request body (messages: the new ones).")
    messages_from: int = Field(0, description="How many of the previous request's messages come first.")
    status: int = Field(description="The HTTP status the client got.")
    answered_by: Literal["upstream", "proxy"] = "upstream"
    response: dict[str, Any] | None = Field(
        None, description="The answer: the completion (reassembled from a stream) or an error body."
    )
    body: str | None = Field(None, description="The upstream's body as text when it is not JSON (cut).")
    error: str | None = Field(None, description="What went wrong on the way (the upstream, the client).")
    upstream_s: float = Field(0.0, description="Seconds from forwarding to the upstream's last byte.")
    took_s: float = Field(0.0, description="Seconds from the request's arrival to its answer's end.")
    turn: int | None = Field(None, description="The turn this answer became (None: not a turn).")
    dialect: Literal["openai", "anthropic"] = Field(
        "openai", description="What the agent spoke (anthropic: its Messages request, recorded translated)."
    )


class TurnRecord(BaseModel):
    """A turn, written once whole (its observation came with the next request, or the episode ended)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["turn"] = "turn"
    turn: Turn
    format: TurnFormat


class LoopRecord(BaseModel):
    """The loop the monitor found, written the moment it became certain."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["loop"] = "loop"
    finding: LoopFinding
    exchange: int = Field(description="The exchange whose request made the loop certain.")


Record = Annotated[Exchange | TurnRecord | LoopRecord, Field(discriminator="kind")]
_record = TypeAdapter(Record)


def read_records(path: Path, *, full: bool = False) -> list[Exchange | TurnRecord | LoopRecord]:
    """An episode's records in the order written; ``full``: each request's whole message list."""
    records = [_record.validate_json(line) for line in path.read_bytes().splitlines() if line.strip()]
    if not full:
        return records
    previous: list[Any] = []
    out: list[Exchange | TurnRecord | LoopRecord] = []
    for r in records:
        if isinstance(r, Exchange) and r.request is not None and isinstance(r.request.get("messages"), list):
            messages = previous[: r.messages_from] + r.request["messages"]
            previous = messages
            r = r.model_copy(update={"request": {**r.request, "messages": messages}})
        out.append(r)
    return out


def dumps(record: BaseModel) -> bytes:
    """One line of the file (JSON, no newline inside)."""
    from harness.results.masking import mask_bytes

    return mask_bytes(record.model_dump_json().encode()) + b"\n"
