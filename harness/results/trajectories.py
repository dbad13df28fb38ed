"""Read trajectories from disk as Turn records, whatever wrote them.

Sources:
- a harness run directory (episodes.jsonl whose records name a trajectory file of Turn lines);
- an OpenHands SDK conversation directory (events/*.json), or a folder holding several;
- an OpenHands evaluation output.jsonl (one instance per line with a ``history`` list), in the
  0.x shape (``action``/``observation`` events, flat or paired) or the SDK shape (``kind`` events);
- mini-swe-agent trajectories (``*.traj.json``: ``messages`` in the chat format, v1 text with a
  fenced bash block per response or v2 tool calls), or a folder of them (a batch run's output);
- SWE-agent trajectories (``*.traj``: a ``trajectory`` list of thought/action/observation steps,
  or, where that is missing or empty, the ``history`` of chat messages), or a folder of them;
- ATIF trajectories (Harbor's format: ``schema_version`` ATIF-v1.x and ``steps``; any ``.json``
  file, or a folder of ``*.atif.json`` / Harbor's ``trajectory.json``).
Bad lines become counted warnings naming the line, and so does an episode that yields no turn
(naming what was expected); unreadable or unknown input, or input with not one turn in it, is a
HarnessError.
"""

import json
import os
import re
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from harness.episodes.openhands.turns_from_events import SdkTurnAssembler, text_of, turns_from_v0_history
from harness.errors import HarnessError
from harness.monitor.records import ToolCall, Turn
from harness.results._gc import gc_paused
from harness.results.atif import atif_episode_name, is_atif, turns_from_atif
from harness.results.run_files import (
    MAX_LINE_BYTES,
    RunFileError,
    inside_run,
    open_run_file,
    read_run_file,
    run_lines,
)


class Trajectory(BaseModel):
    model_config = ConfigDict(frozen=True)

    episode: str
    source: str
    turns: list[Turn]
    error: str | None = None


class ReadResult(BaseModel):
    trajectories: list[Trajectory] = []
    warnings: list[str] = []
    skipped_lines: int = 0
    format: str = ""


def _check_text_file(path: Path) -> None:
    try:
        with open_run_file(path) as fh:  # RunFileError: a device, a pipe, a huge file
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(8192)
    except OSError as exc:
        raise HarnessError(f"{path}: cannot read ({exc.strerror})") from None
    if size == 0 or not head.strip():
        raise HarnessError(f"{path}: empty file; nothing to analyse")
    if b"\x00" in head:
        raise HarnessError(f"{path}: binary data, not JSON lines")
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # a cut multi-byte character at the end of the sample is fine
            raise HarnessError(f"{path}: not UTF-8 text (byte {exc.start}); expected JSON lines") from None


def _json_lines(path: Path, result: ReadResult) -> Iterator[tuple[int, dict[str, Any]]]:
    _check_text_file(path)
    # orjson decodes bytes directly: no text layer on hundreds of MB. run_lines' 1 MiB buffer reads
    # a line of a whole episode (100 KB and more) in one piece: with the default 8 KiB, splitting
    # 230 MB of such lines took 0.19 s of CPU, nearly as long as orjson took to decode them.
    for number, line in run_lines(path):
        if line is None:
            result.skipped_lines += 1
            result.warnings.append(f"{path}:{number}: longer than {MAX_LINE_BYTES >> 20} MiB; line skipped")
            continue
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            result.skipped_lines += 1
            # An error at the very end of the line means the line was cut short.
            what = "truncated JSON" if exc.pos >= len(line.rstrip()) - 1 else "invalid JSON"
            result.warnings.append(f"{path}:{number}: {what} ({exc.msg}); line skipped")
            continue
        if not isinstance(value, dict):
            result.skipped_lines += 1
            result.warnings.append(
                f"{path}:{number}: a JSON {type(value).__name__}, not an object; line skipped"
            )
            continue
        yield number, value


def _sdk_turns(events: list[dict[str, Any]], usage: dict[str, dict[str, int]] | None = None) -> list[Turn]:
    asm = SdkTurnAssembler()
    turns: list[Turn] = []
    for ev in events:
        turns += asm.feed(ev)
    turns += asm.finish()
    if usage:
        turns = [
            t.model_copy(update=usage[rid]) if (rid := asm.response_ids.get(t.index)) in usage else t
            for t in turns
        ]
    return turns


def _history_turns(history: list[Any]) -> list[Turn]:
    first = next((h for h in history if isinstance(h, dict)), None)
    if first is not None and "kind" in first:
        return _sdk_turns([h for h in history if isinstance(h, dict)])
    return turns_from_v0_history(history)


class _RunIndexInstead(Exception):
    """An output.jsonl line is a harness episodes.jsonl record: the run directory is read instead."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__(run_dir)
        self.run_dir = run_dir


def _output_jsonl(path: Path, result: ReadResult) -> Iterator[Trajectory]:
    for number, line in _json_lines(path, result):
        if "history" not in line:
            if "task_id" in line and "trajectory" in line:
                raise _RunIndexInstead(path.parent)
            raise HarnessError(
                f"{path}:{number}: unknown format: expected OpenHands evaluation lines with `history`, "
                "a harness episodes.jsonl, or an SDK conversation directory"
            )
        episode = str(line.get("instance_id") or f"line-{number}")
        history = line.get("history") or []
        if not isinstance(history, list):
            result.warnings.append(f"{path}:{number}: `history` is not a list; line skipped")
            result.skipped_lines += 1
            continue
        try:
            turns = _history_turns(history)
        except (ValidationError, TypeError, ValueError, AttributeError) as exc:
            result.warnings.append(
                f"{path}:{number}: unreadable history ({str(exc).splitlines()[0]}); line skipped"
            )
            result.skipped_lines += 1
            continue
        if not turns:
            result.warnings.append(f"{path}:{number}: no turn read: expected {_EXPECTED['openhands-output']}")
        error = line.get("error")
        yield Trajectory(
            episode=episode, source=f"{path}:{number}", turns=turns, error=str(error) if error else None
        )


def _usage_from_state(conv_dir: Path) -> dict[str, dict[str, int]]:
    """response_id -> token counts from base_state.json (the SDK keeps usage there, not in events)."""
    try:
        state = json.loads(read_run_file(conv_dir / "base_state.json"))
    except (OSError, ValueError, RecursionError, HarnessError):  # ValueError: JSON, UTF-8
        return {}
    usage: dict[str, dict[str, int]] = {}
    for metrics in ((state.get("stats") or {}).get("usage_to_metrics") or {}).values():
        for u in (metrics or {}).get("token_usages") or []:
            if u.get("response_id"):
                usage[u["response_id"]] = {
                    "prompt_tokens": int(u.get("prompt_tokens") or 0),
                    "completion_tokens": int(u.get("completion_tokens") or 0),
                }
    return usage


def _conversation_dirs(conv_dirs: list[Path], result: ReadResult) -> Iterator[Trajectory]:
    for conv_dir in conv_dirs:
        events: list[dict[str, Any]] = []
        for f in sorted((conv_dir / "events").glob("*.json")):
            try:
                data = json.loads(read_run_file(f))
            except (OSError, ValueError, RecursionError, HarnessError) as exc:  # ValueError: JSON, UTF-8
                result.skipped_lines += 1
                result.warnings.append(f"{f}: unreadable event ({exc}); skipped")
                continue
            if isinstance(data, dict):
                events.append(data)
        turns = _sdk_turns(events, _usage_from_state(conv_dir))
        if not turns:
            result.warnings.append(
                f"{conv_dir}: no turn read: expected the agent's action events in events/*.json "
                f"({len(events)} event(s) there)"
            )
        yield Trajectory(episode=conv_dir.name, source=str(conv_dir), turns=turns)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _bash(command: str) -> ToolCall:
    return ToolCall(name="bash", arguments=json.dumps({"command": command}))


# mini-swe-agent v1's default action regex; a run's own is in info.config.agent.action_regex.
_MINI_ACTION = r"```bash\s*\n(.*?)\n```"
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")


def _text_actions(doc: dict[str, Any]) -> bool:
    """Whether a v2 trajectory's model read text actions (its tool calls, if any, ran nothing): the
    harness writes ``actions``; mini-swe-agent's own text-based models have an ``action_regex``."""
    config = _dict(_dict(doc.get("info")).get("config"))
    model = _dict(config.get("model"))
    if model.get("actions") in ("text", "toolcall"):
        return bool(model["actions"] == "text")
    return "action_regex" in model or "textbased" in str(config.get("model_type") or "").lower()


def _mini_calls(
    message: dict[str, Any], text: str, action: re.Pattern[str], *, text_actions: bool = False
) -> list[ToolCall]:
    """The calls of one assistant message: tool calls (v2), parsed actions (v2 text), or the fenced block (v1)."""
    calls = []
    for call in [] if text_actions else message.get("tool_calls") or []:
        fn = _dict(_dict(call).get("function"))
        args = fn.get("arguments")
        calls.append(
            ToolCall(
                name=str(fn.get("name") or ""),
                arguments=args if isinstance(args, str) else json.dumps(args or {}),
                id=_dict(call).get("id"),
            )
        )
    if calls:
        return calls
    extra = _dict(message.get("extra"))
    if actions := extra.get("actions"):
        return [_bash(str(a.get("command") or "")) for a in actions if isinstance(a, dict)]
    found = action.findall(text)
    # v1 runs exactly one fenced command; zero or several is a format error and runs nothing
    return [_bash(found[0].strip())] if len(found) == 1 else []


def _mini_swe_agent_turns(doc: dict[str, Any]) -> list[Turn]:
    """mini-swe-agent ``messages``: each assistant message is a turn, what follows is its observation.

    A turn is failed when mini-swe-agent says so (a non-zero return code, an interrupt such as a
    format error or a timeout) or when a v1 response held no runnable command (its reply is the
    format error).
    """
    agent = _dict(_dict(_dict(doc.get("info")).get("config")).get("agent"))
    try:
        action = re.compile(str(agent.get("action_regex") or _MINI_ACTION), re.DOTALL)
    except re.error:
        action = re.compile(_MINI_ACTION, re.DOTALL)
    text_actions = _text_actions(doc)
    turns: list[dict[str, Any]] = []
    for m in doc.get("messages") or []:
        if not isinstance(m, dict):
            continue
        role, text = m.get("role"), text_of(m.get("content"))
        extra = _dict(m.get("extra"))
        if role == "assistant":
            response = _dict(extra.get("response"))
            usage = _dict(response.get("usage"))
            choice = _dict((response.get("choices") or [{}])[0])
            calls = _mini_calls(m, text, action, text_actions=text_actions)
            turns.append(
                {
                    "index": len(turns),
                    "text": text,
                    "tool_calls": calls,
                    "finish_reason": choice.get("finish_reason") or ("tool_calls" if calls else "stop"),
                    "observation": "",
                    "observation_is_error": False,
                    "prompt_tokens": usage.get("prompt_tokens"),
                    "completion_tokens": usage.get("completion_tokens"),
                }
            )
        elif role in ("user", "tool") and turns:
            turn = turns[-1]
            code = extra.get("returncode")
            if code is None and (found := _RETURNCODE.search(text[:200])):
                code = int(found.group(1))
            failed = (
                bool(extra.get("interrupt_type") or extra.get("exception_info"))
                or code not in (None, 0)
                or not turn["tool_calls"]
            )
            turn["observation"] = f"{turn['observation']}\n{text}" if turn["observation"] else text
            turn["observation_is_error"] = turn["observation_is_error"] or failed
    return [Turn.model_validate(t) for t in turns]


def _swe_agent_turns(doc: dict[str, Any]) -> list[Turn]:
    """SWE-agent ``trajectory`` steps (thought, action, observation).

    A step without an action ran nothing: SWE-agent records the responses it could not parse (or
    refused) before asking again, so such a step is a failed one.
    """
    turns: list[Turn] = []
    for step in doc.get("trajectory") or []:
        if not isinstance(step, dict):
            continue
        action = str(step.get("action") or "").strip()
        turns.append(
            Turn(
                index=len(turns),
                text=str(step.get("thought") or step.get("response") or ""),
                tool_calls=(_bash(action),) if action else (),
                finish_reason="tool_calls" if action else "stop",
                observation=str(step.get("observation") or ""),
                observation_is_error=not action,
            )
        )
    return turns


def _chat_history_turns(history: list[Any]) -> list[Turn]:
    """A SWE-agent ``history`` (chat messages: ``role``, ``content``, and on an assistant message
    its parsed ``action`` or native ``tool_calls``): each assistant message is a turn, the user or
    tool messages after it its observation. Demonstrations (``is_demo``) are not the agent's.
    A response without an action ran nothing (SWE-agent answers it with its format error)."""
    turns: list[dict[str, Any]] = []
    for m in history:
        if not isinstance(m, dict) or m.get("is_demo"):
            continue
        role, text = m.get("role"), text_of(m.get("content"))
        if role == "assistant":
            calls = _mini_calls(m, text, re.compile(r"(?!x)x"))  # native tool calls, if any
            if not calls and (action := str(m.get("action") or "").strip()):
                calls = [_bash(action)]
            turns.append(
                {
                    "index": len(turns),
                    "text": str(m.get("thought") or text),
                    "tool_calls": calls,
                    "finish_reason": "tool_calls" if calls else "stop",
                    "observation": "",
                    "observation_is_error": not calls,
                }
            )
        elif role in ("user", "tool") and turns:
            turn = turns[-1]
            turn["observation"] = f"{turn['observation']}\n{text}" if turn["observation"] else text
    return [Turn.model_validate(t) for t in turns]


def _chat_messages(history: list[Any]) -> bool:
    first = next((h for h in history if isinstance(h, dict)), None)
    return first is not None and "role" in first and "kind" not in first and "action" not in first


# What each document format holds turns in, for a document that yields none.
_EXPECTED = {
    "mini-swe-agent": "assistant messages in `messages`",
    "swe-agent": "steps in `trajectory` or assistant messages in `history`",
    "openhands-output": "agent actions in `history` (OpenHands 0.x action/observation events or SDK events)",
    "atif": "agent steps in `steps`",
}


def _document_turns(doc: Any) -> tuple[str, list[Turn]] | None:
    """(format, turns) of one JSON trajectory document, or None when it is none of the known ones."""
    if not isinstance(doc, dict):
        return None
    if is_atif(doc):  # Harbor's trajectories (and harness export-atif's)
        return "atif", turns_from_atif(doc)
    if isinstance(doc.get("messages"), list):
        return "mini-swe-agent", _mini_swe_agent_turns(doc)
    trajectory, history = doc.get("trajectory"), doc.get("history")
    if isinstance(trajectory, list) and (trajectory or not isinstance(history, list) or not history):
        return "swe-agent", _swe_agent_turns(doc)
    if isinstance(history, list) and _chat_messages(history):  # SWE-agent's messages (no steps kept)
        return "swe-agent", _chat_history_turns(history)
    if isinstance(history, list):  # one OpenHands evaluation instance, pretty-printed
        return "openhands-output", _history_turns(history)
    return None


def _episode_name(path: Path, doc: dict[str, Any]) -> str:
    name = path.name.removesuffix(".json").removesuffix(".traj")
    return str(doc.get("instance_id") or name)


def _json_documents(paths: list[Path], result: ReadResult) -> Iterator[Trajectory]:
    """One episode per JSON document; the format reported is what the documents turned out to be."""
    formats: list[str] = []
    for path in paths:
        try:
            _check_text_file(path)
            doc = orjson.loads(read_run_file(path))
            read = _document_turns(doc)
        except HarnessError as exc:
            result.skipped_lines += 1
            result.warnings.append(f"{exc}; skipped")
            continue
        except (OSError, orjson.JSONDecodeError) as exc:
            result.skipped_lines += 1
            result.warnings.append(f"{path}: not one JSON document ({str(exc).splitlines()[0]}); skipped")
            continue
        except (ValidationError, TypeError, ValueError, AttributeError) as exc:
            result.skipped_lines += 1
            result.warnings.append(f"{path}: unreadable trajectory ({str(exc).splitlines()[0]}); skipped")
            continue
        if read is None:
            result.skipped_lines += 1
            result.warnings.append(
                f"{path}: unknown format: expected mini-swe-agent `messages`, SWE-agent `trajectory` or "
                "ATIF `schema_version` and `steps`; skipped"
            )
            continue
        fmt, turns = read
        if not turns:
            result.warnings.append(f"{path}: no turn read: expected {_EXPECTED[fmt]}")
        if fmt not in formats:
            formats.append(fmt)
            result.format = "+".join(formats)
        info, error = _dict(doc.get("info")), doc.get("error")
        if exception := info.get("exception_str"):  # mini-swe-agent: the run ended on an exception
            error = f"{info.get('exit_status') or 'error'}: {exception}"
        yield Trajectory(
            episode=atif_episode_name(path, doc) if fmt == "atif" else _episode_name(path, doc),
            source=str(path),
            turns=turns,
            error=str(error) if error else None,
        )


_TURNS = TypeAdapter(list[Turn])


def _read_turns(path: Path, into: list[Turn]) -> list[str]:
    """Append a trajectory file's Turn lines to ``into``; return one warning per bad line.

    pydantic parses and validates each line in one step (in Rust): this is the hot path of
    `harness loops` on a run directory.
    """
    warnings: list[str] = []
    try:
        data = read_run_file(path)
    except RunFileError as exc:
        return [str(exc)]
    except OSError as exc:
        return [f"{path}: cannot read ({exc.strerror})"]
    lines = data.split(b"\n")
    try:  # the common case, a clean file, in a single call
        into.extend(_TURNS.validate_json(b"[" + b",".join(ln for ln in lines if ln.strip()) + b"]"))
        return warnings
    except ValidationError:
        pass  # find and name the bad lines below
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            into.append(Turn.model_validate_json(line))
        except ValidationError as exc:
            first = exc.errors()[0]
            what = (
                "truncated or invalid JSON"
                if first["type"] == "json_invalid"
                else f"not a Turn ({first['msg']})"
            )
            warnings.append(f"{path}:{number}: {what}; line skipped")
    return warnings


def _run_dir(run_dir: Path, result: ReadResult) -> Iterator[Trajectory]:
    """The last record per (model, task, seed): verification appends a second line for the same
    episode, which must not count it twice. A first pass keeps only line numbers (not records)."""
    path = run_dir / "episodes.jsonl"
    scratch = ReadResult(format=result.format)  # the first pass's warnings are the second's again
    last = {_episode_key(rec): number for number, rec in _json_lines(path, scratch)}
    keep = set(last.values())
    for number, rec in _json_lines(path, result):
        if number not in keep:
            continue
        episode = f"{rec.get('model', '?')}/{rec.get('task_id', '?')}/seed{rec.get('seed', '?')}"
        rel = rec.get("trajectory")
        turns: list[Turn] = []
        if rel:
            traj = run_dir / str(rel)
            if inside_run(run_dir, str(rel)) is None:
                result.warnings.append(
                    f"{run_dir}/episodes.jsonl:{number}: trajectory {rel} points outside the run directory; not opened"
                )
            elif not traj.is_file():
                result.warnings.append(f"{run_dir}/episodes.jsonl:{number}: trajectory {rel} is missing")
            else:
                bad = _read_turns(traj, turns)
                result.warnings += bad
                result.skipped_lines += len(bad)
        err = rec.get("error")
        yield Trajectory(
            episode=episode,
            source=f"{run_dir}/episodes.jsonl:{number}",
            turns=turns,
            error=(err or {}).get("message") if isinstance(err, dict) else err,
        )


def _episode_key(rec: dict[str, Any]) -> tuple[str, str, str]:
    return (str(rec.get("model")), str(rec.get("task_id")), str(rec.get("seed")))


# A source: its format name, its reader, and the path an empty read is reported against (None:
# conversation directories, each of which is an episode even without events).
_Source = tuple[str, Callable[[ReadResult], Iterator[Trajectory]], Path | None]


_TRAJ_SUFFIXES = (".traj", ".traj.json")


def _source(path: Path) -> _Source:
    """Detect the source kind at ``path``."""
    if not path.exists():
        raise HarnessError(f"{path}: no such file or directory")
    if path.is_file():
        if path.name == "episodes.jsonl":
            return _run_source(path.parent)
        if path.name.endswith((*_TRAJ_SUFFIXES, ".json")):
            return "json-trajectory", partial(_json_documents, [path]), path
        return "openhands-output", partial(_output_jsonl, path), path
    if (path / "episodes.jsonl").is_file():
        return _run_source(path)
    if (path / "output.jsonl").is_file():
        return "openhands-output", partial(_output_jsonl, path / "output.jsonl"), path / "output.jsonl"
    conv_dirs = (
        [path]
        if (path / "events").is_dir()
        else sorted(p.parent for p in path.glob("**/events") if p.is_dir())
    )
    if conv_dirs:
        return "openhands-sdk-conversation", partial(_conversation_dirs, conv_dirs), None
    # a batch run of mini-swe-agent or SWE-agent: <instance>/<instance>.traj[.json]
    trajs = sorted(p for p in path.glob("**/*.traj*") if p.name.endswith(_TRAJ_SUFFIXES) and p.is_file())
    if trajs:
        return "json-trajectory", partial(_json_documents, trajs), path
    # ATIF: harness export-atif's *.atif.json, Harbor's <trial>/agent/trajectory.json
    atif = sorted(
        p for p in path.glob("**/*.json") if p.name.endswith(".atif.json") or p.name == "trajectory.json"
    )
    if atif:
        return "json-trajectory", partial(_json_documents, atif), path
    raise HarnessError(
        f"{path}: unknown format: no episodes.jsonl, output.jsonl, OpenHands conversation (events/), "
        "mini-swe-agent *.traj.json, SWE-agent *.traj or ATIF (*.atif.json, trajectory.json) inside"
    )


def _run_source(run_dir: Path) -> _Source:
    return "harness-run", partial(_run_dir, run_dir), run_dir


def scan_trajectories[T](path: Path, each: Callable[[Trajectory], T]) -> tuple[ReadResult, list[T]]:
    """Read every episode at ``path``, passing each to ``each`` as soon as it is read.

    Returns the read's format, warnings and skipped lines (``trajectories`` left empty) and what
    ``each`` returned, in order. A caller that keeps a summary instead of the turns holds one
    episode in memory at a time: flat memory on a multi-GB output.jsonl, and faster than keeping
    every Turn alive (~15% for `harness loops`: fresh memory for each Turn costs page faults).
    """
    fmt, read, empty_at = _source(path)
    result = ReadResult(format=fmt)
    turns = 0

    def counted(t: Trajectory) -> T:
        nonlocal turns
        turns += len(t.turns)
        return each(t)

    try:
        out = [counted(t) for t in read(result)]
    except _RunIndexInstead as switch:  # what was read of the file so far does not count
        fmt, read, empty_at = _run_source(switch.run_dir)
        result = ReadResult(format=fmt)
        out = [each(t) for t in read(result)]
    if empty_at is not None and not out:
        first = f"; the first: {result.warnings[0]}" if result.warnings else ""
        raise HarnessError(f"{empty_at}: no readable episode ({result.skipped_lines} lines skipped){first}")
    # Another tool's output with not one turn in it was not understood (a harness run's episodes
    # may all have ended before their first turn: those are its records, read as they are).
    if fmt != "harness-run" and out and not turns:
        first = f": {result.warnings[0]}" if result.warnings else ""
        raise HarnessError(f"{path}: no turn read from its {len(out)} episode(s){first}")
    return result, out


@gc_paused  # every Turn read stays alive: each full collection would rescan them all (+60% time)
def read_trajectories(path: Path) -> ReadResult:
    """Detect the source kind at ``path`` and read every episode in it."""
    result, trajectories = scan_trajectories(path, lambda t: t)
    result.trajectories = trajectories
    return result
