"""Which tests run together on one pytest-xdist worker (the README's ``pytest -n 2``).

Every test that starts, shares or locks a vLLM server is in the group ``vllm``: the harness allows
one vLLM per device, as on a user's machine, so they run one after another on one worker. Every
other test stays with its module (its module-scoped fixtures: one Ray cluster, one set of images).

pytest-xdist's own ``--dist loadgroup`` cannot do it with pytest 9: it renames ``item._nodeid``,
which pytest 9 no longer reads, so each test became its own group and two vLLM tests ran at once
on the two workers (each refused the other's server). So the workers write each test's group to a
file as they collect, and the controller's scheduler (module-sized units, in collection order)
reads it.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

ENV = "HARNESS_TEST_GROUPS"  # the file's path, set by the controller for its workers
VLLM = "vllm"
_VLLM_FIXTURES = frozenset({"vllm_server", "no_vllm_left", "server_python", "bundled_model"})


def module(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def group(item: pytest.Item) -> str:
    if item.get_closest_marker("vllm") or _VLLM_FIXTURES & set(getattr(item, "fixturenames", ())):
        return VLLM
    return module(item)


def configure(config: pytest.Config) -> None:
    """The controller: a file for its workers' groups (its workers inherit the environment)."""
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        return
    path = Path(tempfile.gettempdir()) / f"harness-test-groups-{os.getpid()}.json"
    path.unlink(missing_ok=True)
    os.environ[ENV] = str(path)


def unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and (path := os.environ.get(ENV)):
        Path(path).unlink(missing_ok=True)


def record(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A worker: each collected test's group (every worker collects the same tests)."""
    path = os.environ.get(ENV)
    if not path or not hasattr(config, "workerinput"):
        return
    tmp = Path(f"{path}.{config.workerinput['workerid']}")
    tmp.write_text(json.dumps({item.nodeid: group(item) for item in items}))
    os.replace(tmp, path)


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):  # type: ignore[misc]
        """Module-sized work units (a worker takes whole units), one ``vllm`` unit."""

        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                self._groups = json.loads(Path(os.environ[ENV]).read_text())
            return self._groups.get(nodeid) or nodeid.split("::")[0]

    return ByGroup(config, log)
