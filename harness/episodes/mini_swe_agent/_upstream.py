"""The installed mini-swe-agent, imported quietly and checked against the version this runner was
written for (it subclasses DefaultAgent and relies on how ``run``/``query`` add messages).

Importing ``minisweagent`` prints a banner unless MSWEA_SILENT_STARTUP is set, and creates and
loads a ``.env`` from its global config folder (MSWEA_GLOBAL_CONFIG_DIR): the harness points that at
its own cache, so that a user's mini-swe-agent settings do not change the harness's episodes. Only
its agent loop and its format helpers are used (never its litellm models: no price-map download,
no retries of its own).
"""

import os
from functools import cache

from harness.errors import HarnessError
from harness.paths import cache_dir

WRITTEN_FOR = "2.4.6"


@cache
def check_version() -> str:
    """mini-swe-agent's version, imported once; a HarnessError when it is not the one pinned."""
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    os.environ.setdefault("MSWEA_GLOBAL_CONFIG_DIR", str(cache_dir() / "mini-swe-agent"))
    try:
        import minisweagent
    except ImportError:
        raise HarnessError(
            f"mini-swe-agent is not installed: pip install mini-swe-agent=={WRITTEN_FOR}"
        ) from None
    if minisweagent.__version__ != WRITTEN_FOR:
        raise HarnessError(
            f"mini-swe-agent {minisweagent.__version__} is installed; the harness's runner was written for "
            f"{WRITTEN_FOR}: pip install mini-swe-agent=={WRITTEN_FOR}"
        )
    return str(minisweagent.__version__)
