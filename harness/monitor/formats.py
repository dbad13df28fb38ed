"""Tool-call validation against the scaffold's tool schemas (after BFCL's AST checker).

Every problem becomes a FormatError with a category of DESIGN.md; nothing here raises on odd
input. Tool-call markup left in the text means the server's parser did not recognise what the
model wrote: a parser/template mismatch, or broken JSON inside the markup.
"""

import json
import re
from collections.abc import Iterable, Mapping
from enum import StrEnum
from functools import lru_cache
from typing import Any

import jsonschema
from pydantic import BaseModel, ConfigDict

from harness.monitor.records import ToolCall, Turn


class FormatCategory(StrEnum):
    no_tool_call = "no_tool_call"
    tool_call_in_content = "tool_call_in_content"
    invalid_json_arguments = "invalid_json_arguments"
    unknown_tool = "unknown_tool"
    missing_required = "missing_required"
    unexpected_param = "unexpected_param"
    type_error = "type_error"
    enum_error = "enum_error"
    multiple_tool_calls = "multiple_tool_calls"
    truncated = "truncated"
    empty_response = "empty_response"


class FormatError(BaseModel):
    model_config = ConfigDict(frozen=True)

    category: FormatCategory
    tool: str | None = None
    detail: str = ""


class Repair(BaseModel):
    """Something the scaffold fixes silently (e.g. the SDK maps execute_bash -> terminal)."""

    model_config = ConfigDict(frozen=True)

    kind: str
    original: str
    repaired: str


class TurnFormat(BaseModel):
    model_config = ConfigDict(frozen=True)

    errors: tuple[FormatError, ...] = ()
    repairs: tuple[Repair, ...] = ()
    markup: str | None = None  # which tool-call format was found in the text, if any

    @property
    def ok(self) -> bool:
        return not self.errors


class ToolSchemas(BaseModel):
    """The scaffold's tools: name -> JSON Schema of the parameters, plus aliases it repairs."""

    model_config = ConfigDict(frozen=True)

    parameters: dict[str, dict[str, Any]]
    aliases: dict[str, str] = {}

    @classmethod
    def from_openai_tools(
        cls, tools: Iterable[Mapping[str, Any]], aliases: Mapping[str, str] | None = None
    ) -> "ToolSchemas":
        params: dict[str, dict[str, Any]] = {}
        for tool in tools:
            fn = tool.get("function", tool)
            params[str(fn["name"])] = dict(fn.get("parameters") or {"type": "object", "properties": {}})
        return cls(parameters=params, aliases=dict(aliases or {}))

    def resolve(self, name: str) -> str | None:
        if name in self.parameters:
            return name
        target = self.aliases.get(name)
        return target if target in self.parameters else None


# ---- markup left in the text ---------------------------------------------------------------------
_MARKUP: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("hermes", re.compile(r"<tool_call>")),
    ("qwen3_coder", re.compile(r"<function=[\w.\-]+>|<parameter=[\w.\-]+>")),
    ("mistral", re.compile(r"\[TOOL_CALLS\]")),
    ("llama3_json", re.compile(r"<\|python_tag\|>")),
)
_JSON_CALL = re.compile(r'\{\s*"(?:name|function)"\s*:\s*"([\w.\-]+)"\s*,\s*"(?:parameters|arguments)"\s*:')
_PYTHONIC = re.compile(r"^\s*\[\s*([A-Za-z_][\w.]*)\((.*)\)\s*(?:,\s*[A-Za-z_][\w.]*\(.*\)\s*)*\]\s*$", re.S)

# Which parser reads which markup (for fix hints).
PARSER_FOR_MARKUP = {
    "hermes": "hermes",
    "qwen3_coder": "qwen3_coder",
    "mistral": "mistral",
    "llama3_json": "llama3_json",
    "pythonic": "pythonic",
}


def find_markup(text: str, tool_names: Iterable[str] = ()) -> str | None:
    """The tool-call format whose markup appears in ``text`` (None if none)."""
    if not text:
        return None
    for name, pattern in _MARKUP:
        if pattern.search(text):
            return name
    if _JSON_CALL.search(text):
        return "llama3_json"
    m = _PYTHONIC.match(text)
    if m and (not tool_names or m.group(1) in set(tool_names)):
        return "pythonic"
    return None


# ---- schema checks ---------------------------------------------------------------------------------
@lru_cache(maxsize=256)
def _validator(schema_json: str) -> jsonschema.protocols.Validator:
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema)


_KEYWORD_CATEGORY = {
    "required": FormatCategory.missing_required,
    "additionalProperties": FormatCategory.unexpected_param,
    "enum": FormatCategory.enum_error,
    "const": FormatCategory.enum_error,
}


def _check_call(call: ToolCall, schemas: ToolSchemas) -> tuple[list[FormatError], Repair | None]:
    name = schemas.resolve(call.name)
    if name is None:
        known = ", ".join(sorted(schemas.parameters))
        return [
            FormatError(category=FormatCategory.unknown_tool, tool=call.name, detail=f"known tools: {known}")
        ], None
    repair = Repair(kind="alias", original=call.name, repaired=name) if name != call.name else None
    try:
        args = json.loads(call.arguments) if call.arguments.strip() else {}
    except (json.JSONDecodeError, RecursionError) as exc:
        return [
            FormatError(category=FormatCategory.invalid_json_arguments, tool=name, detail=str(exc)[:200])
        ], repair
    if not isinstance(args, dict):
        return [
            FormatError(
                category=FormatCategory.invalid_json_arguments,
                tool=name,
                detail=f"arguments are a JSON {type(args).__name__}, not an object",
            )
        ], repair
    schema = schemas.parameters[name]
    errors: list[FormatError] = []
    props = schema.get("properties") or {}
    if props and schema.get("additionalProperties") is not False:
        # BFCL counts parameters the tool does not declare even where the schema is permissive.
        errors += [
            FormatError(category=FormatCategory.unexpected_param, tool=name, detail=k)
            for k in args
            if k not in props
        ]
    for err in _validator(json.dumps(schema, sort_keys=True)).iter_errors(args):
        category = _KEYWORD_CATEGORY.get(str(err.validator), FormatCategory.type_error)
        path = "/".join(str(p) for p in err.absolute_path) or "(arguments)"
        errors.append(FormatError(category=category, tool=name, detail=f"{path}: {err.message[:200]}"))
    return errors, repair


def validate_turn(
    turn: Turn, schemas: ToolSchemas, *, expect_tool_call: bool = True, allow_multiple: bool = False
) -> TurnFormat:
    """List the turn's format errors by category, and what the scaffold would repair."""
    errors: list[FormatError] = []
    repairs: list[Repair] = []
    if turn.finish_reason == "length":
        errors.append(FormatError(category=FormatCategory.truncated, detail="finish_reason=length"))
    markup = find_markup(turn.text, schemas.parameters)
    if not turn.tool_calls:
        if markup:
            errors.append(
                FormatError(
                    category=FormatCategory.tool_call_in_content,
                    detail=f"{markup} tool-call markup in the text; the server's parser did not read it",
                )
            )
        elif not turn.text.strip():
            errors.append(FormatError(category=FormatCategory.empty_response))
        elif expect_tool_call:
            errors.append(FormatError(category=FormatCategory.no_tool_call))
    else:
        if markup:
            errors.append(
                FormatError(
                    category=FormatCategory.tool_call_in_content,
                    detail=f"{markup} markup in the text beside parsed calls",
                )
            )
        if len(turn.tool_calls) > 1 and not allow_multiple:
            errors.append(
                FormatError(
                    category=FormatCategory.multiple_tool_calls,
                    detail=f"{len(turn.tool_calls)} calls in one turn",
                )
            )
        for call in turn.tool_calls:
            call_errors, repair = _check_call(call, schemas)
            errors += call_errors
            if repair:
                repairs.append(repair)
    return TurnFormat(errors=tuple(errors), repairs=tuple(repairs), markup=markup)
