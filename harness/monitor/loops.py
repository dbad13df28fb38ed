"""Loop detection on Turn records, online (turn by turn) and offline (a whole trajectory).

A turn's *action* is its tool calls with canonical arguments (thought text, `summary` and
`security_risk` left out), or, for a turn without a parsed call, its normalised text. Its *step*
is the action plus the normalised observation that followed (with the numbers a tool renumbers
on its own masked: element indices, a shell's `line N`, line counts). Comparing steps rather
than actions is what keeps legitimate repetition quiet: running the tests again after an edit
repeats the call but the edit changed what comes back; polling a long-running command repeats
the call but the output grows.

Three looser comparisons follow the rubric of what a loop is, each bounded so that an agent that
still gains information is not flagged:
- a response that runs nothing (no tool call, or only calls whose arguments do not parse) does
  nothing, whatever its wording: such responses answered with an error each time, or with the
  same feedback (the same nudge), are one failure repeated;
- inside a cycle, a step that differs only in the prose it sends (a reworded message) repeats
  its action, provided most steps of the block repeat exactly, results included;
- a relative move (go back, scroll, next page, undo) acknowledged by one line says nothing about
  where it led, so such steps never count as repeats of each other.
"""

import re
from collections import deque
from enum import StrEnum
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field, model_validator
from rapidfuzz.fuzz import ratio

from harness.monitor.normalize import (
    canonical_and_gist,
    exact_arguments,
    looks_failed,
    normalize_observation,
    normalize_text,
    refused,
    volatile_details,
    without_echo,
    without_thinking,
)
from harness.monitor.records import Turn


class LoopKind(StrEnum):
    repeat_call = "repeat_call"
    cycle = "cycle"
    repeat_output = "repeat_output"
    repeat_error = "repeat_error"
    degenerate_text = "degenerate_text"


class LoopFinding(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: LoopKind
    start_turn: int = Field(description="Index of the first turn of the repeated run.")
    period: int = Field(description="Turns per repeated unit (1 for repeats, p for a cycle).")
    repeats: int = Field(description="How many times the unit occurred (so far, online).")
    unit: str = Field(description="The repeated unit, shortened for display.")
    detected_at: int = Field(description="Turn index at which the loop became certain.")
    why: str | None = Field(
        None, description="What matched, in words: what repeated and what the comparison ignored."
    )
    scaffold_reason: str | None = Field(
        None,
        description="The scaffold's own stuck detector's words when it stopped the episode (its "
        "finding is then located from them), kept beside the monitor's finding when both saw it.",
    )


class LoopConfig(BaseModel):
    """Thresholds: how much repetition makes a loop certain."""

    model_config = ConfigDict(frozen=True)

    repeat_call: int = Field(4, ge=2, description="Identical steps (call + observation) in a row.")
    repeat_error: int = Field(
        3, ge=2, description="Identical failing steps, or responses that run nothing, in a row."
    )
    repeat_output: int = Field(3, ge=2, description="Near-identical text-only turns in a row.")
    max_period: int = Field(10, ge=2, description="Longest cycle period considered.")
    cycle_repeats: int = Field(3, ge=2, description="Repetitions of a short cycle's unit.")
    long_cycle: int = Field(
        5, ge=2, description="Period from which a block replayed `long_cycle_repeats` times is a loop."
    )
    long_cycle_repeats: int = Field(2, ge=2, description="Repetitions of a long cycle's unit.")
    similarity: float = Field(0.9, gt=0, le=1, description="Text similarity counted as 'the same' (0..1).")
    degenerate_min_span: int = Field(
        120, ge=10, description="Characters of self-repetition within one output."
    )
    degenerate_min_repeats: int = Field(
        5, ge=2, description="Repetitions of a line or substring within one output."
    )

    @model_validator(mode="after")
    def _sane(self) -> "LoopConfig":
        if self.cycle_repeats * 2 > 64 or self.max_period > 16 or self.long_cycle_repeats > 32:
            raise ValueError("max_period <= 16, cycle_repeats <= 32 and long_cycle_repeats <= 32")
        return self

    def repeats_for(self, period: int) -> int:
        """Repetitions of a block of ``period`` steps that make a cycle."""
        return self.long_cycle_repeats if period >= self.long_cycle else self.cycle_repeats


# Edit-distance similarity is quadratic-ish; beyond this size texts are compared by equality.
_SIMILARITY_MAX_CHARS = 8_000
# Degenerate text shows at the end of an output; a bounded tail keeps huge outputs cheap.
_DEGENERATE_SCAN_CHARS = 32_768


def similar(a: str, b: str, threshold: float) -> bool:
    """Same, or near-same by normalised edit similarity (0..1) for texts of reasonable size."""
    if a == b:
        return True
    if len(a) > _SIMILARITY_MAX_CHARS or len(b) > _SIMILARITY_MAX_CHARS:
        return False
    if min(len(a), len(b)) < threshold * max(len(a), len(b)):
        return False  # lengths alone rule it out
    return ratio(a, b, score_cutoff=threshold * 100) >= threshold * 100


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# A move relative to where the agent is (go back, scroll, next page, undo): the same call leads
# somewhere new each time. Named by the tool, or by its verb argument or command's first word.
_RELATIVE = re.compile(
    r"(?<![a-z])(?:go_?back|go_?forward|back|forward|scroll\w*|page_?(?:up|down)|next|prev(?:ious)?"
    r"|undo\w*|redo)(?![a-z])",
    re.I,
)


# An observation of one short line acknowledges a move ("Navigated back"); it does not show a state.
_ACKNOWLEDGEMENT = 200


@lru_cache(maxsize=4096)
def _relative(name: str, arguments: str) -> bool:
    if _RELATIVE.search(name):
        return True
    for key in ('"command":"', '"action":"'):  # in canonical (compact, sorted) JSON
        at = arguments.find(key)
        if at >= 0:
            head = arguments[at + len(key) : at + len(key) + 40].split('"', 1)[0].split(None, 1)
            if head and _RELATIVE.fullmatch(head[0]):
                return True
    return False


# An action that writes: an editor's write commands, an editing tool, or a shell line that appends
# to or rewrites a file (SWE-agent's edit/insert/append commands included).
_EDITOR_WRITE = re.compile(r'"command":"(?:insert|str_replace|create|append|write|edit)"')
_WRITE_TOOL = re.compile(r"(?:^|_)(?:edit|write|insert|append|patch|replace|create)(?:_|$)", re.I)
_SHELL_WRITE = re.compile(
    r'"command":"(?:(?:edit|insert|append)\b|(?:[^"\\]|\\.)*?(?:>>|\bsed -i|\btee -a|\bpatch\b))'
)


@lru_cache(maxsize=4096)
def _mutation(name: str, arguments: str) -> bool:
    if _WRITE_TOOL.search(name) or _EDITOR_WRITE.search(arguments):
        return True
    return _SHELL_WRITE.search(arguments) is not None


class _Step:
    """What the detector keeps of one turn.

    The observation is normalised only when the step is compared with another whose action is
    the same (``head``): most steps of a trajectory repeat nothing, and normalising every
    observation was most of the cost of `harness loops` on real-sized turns. Equal keys, results
    or gists imply equal heads, so the head is compared first and decides alone when it differs.
    """

    __slots__ = (
        "_failed",
        "_gist",
        "_key",
        "_observation",
        "_result",
        "_reworded",
        "_shell_error",
        "action",
        "arguments",
        "error",
        "gist_text",
        "head",
        "index",
        "moved",
        "mutation",
        "names",
        "ran",
        "raw_observation",
        "reasoning_only",
        "refused",
        "text",
        "text_only",
    )

    def __init__(self, turn: Turn) -> None:
        self.index = turn.index
        calls = turn.tool_calls
        self.text_only = not calls
        self.text = gist = ""
        # ran: some call's arguments parsed (a call that cannot be decoded runs nothing)
        if len(calls) == 1:  # the common case, without a generator
            name = calls[0].name
            args, args_gist = canonical_and_gist(calls[0].arguments)
            canon: tuple[tuple[str, str], ...] = ((name, args),)
            self.action = f"{name}({args})"
            self.ran = not args.startswith("raw:")
            if args_gist is not args and args_gist != args:
                gist = f"{name}({args_gist})"
        elif calls:
            both = [(c.name, *canonical_and_gist(c.arguments)) for c in calls]
            canon = tuple((n, a) for n, a, _ in both)
            self.action = " | ".join(f"{n}({a})" for n, a, _ in both)
            self.ran = any(not a.startswith("raw:") for _, a, _ in both)
            if any(g != a for _, a, g in both):
                gist = " | ".join(f"{n}({g})" for n, _, g in both)
        else:
            canon = ()
            self.text = normalize_text(turn.text)
            self.action = "text:" + self.text
            self.ran = False
        # one call's arguments: a terminal may echo its command at the start of the observation
        self.arguments = calls[0].arguments if len(calls) == 1 else ""
        obs = self.raw_observation = turn.observation
        self.error = turn.observation_is_error
        # The scaffold refused the response (its format-error feedback): whatever it called ran nothing.
        self.refused = bool(obs) and refused(obs)
        if self.refused:
            self.ran = False
        # Only reasoning, nothing said and nothing called (or an empty response).
        self.reasoning_only = not calls and not without_thinking(turn.text).strip()
        self._failed: bool | None = None
        # "Navigated back" says nothing of where it led: no evidence of a repeated result.
        self.moved = bool(
            canon
            and not self.error
            and len(obs) <= _ACKNOWLEDGEMENT
            and "\n" not in obs.strip()
            and all(_relative(n, a) for n, a in canon)
        )
        self.names = tuple(n for n, _ in canon)
        # An edit: doing the same one again changes nothing the agent needs to see (or keeps
        # growing the file), whatever comes back.
        self.mutation = bool(canon) and all(_mutation(n, a) for n, a in canon)
        if self.mutation:
            # An edit's numbers say where it writes (a line, an offset): edits of other lines are
            # other calls, however numbers are masked elsewhere (an edit/test alternation down a
            # file, the test's error moving with it, read as a cycle).
            self.action = " | ".join(f"{c.name}({exact_arguments(c.arguments)})" for c in calls)
        # An edit's text is what it does, prose or not: two edits that write different sentences are
        # different attempts (masking their prose made a thrash of doc edits look like a cycle).
        self.gist_text = "" if self.mutation else gist
        # A step that differs from another only in its prose: the same action with the same result
        # when repeated in a row; inside a cycle, the same action whatever came back (see _cycle).
        self.head = hash(self.gist_text or self.action)
        self._observation: str | None = None
        self._result: tuple[object, ...] | None = None
        self._key: int | None = None
        self._reworded: int | None = None
        self._gist: int | None = None
        self._shell_error: tuple[str, ...] | bool | None = False  # not yet read

    @property
    def observation(self) -> str:
        """The normalised observation (computed on first use)."""
        if self._observation is None:
            obs = (
                without_echo(self.raw_observation, self.arguments) if self.arguments else self.raw_observation
            )
            self._observation = normalize_observation(obs)
        return self._observation

    @property
    def result(self) -> tuple[object, ...]:
        if self._result is None:
            self._result = (
                (self.observation, "moved", self.index) if self.moved else (self.observation, self.error)
            )
        return self._result

    @property
    def key(self) -> int:
        """The action with its result."""
        if self._key is None:
            self._key = hash((self.action, *self.result))
        return self._key

    @property
    def reworded(self) -> int:
        """The action with prose masked, with its result."""
        if self._reworded is None:
            self._reworded = hash((self.gist_text, *self.result)) if self.gist_text else self.key
        return self._reworded

    @property
    def gist(self) -> int:
        """The action with prose masked, whatever came back; without prose, the key."""
        if self._gist is None:
            self._gist = hash(self.gist_text) if self.gist_text else self.key
        return self._gist

    def same_reworded(self, other: "_Step") -> bool:
        return self.head == other.head and self.reworded == other.reworded

    def same_gist(self, other: "_Step") -> bool:
        return self.head == other.head and self.gist == other.gist

    @property
    def shell_error(self) -> tuple[str, ...] | None:
        """The shell's own failure to run what it was given (``command not found``, a syntax
        error), by kind, when that is all the observation says; None otherwise. The words the
        shell names (the first word of a sentence run as a command) are left out: responses worded
        differently come back with one signature."""
        if self._shell_error is False:
            self._shell_error = None
            if self.ran and not self.mutation and self.raw_observation:
                self._shell_error = _shell_error_kinds(self.raw_observation)
        return self._shell_error  # type: ignore[return-value]

    @property
    def failed(self) -> bool:
        """The tool reported an error, or the result reads as a failure (checked once, when needed)."""
        if self._failed is None:
            self._failed = self.error or looks_failed(self.raw_observation)
        return self._failed


# A result worth comparing verbatim across different calls: long enough and of several lines to
# be a state, not an acknowledgement ("Done", "Task list updated ..."), not an edit's (edits differ by what they write), and no
# failure of any wording: different attempts that fail alike are thrashing (a stall), not a loop.
_ECHO_MIN_CHARS = 100
_ANY_FAILURE = re.compile(
    r"(?:error|exception)s?\b|traceback"
    r"|\b(?:fail(?:s|ed|ure)?|cannot|can't|unable|denied|invalid|not found|no such|refused)\b",
    re.I,
)


_SHELL_ERROR = re.compile(
    r"^\s*(?:\S*/)?(?:ba|da|z|k)?sh:.*?(?P<kind>command not found|: not found$|syntax error"
    r"|unexpected EOF|unexpected end of file)",
    re.M,
)
_FOOTER = re.compile(r"^\s*(?:\[.*\]|exit code:? ?\d+|.*[$#]\s*)$", re.I)  # a scaffold's note, a prompt
_SHELL_ERROR_MAX_LINES = 40
_SHELL_ERROR_MAX_CHARS = 4_000


def _shell_error_kinds(text: str) -> tuple[str, ...] | None:
    """The kinds of shell errors in ``text`` in order, when they are all it says (notes and
    prompts aside); None when it says anything else."""
    if len(text) > _SHELL_ERROR_MAX_CHARS:  # a long output says more than a shell's refusal
        return None
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or len(lines) > _SHELL_ERROR_MAX_LINES:
        return None
    kinds: list[str] = []
    for line in lines:
        if (m := _SHELL_ERROR.match(line)) is not None:
            kind = m.group("kind")
            kind = (
                "command not found"
                if "not found" in kind
                else "syntax error"
                if kind == "syntax error"
                else "unexpected end of input"
            )
            if kind not in kinds:
                kinds.append(kind)
        elif not _FOOTER.match(line) and not line.lstrip().startswith(("bash:", "sh:")):
            return None
    return tuple(kinds) or None


def _echoes(step: _Step) -> bool:
    return (
        step.ran
        and not step.text_only
        and not step.mutation
        and not step.moved
        and not step.error
        and len(step.raw_observation) >= _ECHO_MIN_CHARS
        and "\n" in step.raw_observation.strip()  # a listing or a page; one line is an acknowledgement
    )


def _quiet_result(text: str) -> bool:
    """No word of failure in the result (head and tail searched)."""
    if len(text) > 4096:
        text = text[:2048] + "\n" + text[-2048:]
    return _ANY_FAILURE.search(text) is None


_SEGMENT = re.compile(r"[^\n.!?]+[.!?]*")  # a sentence, or a line without one


def chanted_unit(text: str, min_span: int = 120, min_repeats: int = 5) -> tuple[str, int] | None:
    """(sentence, repeats): the longest run of one sentence or line repeated back to back anywhere
    in an output ("content chanting"), even one that then ends normally; None when there is none."""
    best: tuple[str, int] | None = None
    previous, run = "", 0
    for match in _SEGMENT.finditer(text):
        segment = match.group().strip()
        if len(segment) < 8:  # "OK." "Wait." rules and bullets: the tail check sees long runs of them
            previous, run = "", 0
            continue
        run = run + 1 if segment == previous else 1
        previous = segment
        if run >= min_repeats and run * len(segment) >= min_span and (best is None or run > best[1]):
            best = (segment, run)
    return best


def degenerate_unit(text: str, min_span: int = 120, min_repeats: int = 5) -> tuple[str, int] | None:
    """(unit, repeats) when one output repeats its own lines or a substring; None otherwise."""
    if len(text) < min_span:
        return None
    text = text[-_DEGENERATE_SCAN_CHARS:]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) >= min_repeats:
        counts: dict[str, int] = {}
        for ln in lines:
            if len(ln) >= 8:
                counts[ln] = counts.get(ln, 0) + 1
        if counts:
            line, n = max(counts.items(), key=lambda kv: kv[1])
            if n >= min_repeats and n * 2 >= len(lines) and n * len(line) >= min_span:
                return line, n
    # A tail that repeats a substring (the classic runaway generation, with or without newlines).
    tail = text.rstrip()
    last, max_period = len(tail) - 1, min(400, len(tail) // min_repeats)
    period = 0
    while period < max_period:
        if min_repeats >= 2:
            # A unit repeats only if the character one period before the last equals the last:
            # rfind jumps to the next such period (prose has a few) instead of trying all 400.
            pos = tail.rfind(tail[last], last - max_period, last - period)
            if pos < 0:
                break
            period = last - pos
        else:
            period += 1
        unit = tail[-period:]
        repeats, end = 1, len(tail) - period
        while end >= period and tail[end - period : end] == unit:
            repeats += 1
            end -= period
        span = repeats * period
        needed = min_span if period >= 4 else 2 * min_span  # short units: rules and separators are fine
        if repeats >= min_repeats and span >= needed and (period > 1 or not unit.isspace()):
            return unit, repeats
    return None


class LoopDetector:
    """Online loop detection: ``feed`` each turn; the first certain loop is returned (once).

    Cost per turn is bounded by the window (the longest cycle's steps), not the episode length.
    """

    def __init__(self, config: LoopConfig | None = None) -> None:
        self.config = cfg = config or LoopConfig()
        window = (
            max(
                *(p * cfg.repeats_for(p) for p in range(2, cfg.max_period + 1)),
                cfg.repeat_call,
                cfg.repeat_error,
                cfg.repeat_output,
            )
            + 1
        )
        # (period, repetitions, steps) for every cycle period, shortest first
        self._periods = [
            (p, cfg.repeats_for(p), p * cfg.repeats_for(p)) for p in range(2, cfg.max_period + 1)
        ]
        self._steps: deque[_Step] = deque(maxlen=window)
        # head -> how many steps in the window have it (a step's gist can repeat only if its head does)
        self._heads: dict[int, int] = {}
        self._run = 0  # identical consecutive steps (prose aside) ending at the last turn
        self._text_run = 0  # near-identical consecutive text-only turns
        self._silent_run = 0  # consecutive turns that ran nothing, answered alike
        self._cycle_run = 0  # consecutive turns equal (by gist) to the turn one period before
        self._write_run = 0  # the same edit (prose aside) in a row, whatever came back
        self._echo_run = 0  # one tool's calls with other arguments, the same result verbatim
        self._shell_error_run = 0  # calls worded differently, the same shell error each time
        self._counter = "_run"  # the name of the run above that the finding counts (repeat kinds)
        self.finding: LoopFinding | None = None

    def feed(self, turn: Turn) -> LoopFinding | None:
        """Add a turn; return a LoopFinding the moment a loop is certain (once), else None."""
        step = _Step(turn)
        self._advance(step)
        if self.finding is not None:
            self._extend()
            return None
        self.finding = self._check(turn, step)
        return self.finding

    def _advance(self, step: _Step) -> None:
        prev = self._steps[-1] if self._steps else None
        self._run = self._run + 1 if prev is not None and prev.same_reworded(step) else 1
        alike = (
            step.text_only
            and prev is not None
            and prev.text_only
            and similar(prev.text, step.text, self.config.similarity)
        )
        self._text_run = self._text_run + 1 if alike else (1 if step.text_only else 0)
        self._write_run = (
            self._write_run + 1
            if step.mutation and prev is not None and prev.mutation and prev.head == step.head
            else int(step.mutation)
        )
        echoes = _echoes(step)
        self._echo_run = (
            self._echo_run + 1
            if echoes
            and prev is not None
            and _echoes(prev)
            and prev.names == step.names
            and prev.head != step.head
            and prev.raw_observation == step.raw_observation
            and _quiet_result(step.raw_observation)
            else int(echoes)
        )
        sig = step.shell_error
        self._shell_error_run = (
            self._shell_error_run + 1
            if sig is not None and prev is not None and prev.shell_error == sig
            else int(sig is not None)
        )
        failing = step.error or step.refused
        if not step.ran and (failing or step.reasoning_only or step.observation):
            # an error (or a refusal) each time, whichever; only reasoning each time, whatever came
            # back; or the same feedback (a nudge) each time
            same = False
            if prev is not None and not prev.ran:
                before = prev.error or prev.refused
                same = (failing and before) or (
                    not failing
                    and not before
                    and (
                        (step.reasoning_only and prev.reasoning_only)
                        or (bool(step.observation) and prev.observation == step.observation)
                    )
                )
            self._silent_run = self._silent_run + 1 if same else 1
        else:
            self._silent_run = 0
        if self.finding is not None and self.finding.kind == LoopKind.cycle:
            p = self.finding.period
            back = self._steps[-p] if len(self._steps) >= p else None
            self._cycle_run = self._cycle_run + 1 if back is not None and back.same_gist(step) else -(10**9)
        steps, heads = self._steps, self._heads
        if len(steps) == steps.maxlen:  # the oldest step leaves the window
            old = steps[0].head
            heads[old] -= 1
            if not heads[old]:
                del heads[old]
        heads[step.head] = heads.get(step.head, 0) + 1
        steps.append(step)

    def _extend(self) -> None:
        """Count further repeats of the loop already found (offline reports its full extent)."""
        f = self.finding
        assert f is not None
        if f.kind == LoopKind.degenerate_text:
            return
        if f.kind == LoopKind.cycle:
            repeats = self.config.repeats_for(f.period) + max(self._cycle_run, 0) // f.period
        else:
            repeats = getattr(self, self._counter)
        if repeats > f.repeats and (f.kind != LoopKind.cycle or self._cycle_run > 0):
            self.finding = f.model_copy(update={"repeats": repeats})

    @property
    def loop_continues(self) -> bool:
        """Whether the last turn fed still belongs to the loop found."""
        f = self.finding
        if f is None:
            return False
        if f.kind == LoopKind.cycle:
            return self._cycle_run >= 0
        return f.kind != LoopKind.degenerate_text and getattr(self, self._counter) > 1

    def _check(self, turn: Turn, step: _Step) -> LoopFinding | None:
        cfg = self.config
        if turn.text and (
            deg := degenerate_unit(turn.text, cfg.degenerate_min_span, cfg.degenerate_min_repeats)
            or chanted_unit(
                turn.text[-_DEGENERATE_SCAN_CHARS:], cfg.degenerate_min_span, cfg.degenerate_min_repeats
            )
        ):
            unit, n = deg
            return LoopFinding(
                kind=LoopKind.degenerate_text,
                start_turn=turn.index,
                period=1,
                repeats=n,
                unit=_short(unit),
                detected_at=turn.index,
                why="one output repeats its own text",
            )
        if self._run >= cfg.repeat_error and step.failed:
            how = "the tool reported an error" if step.error else "the output reads as a failure"
            unit = f"{step.action} => {_short(turn.observation, 80)}"
            return self._repeat(
                LoopKind.repeat_error,
                "_run",
                unit,
                turn.index,
                f"the same failing call, the same result ({how})",
            )
        if self._shell_error_run >= cfg.repeat_error:
            unit = f"{' | '.join(step.names)}(...) => {_short(turn.observation, 100)}"
            return self._repeat(
                LoopKind.repeat_error,
                "_shell_error_run",
                unit,
                turn.index,
                "responses the shell cannot run (wording aside), each answered with the same shell "
                f"error ({', '.join(step.shell_error or ())})",
            )
        if not step.text_only and not step.error and self._run >= cfg.repeat_call:
            return self._repeat(
                LoopKind.repeat_call, "_run", step.action, turn.index, "the same call, the same result"
            )
        if step.mutation and self._write_run >= cfg.repeat_call:
            return self._repeat(
                LoopKind.repeat_call,
                "_write_run",
                step.action,
                turn.index,
                "the same edit again and again, whatever came back (an edit made again changes "
                "nothing, or keeps growing the file)",
            )
        if self._echo_run >= cfg.repeat_call:
            unit = f"{' | '.join(step.names)}(...) => {_short(turn.observation, 100)}"
            return self._repeat(
                LoopKind.repeat_call,
                "_echo_run",
                unit,
                turn.index,
                "calls whose arguments differ, each answered with the same result verbatim",
            )
        if step.text_only and not step.error and self._text_run >= cfg.repeat_output:
            return self._repeat(
                LoopKind.repeat_output,
                "_text_run",
                step.text or step.action,
                turn.index,
                f"near-identical responses without a tool call (similarity >= {cfg.similarity:g})",
            )
        if self._silent_run >= cfg.repeat_error:
            answer = (
                "an error"
                if step.error
                else "the scaffold's refusal to run them"
                if step.refused
                else "the same feedback"
            )
            if turn.tool_calls:
                ran = "refused calls" if step.refused else "unparseable arguments"
            elif step.reasoning_only and not (step.error or step.observation):
                ran, answer = "reasoning only", "nothing"
            else:
                ran = "no tool call"
            empty = "(reasoning only, no action)" if ran == "reasoning only" else "(an error without output)"
            unit = f"{ran} => {_short(turn.observation, 100) or empty}"
            return self._repeat(
                LoopKind.repeat_error,
                "_silent_run",
                unit,
                turn.index,
                f"responses that ran nothing (wording aside), each answered with {answer}",
            )
        return self._cycle(turn.index)

    def _cycle(self, at: int) -> LoopFinding | None:
        steps = self._steps
        n, last = len(steps), steps[-1]
        if self._heads[last.head] < 2:
            return None  # the last step's action is new in the window: nothing ending here repeats
        for period, repeats, need in self._periods:
            # enough steps (a longer period may need fewer), and the last one repeats: else no scan
            if n < need or steps[-1 - period].head != last.head:
                continue
            tail = list(steps)[-need:]
            # the actions of the whole block first, then their results: an observation is
            # normalised only when every action of the block repeats
            pairs = range(need - period)
            if not all(tail[i].head == tail[i + period].head for i in pairs):
                continue
            if not all(tail[i].gist == tail[i + period].gist for i in pairs):
                continue
            unit = tail[:period]
            # the smallest period only (a block of two pairs is the pair, found already or not a loop)
            if any(
                period % d == 0 and all(unit[i].same_gist(unit[i % d]) for i in range(period))
                for d in range(1, period)
            ):
                continue
            # positions that repeat exactly, results included; the rest differ only in their prose
            exact = [
                all(tail[j].key == tail[j + k * period].key for k in range(repeats)) for j in range(period)
            ]
            if 2 * sum(exact) <= period:
                continue
            self._cycle_run = 0
            why = f"a block of {period} steps replayed with the same results"
            if not all(exact):
                worded = ", ".join(str(j + 1) for j in range(period) if not exact[j])
                why += f" (step {worded} of the block differs only in the wording it sends)"
            why += self._hidden(tail)
            return LoopFinding(
                kind=LoopKind.cycle,
                start_turn=tail[0].index,
                period=period,
                repeats=repeats,
                unit=" -> ".join(_short(s.action, 60) for s in unit),
                detected_at=at,
                why=why,
            )
        return None

    @staticmethod
    def _hidden(steps: list[_Step]) -> str:
        """'; the results differ only in ...' when what repeated differs only in what normalisation masks."""
        groups: dict[int, list[str]] = {}
        for s in steps:
            groups.setdefault(s.key, []).append(s.raw_observation)
        details: list[str] = []
        for texts in groups.values():
            details += [d for d in volatile_details(texts) if d not in details]
        return f"; the results differ only in {', '.join(details)}" if details else ""

    def _repeat(self, kind: LoopKind, counter: str, unit: str, at: int, what: str) -> LoopFinding:
        repeats = getattr(self, counter)
        self._counter = counter
        run = list(self._steps)[-min(repeats, len(self._steps)) :]
        why = what
        if counter == "_run":
            why += " (reworded each time)" if len({s.key for s in run}) > 1 else ""
            why += self._hidden(run)
        return LoopFinding(
            kind=kind,
            start_turn=run[0].index,
            period=1,
            repeats=repeats,
            unit=_short(unit),
            detected_at=at,
            why=why,
        )


def detect_loops(turns: list[Turn], config: LoopConfig | None = None) -> LoopFinding | None:
    """Offline: the first loop in a trajectory, with its repeats counted to where it stops."""
    detector = LoopDetector(config)
    found = False
    for turn in turns:
        if detector.feed(turn) is not None:
            found = True
        elif found and not detector.loop_continues:
            break
    return detector.finding
