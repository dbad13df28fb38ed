"""Which failures belong to the infrastructure, not to the model.

An episode that failed because the server died or answered 5xx, the connection dropped, the disk
filled up or the container vanished says nothing about the model: it is recorded as
``infra_error``, retried, and never scored. What the model caused (a 400 for a context overflow,
malformed output, max iterations, a loop, a sandbox limit its commands hit, a sandbox its commands
destroyed) stays an outcome. Which of the two a lost sandbox is, the runtime decides by cause
before it raises (ContainerSandbox.loss): ``SandboxLost`` (gone, stopped from outside, the tool
server failing on its own) is listed here; ``SandboxLimit`` and ``SandboxDestroyed`` (the agent
killed its own tools) are not.
"""

import errno
import time

from harness.seam import EpisodeOutcome

# Exception type names (anywhere in the cause chain) that mean the infrastructure failed. Names,
# not classes: litellm, openai, httpx and the SDK each wrap the same failure in their own type,
# and importing them all here would pull the SDK into every caller.
INFRA_ERROR_TYPES = frozenset(
    {
        "ServerCrashed",  # harness: the vLLM process or its engine died
        "SandboxLost",  # harness: the episode's container or its tool server went away
        "APIConnectionError",  # openai / litellm: refused, reset, DNS
        "APITimeoutError",
        "InternalServerError",  # 500
        "ServiceUnavailableError",  # 503
        "BadGatewayError",  # 502
        "LLMServiceUnavailableError",  # the SDK's name for the three above
        "LLMTimeoutError",
        "Timeout",  # litellm
        "RateLimitError",  # 429: the server is overloaded, not the model wrong
        "LLMRateLimitError",
        "ConnectError",  # httpx
        "ReadTimeout",
        "RemoteProtocolError",
        "ConnectionError",
        "ConnectionRefusedError",
        "ConnectionResetError",
        "BrokenPipeError",
    }
)
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
_DISK_FULL_TEXT = ("No space left on device", "Disk quota exceeded")


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or any(e is s for s in seen) or len(seen) > 20:
            continue
        seen.append(e)
        todo += [e.__cause__, e.__context__]
    return seen


def disk_full(exc: BaseException) -> bool:
    """An ENOSPC / EDQUOT anywhere in ``exc``'s chain (or in its text, when a library re-raised it
    as another type)."""
    return any(
        (isinstance(e, OSError) and e.errno in _DISK_FULL) or any(t in str(e) for t in _DISK_FULL_TEXT)
        for e in _chain(exc)
    )


def is_infra_fault(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is an infrastructure failure, not the model's."""
    return disk_full(exc) or any(type(e).__name__ in INFRA_ERROR_TYPES for e in _chain(exc))


def is_infra_error_name(error_type: str | None, message: str | None = None) -> bool:
    """The same judgement from a recorded type name and message (an SDK error event, no exception)."""
    text = message or ""
    return (error_type or "") in INFRA_ERROR_TYPES or any(t in text for t in _DISK_FULL_TEXT)


def failed_outcome(what: str, exc: BaseException, started: float) -> EpisodeOutcome:
    """An episode that never got to its agent (no sandbox, its tools never started, a full disk):
    status error, with the reason, infrastructure's or not by the rules above."""
    return EpisodeOutcome(
        status="error",
        turns=[],
        error=f"{what}: {exc}",
        error_type=type(exc).__name__,
        wall_s=time.monotonic() - started,
        infra=is_infra_fault(exc),
    )
