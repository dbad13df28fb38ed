"""Environment the OpenHands SDK reads at import time; import this before any `openhands` module.

Its own module so that sdk.py (the agent builders) and sdk_tuning.py (the SDK patches) both
depend on it instead of on each other.
"""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm would fetch prices at import
os.environ.setdefault("OPENHANDS_SUPPRESS_BANNER", "1")
# The SDK logs every tool and terminal start at INFO; the harness shows its own progress instead.
os.environ.setdefault("LOG_LEVEL", "WARNING")
