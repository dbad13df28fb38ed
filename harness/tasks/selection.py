"""A subset of a suite's tasks: ``--task PATTERN`` (repeatable glob on task ids) and ``--limit N``.

The two options are defined once here (``TaskPatterns``, ``TaskLimit``): ``EvalConfig`` takes them
as fields (so `eval` and `tasks verify` get them as flags and from the ``[eval]`` table), and
``TaskSelection`` carries them for the commands that read runs (`report`, `compare`).
"""

from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import HarnessError

if TYPE_CHECKING:
    from harness.tasks.loader import Suite

TaskPatterns = Annotated[
    tuple[str, ...],
    Field(
        description="Only the tasks whose id matches this glob, e.g. 'csv-*' (repeatable: any of them); "
        "a pattern that matches no task is an error.",
        json_schema_extra={"metavar": "PATTERN"},
    ),
]
TaskLimit = Annotated[
    int | None,
    Field(
        ge=1,
        description="At most N tasks: the first N task ids in sorted order (after --task).",
        json_schema_extra={"metavar": "N"},
    ),
]
_NAMED = 20  # ids named in an error before "... (N in all)"


class TaskSelection(BaseModel):
    """``--task`` and ``--limit`` for the commands that read runs rather than load a suite."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: TaskPatterns = ()
    limit: TaskLimit = None

    @property
    def active(self) -> bool:
        return bool(self.task) or self.limit is not None

    def describe(self, kept: int, total: int) -> str:
        """'3 of 20 tasks (--task csv-* --limit 3)', for notes on what a report covers."""
        flags = [f"--task {p}" for p in self.task] + ([f"--limit {self.limit}"] if self.limit else [])
        return f"{kept} of {total} tasks ({' '.join(flags)})"


def select_ids(
    ids: Iterable[str], patterns: tuple[str, ...] = (), limit: int | None = None, *, where: str
) -> list[str]:
    """The ids (sorted) that match any pattern, at most ``limit`` of them.

    Every pattern must match something: a typo that silently selected nothing (or only the other
    patterns' tasks) would make a run look smaller than asked. ``where`` names the suite or run.
    """
    if limit is not None and limit < 1:
        raise HarnessError(f"--limit {limit}: must be at least 1")
    every = sorted(set(ids))
    kept = every
    if patterns:
        for pattern in patterns:
            if not any(fnmatchcase(i, pattern) for i in every):
                shown = ", ".join(every[:_NAMED]) + (
                    f", ... ({len(every)} in all)" if len(every) > _NAMED else ""
                )
                raise HarnessError(f"--task {pattern}: matches no task of {where}; its task ids are {shown}")
        kept = [i for i in every if any(fnmatchcase(i, p) for p in patterns)]
    return kept[:limit] if limit is not None else kept


def narrow(
    suite: "Suite", patterns: tuple[str, ...] = (), limit: int | None = None, *, where: str
) -> "Suite":
    """The suite's selected tasks, and its skipped task directories among them (a directory that
    failed to load still counts as a task id: selecting it says why it cannot run)."""
    from harness.tasks.loader import Suite

    if not patterns and limit is None:
        return suite
    every = [t.id for t in suite.tasks] + [s.id for s in suite.skipped]
    keep = set(select_ids(every, patterns, limit, where=where))
    return Suite(
        tasks=[t for t in suite.tasks if t.id in keep], skipped=[s for s in suite.skipped if s.id in keep]
    )
