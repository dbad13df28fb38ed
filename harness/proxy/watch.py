"""One episode as the proxy sees it: its exchanges recorded, its turns assembled, validated and fed
to the loop monitor, and, once a loop is certain, the answer that ends it.

The proxy's event loop calls ``request`` when a request arrives and ``response`` when its answer
is complete; the episode's runner reads ``turns``, ``formats``, ``loop`` and ``stopped`` from its
own thread, and calls ``finish`` when the episode is over. Every method takes the watch's lock.
Callbacks run on the proxy's thread (after the lock is released, so they may read the watch):
keep them short (set an Event), every episode's requests wait for them.

An episode's requests are expected one at a time (an agent's loop waits for each answer); when
two overlap, turns follow the order in which their answers complete.
"""

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from harness.monitor import (
    FormatCategory,
    FormatError,
    LoopDetector,
    LoopFinding,
    ToolSchemas,
    Turn,
    TurnFormat,
    validate_turn,
)
from harness.proxy.config import StopAnswer, WatchConfig
from harness.proxy.records import Exchange, LoopRecord, TurnRecord, dumps
from harness.proxy.turns import as_list, assistants, completion_turn, observation, schemas_for

log = logging.getLogger(__name__)

# Keys a request body may carry that name a secret (never recorded).
_SECRET_KEYS = frozenset({"api_key", "apikey", "authorization", "key", "token", "password", "secret"})


class _Pending:
    """A turn waiting for its observation (the episode's next request)."""

    __slots__ = ("assistants", "format", "malformed", "turn")

    def __init__(self, turn: Turn, format: TurnFormat, assistants: int, malformed: bool) -> None:
        self.turn = turn
        self.format = format
        self.assistants = assistants  # in the request it answered
        self.malformed = malformed


class EpisodeWatch:
    """The proxy's state for one episode (thread-safe)."""

    def __init__(
        self,
        key: str,
        config: WatchConfig | None = None,
        *,
        record: Path | None = None,
        on_turn: Callable[[Turn, TurnFormat], None] | None = None,
        on_loop: Callable[[LoopFinding], None] | None = None,
    ) -> None:
        self.key = key
        self.config = config or WatchConfig()
        self.stopped = threading.Event()  # set the moment a loop is certain (and stop_on_loop)
        self._on_turn = on_turn
        self._on_loop = on_loop
        self._lock = threading.Lock()
        self._detector = LoopDetector(self.config.loop)
        self._turns: list[Turn] = []
        self._formats: list[TurnFormat] = []
        self._pending: _Pending | None = None
        self._exchanges = 0
        self._previous: list[Any] = []  # the previous request's messages (recorded as a delta)
        self._tools: Any = None  # the last request's tools and what they validate as
        self._schemas: tuple[ToolSchemas, bool] | None = None
        self._finished = False
        self._due: list[tuple[Callable[..., None], tuple[Any, ...]]] = []  # callbacks to run unlocked
        self._file: IO[bytes] | None = None
        if record is not None:
            record.parent.mkdir(parents=True, exist_ok=True)
            self._file = record.open("ab")

    # ---- read by the runner ----------------------------------------------------------------------
    @property
    def turns(self) -> list[Turn]:
        """The whole turns so far (the last one joins at the next request or at ``finish``)."""
        with self._lock:
            return list(self._turns)

    @property
    def formats(self) -> list[TurnFormat]:
        """Each turn's format findings, in the order of ``turns``."""
        with self._lock:
            return list(self._formats)

    @property
    def loop(self) -> LoopFinding | None:
        with self._lock:
            return self._detector.finding

    @property
    def exchanges(self) -> int:
        with self._lock:
            return self._exchanges

    # ---- called by the proxy -------------------------------------------------------------------
    def count(self) -> int:
        """A request that is not a chat turn arrived (models): its number."""
        with self._lock:
            self._exchanges += 1
            return self._exchanges - 1

    def request(self, body: Any) -> tuple[int, StopAnswer | None]:
        """A chat request arrived: its number, and the answer to give instead of forwarding it
        (None: forward). Its messages complete the turn the previous answer began."""
        try:
            with self._lock:
                n = self._exchanges
                self._exchanges += 1
                if not self.config.watch or not isinstance(body, dict):
                    return n, None
                messages = as_list(body.get("messages"))
                pending, self._pending = self._pending, None
                if pending is not None:
                    # The answer's text came back as an assistant message: what follows it observed it.
                    # A request without it (a retry of the same prompt) observed nothing.
                    seen = assistants(messages) > pending.assistants
                    self._complete(pending, observation(messages) if seen else "", n)
                if self.stopped.is_set():
                    return n, self.config.stop_answer()
                return n, None
        finally:
            self._run_due()  # outside the lock: a callback may read the watch

    def response(self, n: int, body: Any, completion: Any, problem: str | None = None) -> int | None:
        """Request ``n`` (its body) was answered 200 with ``completion`` (parsed; None: the body
        was not JSON, ``problem`` says why): the turn it begins, or None (not watching)."""
        try:
            with self._lock:
                if not self.config.watch or not isinstance(body, dict) or self._finished:
                    return None
                if self._pending is not None:  # two requests overlapped: the older answer saw nothing
                    self._complete(self._pending, "", n)
                    self._pending = None
                index = len(self._turns)
                actions = self.config.actions
                if problem is None:
                    turn, problem = completion_turn(index, completion, actions)
                else:
                    turn = Turn(index=index)
                if problem is not None:
                    fmt = TurnFormat(
                        errors=(FormatError(category=FormatCategory.empty_response, detail=problem),)
                    )
                else:
                    schemas = self._schemas_for(body.get("tools"))
                    fmt = (
                        validate_turn(turn, schemas[0], expect_tool_call=schemas[1])
                        if schemas is not None
                        else TurnFormat()
                    )
                messages = as_list(body.get("messages"))
                self._pending = _Pending(turn, fmt, assistants(messages), problem is not None)
                return index
        finally:
            self._run_due()  # outside the lock: a callback may read the watch

    def record(self, exchange: Exchange) -> None:
        """Write an exchange (its request body's messages as the delta since the previous one)."""
        with self._lock:
            if self._file is None:
                return
            request = exchange.request
            if request is not None:
                request = {k: v for k, v in request.items() if k.lower() not in _SECRET_KEYS}
                messages = request.get("messages")
                if isinstance(messages, list):
                    kept = _common_prefix(self._previous, messages)
                    self._previous = messages
                    request["messages"] = messages[kept:]
                    exchange = exchange.model_copy(update={"request": request, "messages_from": kept})
                else:
                    exchange = exchange.model_copy(update={"request": request})
            self._write(exchange)

    def finish(self) -> list[Turn]:
        """The episode is over: its last turn is whole (nothing observed it); all turns."""
        try:
            with self._lock:
                if self._pending is not None:
                    self._complete(self._pending, "", self._exchanges)
                    self._pending = None
                self._finished = True
                if self._file is not None:
                    self._file.close()
                    self._file = None
                return list(self._turns)
        finally:
            self._run_due()  # outside the lock: a callback may read the watch

    # ---- inside the lock ---------------------------------------------------------------------------
    def _schemas_for(self, tools: Any) -> tuple[ToolSchemas, bool] | None:
        if self._schemas is None or tools != self._tools:  # a scaffold sends the same tools each time
            self._tools = tools
            self._schemas = schemas_for(tools, self.config.actions, self.config.aliases)
        return self._schemas

    def _complete(self, pending: _Pending, seen: str, n: int) -> None:
        turn = pending.turn
        if seen:
            # A text-action scaffold answers a response it could not run with its format-error
            # feedback: an error, as a tool-calling scaffold's rejected call is.
            refused = self.config.actions is not None and len(turn.tool_calls) != 1
            turn = turn.model_copy(update={"observation": seen, "observation_is_error": refused})
        self._turns.append(turn)
        self._formats.append(pending.format)
        self._write(TurnRecord(turn=turn, format=pending.format))
        if self._on_turn is not None:
            self._call(self._on_turn, turn, pending.format)
        if pending.malformed:
            return  # a body that is no completion says nothing of how the model behaves
        finding = self._detector.feed(turn)
        if finding is not None:
            self._write(LoopRecord(finding=finding, exchange=n))
            if self.config.stop_on_loop:
                self.stopped.set()
            if self._on_loop is not None:
                self._call(self._on_loop, finding)

    def _write(self, record: Exchange | TurnRecord | LoopRecord) -> None:
        if self._file is not None:
            self._file.write(dumps(record))
            self._file.flush()  # an episode killed mid-way keeps what it did

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        self._due.append((fn, args))

    def _run_due(self) -> None:
        with self._lock:
            due, self._due = self._due, []
        for fn, args in due:
            try:
                fn(*args)
            except Exception:  # a runner's callback must not take the proxy down
                log.exception("proxy: a callback of episode %s failed", self.key)


def _common_prefix(a: list[Any], b: list[Any]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # the usual case: the conversation grew
        return n
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
