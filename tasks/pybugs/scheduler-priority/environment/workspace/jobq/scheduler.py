"""Priority scheduler.

Jobs with a higher ``priority`` are handed out first. Jobs that share the
same priority are handed out in the order in which they were submitted
(first in, first out).
"""

from __future__ import annotations

import heapq
from typing import Any, Iterable, List, Tuple

from .job import Job


class EmptySchedulerError(LookupError):
    """Raised when popping or peeking from an empty scheduler."""


class Scheduler:
    """Holds pending jobs and hands them out by priority."""

    def __init__(self, jobs: Iterable[Job] = ()) -> None:
        self._heap: List[Tuple[int, Job]] = []
        for job in jobs:
            self.submit(job)

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def submit(self, job: Job) -> None:
        """Add ``job`` to the queue."""
        # heapq is a min-heap, so negate the priority to pop the largest first.
        heapq.heappush(self._heap, (-job.priority, job))

    def peek(self) -> Job:
        """Return the job that :meth:`pop` would return, without removing it."""
        if not self._heap:
            raise EmptySchedulerError("no pending jobs")
        return self._heap[0][-1]

    def pop(self) -> Job:
        """Remove and return the next job to run."""
        if not self._heap:
            raise EmptySchedulerError("no pending jobs")
        return heapq.heappop(self._heap)[-1]

    def drain(self) -> List[Job]:
        """Remove and return all pending jobs, in the order they would run."""
        jobs = []
        while self._heap:
            jobs.append(self.pop())
        return jobs

    def run_all(self) -> List[Any]:
        """Run every pending job in order and return their results."""
        return [job.run() for job in self.drain()]
