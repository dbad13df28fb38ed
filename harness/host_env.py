"""The environment the harness hands to what a task runs on this machine (its tests, the agent's
shell in a local sandbox): this process's own, less the settings of the caller's pytest.

A researcher's ``PYTEST_ADDOPTS`` (or a pytest session driving the harness: ``PYTEST_CURRENT_TEST``,
``--basetemp`` through ``PYTEST_ADDOPTS``) would otherwise change how a task's own pytest runs: a
``--basetemp`` there clears that directory, options change what passes."""

import os
from collections.abc import Mapping


def task_env(extra: Mapping[str, str]) -> dict[str, str]:
    """``os.environ`` without ``PYTEST_*``, with ``extra`` on top."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return {**env, **extra}
