"""jobq - a minimal in-process job scheduler with priorities."""

from .job import Job
from .scheduler import EmptySchedulerError, Scheduler

__all__ = ["EmptySchedulerError", "Job", "Scheduler"]
__version__ = "0.4.0"
