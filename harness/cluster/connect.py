"""Joining a Ray cluster, with one-line errors for what a user gets wrong."""

import logging
import os
import signal
import socket
import threading
from types import ModuleType

from harness.errors import HarnessError

RAY_MISSING = "--executor ray needs Ray, which is not installed here: pip install 'harness[ray]'"
# Passed to every worker: what the episodes read from the environment (the user's settings).
_FORWARDED = ("LITELLM_LOCAL_MODEL_COST_MAP", "HF_HUB_OFFLINE", "DOCKER_HOST", "CUDA_HOME")


def import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise HarnessError(RAY_MISSING) from None
    return ray


def _check_reachable(address: str) -> None:
    """A HOST:PORT with nothing listening fails in seconds (ray.init would retry for a minute)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise HarnessError(f"--ray-address {address}: expected auto or HOST:PORT of the cluster's head")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise HarnessError(
            f"--ray-address {address}: no Ray cluster answers there ({exc.strerror or exc}); "
            "start one with `ray start --head` or give its head's address"
        ) from None


def connect(address: str | None) -> ModuleType:
    """Ray, joined to the cluster at ``address`` (auto, HOST:PORT, ray://...), or to RAY_ADDRESS,
    or to a one-machine Ray started for this process (None). Joined once per process."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    if address and address != "auto" and "://" not in address:
        _check_reachable(address)
    env = {k: v for k, v in os.environ.items() if k in _FORWARDED or k.startswith("HARNESS_")}
    main = threading.current_thread() is threading.main_thread()
    sigterm = signal.getsignal(signal.SIGTERM) if main else None
    try:
        ray.init(
            address=address,
            logging_level=logging.WARNING,
            log_to_driver=True,
            runtime_env={"env_vars": env} if env else None,
        )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        where = f"--ray-address {address}" if address else f"RAY_ADDRESS {os.environ.get('RAY_ADDRESS', '')}"
        raise HarnessError(f"{where}: no Ray cluster to join ({first[:200]})") from None
    finally:
        # ray.init makes SIGTERM exit the driver at once (status 1): the run's own handler
        # (harness/_signals.py: a graceful stop, then exit 143) is put back
        if sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)
    return ray
