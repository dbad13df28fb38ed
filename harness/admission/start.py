"""Where ``--concurrency auto`` starts, and the most it may reach: the plan and the host's room.

Two limits meet here. The model server's: the memory plan says how many full-length sequences
its KV cache holds (a safe start: an agent's context rarely reaches the limit, so the controller
grows past it while the cache has room) and vLLM's ``--max-num-seqs`` (more requests than that
wait). The host's: a sandbox's ``--sandbox-cpus`` and ``--sandbox-memory-gib`` are limits the
engine enforces on each sandbox, not reservations (agents mostly wait on the model), so they do
not count the sandboxes the host holds: the start is also bounded by the sandboxes whose memory
limits fit the memory available now, and from there the controller measures the host (host.py).
The cap (the most the controller ever admits) is ``--max-concurrency``, else 64.
"""

from pydantic import BaseModel, ConfigDict, Field

from harness.cores import usable_cpus

__all__ = ["AutoStart", "HostRoom", "auto_start", "host_room", "memory_room", "sandbox_capacity"]

# EvalConfig's own bound on --concurrency: more threads than this is a mistake, not a plan.
MOST = 64


class HostRoom(BaseModel):
    """The cores and memory episodes' sandboxes can use on this host."""

    model_config = ConfigDict(frozen=True)

    cores: float
    memory_gib: float


def host_room() -> HostRoom:
    """This process's cores (its CPU affinity) and the memory available now (after the server's)."""
    import psutil

    cores = usable_cpus()
    return HostRoom(cores=float(cores), memory_gib=psutil.virtual_memory().available / 2**30)


def sandbox_capacity(room: HostRoom, cpus: float, memory_gib: float) -> tuple[int, str]:
    """Sandboxes the host holds at once (at least 1), and the sentence that says why."""
    by_cpu = int(room.cores // cpus)
    by_mem = int(room.memory_gib // memory_gib)
    n = max(1, min(by_cpu, by_mem, MOST))
    tight = "cores" if by_cpu <= by_mem else "memory"
    return n, (
        f"{n} sandbox{'es' if n != 1 else ''} fit{'s' if n == 1 else ''} the host ({room.cores:g} cores / {cpus:g} per episode = {by_cpu}, "
        f"{room.memory_gib:.0f} GiB free / {memory_gib:g} GiB per episode = {by_mem}; {tight} decide)"
    )


def memory_room(room: HostRoom, memory_gib: float) -> tuple[int, str]:
    """Sandboxes whose memory limits all fit the memory available now (at least 1), in words: the
    most auto starts with (each may use its limit at once), not a cap."""
    n = max(1, min(int(room.memory_gib // memory_gib), MOST))
    return n, (
        f"{room.memory_gib:.0f} GiB free / {memory_gib:g} GiB per sandbox = {n} at their memory limits "
        f"(the CPU limits cap each sandbox, they do not count them: the host's load is measured)"
    )


class AutoStart(BaseModel):
    """Where auto starts and how far it may go, with the reason in words."""

    model_config = ConfigDict(frozen=True)

    start: int = Field(ge=1)
    cap: int = Field(ge=1)
    why: str


def auto_start(
    *,
    sandboxes: int,
    sandbox_why: str,
    full_sequences: int | None = None,
    max_num_seqs: int | None = None,
    max_concurrency: int | None = None,
) -> AutoStart:
    """The start (the smallest of the plan's sequences, --max-num-seqs, the sandboxes the memory
    holds at their limits and the cap) and the cap (--max-concurrency, else 64); without a plan (a
    server the harness does not run) the start is the sandboxes' and the cap's."""
    cap = max(1, min(max_concurrency or MOST, MOST))
    parts = [sandbox_why]
    if max_concurrency is not None:
        parts.append(f"--max-concurrency {max_concurrency}")
    start = min(cap, max(1, sandboxes))
    if full_sequences is not None:
        parts.insert(0, f"{full_sequences} full-length sequences fit the KV cache")
        start = min(start, max(1, full_sequences))
    if max_num_seqs is not None:
        parts.insert(1 if full_sequences is not None else 0, f"--max-num-seqs {max_num_seqs}")
        start = min(start, max(1, max_num_seqs))
    return AutoStart(start=start, cap=cap, why="; ".join(parts))
