"""What a Harbor task's ``task.toml`` asks of its containers beyond the image (tasks/harbor_config.py
reads it): the network of each phase, the environment variables, and the healthcheck.

Network, per phase (the agent's container; the container the tests run in): Harbor's default is
public (the engine's bridge network: task scripts install tools from the internet), ``no-network``
is ``--network none`` for that container. ``--network`` overrides every phase of every task:
``none`` for a user who will not let a model's commands reach the internet (a phase whose task
asks for network is then denied it, and a note says so), ``public`` to give it to all; ``task``
(the default) follows each task. Tasks that are not Harbor's (native, SWE-bench) run without
network unless ``--network public``. A host allowlist cannot be set on a container through the
Docker API (Harbor runs an egress proxy beside it): such a task is refused in one line unless
``--network`` decides.
"""

import time
from typing import TYPE_CHECKING, Literal

from harness.errors import HarnessError
from harness.tasks import Task
from harness.tasks.harbor_config import Healthcheck, resolve_env

if TYPE_CHECKING:
    from docker.models.containers import Container

Phase = Literal["agent", "verifier"]
NetworkChoice = Literal["task", "none", "public"]
PUBLIC = "bridge"  # the engine's default network (podman's Docker API maps it to its own)


class TaskRefusedAtRun(HarnessError):
    """A task whose task.toml asks what this run's settings cannot give (its episodes error)."""


class HealthcheckFailed(HarnessError):
    """[environment.healthcheck] did not pass: the task's service never came up."""


def phase_network(task: Task, phase: Phase, choice: NetworkChoice) -> str:
    """The Docker ``network_mode`` of the task's container in ``phase``: ``none`` or PUBLIC."""
    if choice != "task":
        return "none" if choice == "none" else PUBLIC
    spec = task.harbor
    if spec is None:
        return "none"
    policy = spec.agent_network if phase == "agent" else spec.verifier_network
    if policy.mode == "allowlist":
        raise TaskRefusedAtRun(
            f'{task.path / "task.toml"}: {policy.field} = "allowlist" ({len(policy.hosts)} hosts): a container\'s '
            "network cannot be limited to hosts through the engine; --network none or --network public decides"
        )
    return PUBLIC if policy.mode == "public" else "none"


def denied(task: Task, choice: NetworkChoice) -> str | None:
    """The one-line note when --network none takes away network a phase of the task asks for."""
    spec = task.harbor
    if choice != "none" or spec is None:
        return None
    asking = [
        p
        for p, policy in (("agent", spec.agent_network), ("verifier", spec.verifier_network))
        if policy.mode != "none"
    ]
    if not asking:
        return None
    return (
        f"{task.id}: --network none denies the {' and '.join(asking)} phase{'s' if len(asking) > 1 else ''} the "
        f"network its task.toml gives ({'public' if spec.agent_network.mode == 'public' else 'allowlist'} by default "
        "in Harbor): steps that fetch from the internet will fail"
    )


def container_env(task: Task) -> dict[str, str]:
    """Environment variables of the task's containers: a replayed Dockerfile's ENV, then
    ``[environment] env`` with its ``${VAR}`` templates resolved from this machine (never stored)."""
    env = dict(task.container.env) if task.container else {}
    if task.harbor is not None:
        env.update(resolve_env(task.harbor.env))
    return env


def run_healthcheck(
    container: "Container",
    task: Task,
    user: str = "0",
    *,
    check: Healthcheck | None = None,
    field: str = "[environment.healthcheck]",
) -> None:
    """``[environment.healthcheck]`` (or ``check``: a step's) as Harbor runs it after a container
    starts: every ``start_interval_s`` during ``start_period_s`` (failures there do not count), then
    every ``interval_s`` until it passes or has failed ``retries`` times running; HealthcheckFailed."""
    hc = check or (task.harbor.healthcheck if task.harbor is not None else None)
    if hc is None:
        return
    start = time.monotonic()
    failures = 0
    while True:
        in_start = time.monotonic() - start < hc.start_period_s
        code, output = container.exec_run(
            ["timeout", "-k", "2", f"{hc.timeout_s:g}", "sh", "-c", hc.command], user=user, demux=False
        )
        if code == 0:
            return
        if in_start:
            time.sleep(hc.start_interval_s)
            continue
        failures += 1
        if failures >= hc.retries:
            tail = (output or b"").decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise HealthcheckFailed(
                f"{task.id}: {field} {hc.command!r} failed {failures} times in a row "
                f"(exit {code}): {tail[0][:200]}"
            )
        time.sleep(hc.interval_s)
