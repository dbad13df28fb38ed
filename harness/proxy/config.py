"""What the model-call proxy is told: per episode (how to read its turns, what to answer once a
loop is certain) and for the whole proxy (upstream timeouts, connection pool, shutdown)."""

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness.monitor import LoopConfig

# mini-swe-agent's text-action mode (LitellmTextbasedModelConfig.action_regex, 2.4.6) and the
# command its environments read as "submit" (the first output line, exit code 0).
MSWEA_ACTION_REGEX = r"```mswea_bash_command\s*\n(.*?)\n```"
MSWEA_SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


class ActionFormat(BaseModel):
    """A text-action scaffold's action format: the model answers in prose with its command in a
    fenced block, exactly one per response; no native tool calls are involved.

    The parsed command becomes the turn's ``ToolCall(name=tool, arguments={argument: command})``
    so the loop detector compares actions as it does for tool-calling scaffolds, and the turn is
    validated against that one tool: 0 blocks is ``no_tool_call`` (``empty_response`` when the text
    is empty), 2 or more ``multiple_tool_calls``.
    """

    model_config = ConfigDict(frozen=True)

    regex: str = Field(MSWEA_ACTION_REGEX, description="An action's pattern; group 1 is the command.")
    tool: str = Field("bash", description="The tool name an action is recorded as.")
    argument: str = Field("command", description="The argument the command is recorded under.")
    fence: str = Field(
        "```mswea_bash_command\n{command}\n```",
        description="How an action is written (the proxy's final answer uses it for `submit`).",
    )
    submit: str = Field(MSWEA_SUBMIT, description="The command that ends an episode (submits).")

    @field_validator("regex")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            if re.compile(v, re.DOTALL).groups < 1:
                raise ValueError("the action regex needs a group for the command")
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return v

    def write(self, command: str) -> str:
        """``command`` as the scaffold expects an action."""
        return self.fence.replace("{command}", command)

    def tool_schema(self) -> dict[str, Any]:
        """The JSON Schema of the one tool an action is recorded as."""
        return {
            "type": "object",
            "properties": {self.argument: {"type": "string"}},
            "required": [self.argument],
        }


class StopAnswer(BaseModel):
    """What the proxy answers an episode's requests once its loop is certain (never a hang).

    ``error``: HTTP ``status`` (default 400: a client error, never retried by the openai client
    and never classified as an infrastructure failure) with ``message`` in an OpenAI error body.
    ``message``: a final assistant message (200) with ``content`` and, when ``tool`` is set, one
    tool call ``tool(arguments)``; streamed as server-sent events when the request streams.
    """

    model_config = ConfigDict(frozen=True)

    mode: Literal["error", "message"] = "error"
    status: int = Field(400, ge=400, le=499, description="HTTP status of an `error` answer (4xx).")
    message: str = Field(
        "The harness stopped this episode: the model is in a loop.", description="An `error` answer's text."
    )
    content: str = Field("", description="A `message` answer's assistant text.")
    tool: str | None = Field(None, description="A `message` answer's tool call name (None: no call).")
    arguments: dict[str, Any] = Field(default_factory=dict, description="That tool call's arguments.")


def submit_answer(actions: ActionFormat) -> StopAnswer:
    """The final answer for a text-action scaffold: a message whose one action is its submit
    command, so the scaffold ends the episode the way it ends a finished one."""
    return StopAnswer(
        mode="message",
        content="The harness stopped this episode: the model is in a loop.\n\n"
        + actions.write(actions.submit),
    )


class WatchConfig(BaseModel):
    """How the proxy watches one episode."""

    model_config = ConfigDict(frozen=True)

    watch: bool = Field(
        True,
        description="Assemble turns and run the loop monitor and validation; False: record the "
        "exchanges only (a scaffold that reports its own turns, e.g. OpenHands from SDK events).",
    )
    loop: LoopConfig = Field(default_factory=LoopConfig, description="The loop detector's thresholds.")
    stop_on_loop: bool = Field(
        True, description="Answer further requests with `answer` once a loop is certain."
    )
    actions: ActionFormat | None = Field(
        None,
        description="A text-action scaffold's action format; None: native tool calls, validated "
        "against the `tools` each request declares.",
    )
    aliases: dict[str, str] = Field(
        default_factory=dict, description="Tool names the scaffold repairs (alias -> tool)."
    )
    answer: StopAnswer | None = Field(
        None,
        description="The answer once stopped; None: the submit action for a text-action scaffold, "
        "else a 400 error naming the loop.",
    )

    def stop_answer(self) -> StopAnswer:
        if self.answer is not None:
            return self.answer
        return submit_answer(self.actions) if self.actions is not None else StopAnswer()


class ProxyConfig(BaseModel):
    """The proxy as a whole."""

    model_config = ConfigDict(frozen=True)

    connect_timeout_s: float = Field(10.0, gt=0, description="Connecting to the upstream: then 502.")
    read_timeout_s: float = Field(
        600.0,
        gt=0,
        description="Waiting for the upstream's next bytes (the agent's own model timeout is 600 s): "
        "then 504, or mid-stream the client's connection is cut as the upstream's was.",
    )
    max_connections: int = Field(1024, ge=1, description="Upstream connections at most (pooled).")
    shutdown_grace_s: float = Field(2.0, ge=0, description="Stopping waits this long for requests in flight.")
    model: str | None = Field(
        None,
        description="The model name sent upstream in place of the one each request names (agents "
        "hard-code theirs); None: as the request names it.",
    )
    record_body_chars: int = Field(
        65_536, ge=0, description="A malformed upstream body is recorded up to this many characters."
    )
    max_body_bytes: int = Field(
        32 << 20,
        ge=1024,
        description="A request body past this many bytes is answered 413 unread (and not recorded): "
        "a long agent conversation is a few MiB; this bounds the memory and the record one request takes.",
    )
    body_timeout_s: float = Field(
        60.0, gt=0, description="A request's body must arrive within this many seconds: then 408."
    )
    header_timeout_s: float = Field(
        30.0,
        gt=0,
        description="A connection that has not sent a whole request's headers this many seconds after it "
        "opened (or after its last answer) is closed: unfinished connections never pile up.",
    )
