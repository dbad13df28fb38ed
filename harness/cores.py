"""The cores this process may run on: its CPU affinity (a container's or a taskset's limit), not
the machine's count."""

import os


def usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
