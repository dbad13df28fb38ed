"""Loop detection and tool-call validation: pure logic on Turn records.

Nothing here imports OpenHands or an HTTP client (a test asserts it), so the same code watches
live episodes and analyses old trajectories.
"""

from harness.monitor.formats import (
    FormatCategory,
    FormatError,
    Repair,
    ToolSchemas,
    TurnFormat,
    find_markup,
    validate_turn,
)
from harness.monitor.loops import (
    LoopConfig,
    LoopDetector,
    LoopFinding,
    LoopKind,
    degenerate_unit,
    detect_loops,
)
from harness.monitor.records import ToolCall, Turn

__all__ = [
    "FormatCategory",
    "FormatError",
    "LoopConfig",
    "LoopDetector",
    "LoopFinding",
    "LoopKind",
    "Repair",
    "ToolCall",
    "ToolSchemas",
    "Turn",
    "TurnFormat",
    "degenerate_unit",
    "detect_loops",
    "find_markup",
    "validate_turn",
]
