"""Loop detection and tool-call validation: pure logic on Turn records.

Nothing here imports OpenHands or an HTTP client (a test asserts it), so the same code watches
live episodes and analyses old trajectories.
"""

from harness.monitor.failure import last_error
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
from harness.monitor.stalls import StallConfig, StallDetector, StallFinding, detect_stall
from harness.monitor.tamper import TamperFinding, tamper_findings

__all__ = [
    "FormatCategory",
    "FormatError",
    "LoopConfig",
    "LoopDetector",
    "LoopFinding",
    "LoopKind",
    "Repair",
    "StallConfig",
    "StallDetector",
    "StallFinding",
    "TamperFinding",
    "ToolCall",
    "ToolSchemas",
    "Turn",
    "TurnFormat",
    "degenerate_unit",
    "detect_loops",
    "detect_stall",
    "find_markup",
    "last_error",
    "tamper_findings",
    "validate_turn",
]
