"""The scaffold snapshot matches what the installed SDK sends, and the validator reads it."""

import json

from harness.episodes.openhands.sdk import export_tools
from harness.episodes.scaffold import load_scaffold
from harness.monitor import ToolCall, Turn, validate_turn


def test_snapshot_matches_installed_sdk() -> None:
    scaffold = load_scaffold()
    live = export_tools(scaffold)
    snap = scaffold.snapshot()
    assert live["tools"] == snap["tools"], (
        "the installed openhands-tools changed the tool schemas: review, then run `harness scaffold export`"
    )
    assert live["aliases"] == snap["aliases"]


def test_validator_reads_the_snapshot() -> None:
    schemas = load_scaffold().tool_schemas()
    assert set(schemas.parameters) == {"terminal", "file_editor", "finish", "think"}
    ok = Turn(
        index=0,
        tool_calls=(
            ToolCall(
                name="terminal",
                arguments=json.dumps({"command": "ls", "summary": "list", "security_risk": "LOW"}),
            ),
        ),
    )
    assert validate_turn(ok, schemas).ok
    bad = Turn(
        index=0,
        tool_calls=(
            ToolCall(name="file_editor", arguments=json.dumps({"command": "delete", "path": "/w/a.py"})),
        ),
    )
    assert [e.category.value for e in validate_turn(bad, schemas).errors] == ["enum_error"]
    alias = Turn(
        index=0,
        tool_calls=(
            ToolCall(name="str_replace_editor", arguments=json.dumps({"command": "view", "path": "/w"})),
        ),
    )
    assert [r.repaired for r in validate_turn(alias, schemas).repairs] == ["file_editor"]
