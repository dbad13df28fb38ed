"""The :class:`Job` record handled by the scheduler."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional


@dataclass
class Job:
    """A unit of work.

    Attributes:
        name: human-readable identifier, used in logs.
        priority: larger numbers run first; the default is 0.
        action: optional callable executed by :meth:`Scheduler.run_all`.
        payload: arbitrary keyword arguments passed to ``action``.
    """

    name: str
    priority: int = 0
    action: Optional[Callable[..., Any]] = None
    payload: Dict[str, Any] = field(default_factory=dict)

    def run(self) -> Any:
        """Execute the job's action (if any) and return its result."""
        if self.action is None:
            return None
        return self.action(**self.payload)
