"""Tool-call validation: every format category, markup recognition, and scaffold repairs."""

import ast
import json
from pathlib import Path

import pytest

from harness.monitor import FormatCategory as C
from harness.monitor import ToolCall, ToolSchemas, Turn, find_markup, validate_turn
from tests.conftest import REPO

SCHEMAS = ToolSchemas.from_openai_tools(
    [
        {
            "type": "function",
            "function": {
                "name": "terminal",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "command": {"type": "string"},
                        "timeout": {"type": "number"},
                        "security_risk": {"type": "string", "enum": ["LOW", "MEDIUM", "HIGH"]},
                    },
                    "required": ["command"],
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "finish",
                "parameters": {
                    "type": "object",
                    "properties": {"message": {"type": "string"}},
                    "required": ["message"],
                    "additionalProperties": False,
                },
            },
        },
    ],
    aliases={"execute_bash": "terminal", "bash": "terminal"},
)


def cats(turn: Turn) -> list[str]:
    return [e.category.value for e in validate_turn(turn, SCHEMAS).errors]


def tc(name: str, args: object) -> ToolCall:
    return ToolCall(name=name, arguments=args if isinstance(args, str) else json.dumps(args))


@pytest.mark.parametrize(
    ("turn", "expected"),
    [
        (Turn(index=0, tool_calls=(tc("terminal", {"command": "ls", "security_risk": "LOW"}),)), []),
        (Turn(index=0, text="I think the answer is 42."), ["no_tool_call"]),
        (
            Turn(
                index=0,
                text='<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}}\n</tool_call>',
            ),
            ["tool_call_in_content"],
        ),
        (Turn(index=0, tool_calls=(tc("terminal", '{"command": "ls"'),)), ["invalid_json_arguments"]),
        (Turn(index=0, tool_calls=(tc("terminal", '["ls"]'),)), ["invalid_json_arguments"]),
        (Turn(index=0, tool_calls=(tc("browse", {"url": "x"}),)), ["unknown_tool"]),
        (Turn(index=0, tool_calls=(tc("terminal", {"timeout": 5}),)), ["missing_required"]),
        (Turn(index=0, tool_calls=(tc("terminal", {"command": "ls", "cwd": "/"}),)), ["unexpected_param"]),
        (Turn(index=0, tool_calls=(tc("finish", {"message": "ok", "extra": 1}),)), ["unexpected_param"]),
        (Turn(index=0, tool_calls=(tc("terminal", {"command": ["ls"]}),)), ["type_error"]),
        (
            Turn(index=0, tool_calls=(tc("terminal", {"command": "ls", "security_risk": "NONE"}),)),
            ["enum_error"],
        ),
        (
            Turn(index=0, tool_calls=(tc("terminal", {"command": "ls"}), tc("finish", {"message": "x"}))),
            ["multiple_tool_calls"],
        ),
        (
            Turn(index=0, text='<tool_call>\n{"name": "terminal", "argu', finish_reason="length"),
            ["truncated", "tool_call_in_content"],
        ),
        (Turn(index=0, text="   "), ["empty_response"]),
    ],
)
def test_categories(turn: Turn, expected: list[str]) -> None:
    assert sorted(cats(turn)) == sorted(expected)


def test_every_category_is_covered_by_a_case() -> None:
    source = Path(__file__).read_text()
    assert all(f'"{c.value}"' in source for c in C)


def test_alias_is_reported_as_a_repair_not_an_error() -> None:
    result = validate_turn(Turn(index=0, tool_calls=(tc("execute_bash", {"command": "ls"}),)), SCHEMAS)
    assert result.ok
    assert [(r.kind, r.original, r.repaired) for r in result.repairs] == [
        ("alias", "execute_bash", "terminal")
    ]


@pytest.mark.parametrize(
    ("text", "fmt"),
    [
        ('<tool_call>{"name": "terminal", "arguments": {}}</tool_call>', "hermes"),
        ("<function=terminal>\n<parameter=command>\nls\n</parameter>\n</function>", "qwen3_coder"),
        ('{"name": "terminal", "parameters": {"command": "ls"}}', "llama3_json"),
        ('<|python_tag|>{"name": "terminal"}', "llama3_json"),
        ('[TOOL_CALLS][{"name": "terminal", "arguments": {"command": "ls"}}]', "mistral"),
        ('[terminal(command="ls")]', "pythonic"),
        ("Use [brackets(like this)] in prose.", None),
        ("Just an answer.", None),
    ],
)
def test_markup_formats(text: str, fmt: str | None) -> None:
    assert find_markup(text, ["terminal", "finish"]) == fmt


def test_garbage_never_raises() -> None:
    for text in ["\x00" * 50, "<tool_call>" * 1000, "{" * 5000, "[a(" * 300]:
        validate_turn(Turn(index=0, text=text, tool_calls=(tc("terminal", text),)), SCHEMAS)


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_monitor_imports_neither_openhands_nor_http() -> None:
    forbidden = {
        "openhands",
        "litellm",
        "httpx",
        "requests",
        "openai",
        "urllib3",
        "aiohttp",
        "socket",
        "starlette",
    }
    for path in (REPO / "harness" / "monitor").rglob("*.py"):
        assert not (_imported_modules(path) & forbidden), path
        internal = {m for m in _imported_modules(path) if m == "harness"}
        text = path.read_text()
        assert "harness.server" not in text and "harness.episodes" not in text, (path, internal)
