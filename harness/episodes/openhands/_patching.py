"""What the harness's runtime patches of third-party libraries may rely on: the versions they were
written for, and the scope they act in.

The OpenHands runner swaps parts of the SDK, its tools, openai and pydantic for faster or tidier
versions (sdk_tuning.py, tool_specs.py, sdk.py, toolserver.py). Each relies on private code of the
library it patches, so each obeys two rules:

- Checked. Before a patch is installed, ``require`` compares the installed distribution with the
  version the patch was written for (``PINS``, the same pins as pyproject.toml's) and raises
  ``PatchVersionError`` naming both; the OpenHands runner checks all of them when it is made, so a
  run with another version fails at its start, in one line.
- Scoped. A patch acts only where the OpenHands runner needs it. Those that must be installed
  process-wide (a module attribute or class member the library reads at call time: a context
  manager removing it while another thread's episode runs would race) ask ``in_episode()``: true
  only in the context an OpenHands episode runs in (a ContextVar: that episode's thread, and
  whatever copies its context), so other code in the process (mini-swe-agent's openai client, the
  model-call proxy, another thread) gets the library's own behaviour. Each patch's docstring says
  how it is scoped.

Standard library and ``packaging`` only: the tool server in each container imports this file too
(copied beside toolserver.py, where no harness package exists).
"""

import contextlib
import contextvars
import functools
import importlib.metadata
import threading
from collections.abc import Iterator

try:
    from harness.errors import HarnessError as _Refusal
except ImportError:  # in a container's tool server: this file alone, no harness package
    _Refusal = RuntimeError  # type: ignore[assignment,misc]

__all__ = [
    "PATCHED",
    "PINS",
    "PatchVersionError",
    "check_all",
    "episode_scope",
    "episodes_running",
    "in_episode",
    "require",
]

# The versions the patches were written for; pyproject.toml pins the same (a test compares them).
PINS: dict[str, str] = {
    "openai": "==2.54.0",
    "openhands-sdk": "==1.58.0",
    "openhands-tools": "==1.58.0",
    "pydantic": "==2.14.4",  # in containers: their agent-tools Python takes the host's versions
}
# What each is patched in (``check_all``'s words; each patch names itself when it installs).
PATCHED: dict[str, str] = {
    "openai": "openai.resources.chat.completions.completions.maybe_transform (sdk_tuning.py)",
    "openhands-sdk": "its tool registry, Schema.to_mcp_schema, LocalFileStore and log lines "
    "(tool_specs.py, sdk_tuning.py, sdk.py) and its imports in the tool server (import_stubs.py)",
    "openhands-tools": "the terminal's and the file editor's executors (ready_terminal.py, sdk_tuning.py)",
    "pydantic": "pydantic._internal._config.config_defaults in each container's tool server (toolserver.py)",
}

_HOST_FIX = "pin it or update the patch"


class PatchVersionError(_Refusal):
    """An installed library is not the version a harness patch of it was written for."""


@functools.cache
def installed(dist: str) -> str | None:
    """The installed version of distribution ``dist`` (None: not installed); looked up once."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def require(dist: str, patch: str, *, where: str = "", fix: str = _HOST_FIX) -> str:
    """The installed version of ``dist``, when it is the one ``patch`` was written for (``PINS``);
    else PatchVersionError, naming both (``where``: which Python, when not this harness's)."""
    from packaging.specifiers import SpecifierSet

    spec = PINS[dist]
    version = installed(dist)
    if version is None:
        raise PatchVersionError(
            f"{dist} is not installed{where}; harness patches {patch}, written for {dist}{spec}: "
            f"pip install '{dist}{spec}'"
        )
    if version not in SpecifierSet(spec):
        raise PatchVersionError(
            f"{dist} {version} is installed{where}; harness patches {patch} written for {spec}: {fix}"
        )
    return version


def check_all(*, where: str = "", fix: str = _HOST_FIX) -> None:
    """Every distribution the patches rely on is the version they were written for."""
    for dist in PINS:
        require(dist, PATCHED[dist], where=where, fix=fix)


_episode: contextvars.ContextVar[bool] = contextvars.ContextVar("harness_openhands_episode", default=False)
_running = 0
_running_lock = threading.Lock()


@contextlib.contextmanager
def episode_scope() -> Iterator[None]:
    """While inside, this context runs an OpenHands episode: the gated patches act here."""
    global _running
    token = _episode.set(True)
    with _running_lock:
        _running += 1
    try:
        yield
    finally:
        with _running_lock:
            _running -= 1
        _episode.reset(token)


def in_episode() -> bool:
    """Whether the calling context runs an OpenHands episode (episode_scope)."""
    return _episode.get()


def episodes_running() -> bool:
    """Whether any OpenHands episode runs in this process now (for what the SDK does in threads
    of its own, where the episode's context is not visible)."""
    return _running > 0
