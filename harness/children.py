"""Child processes that die with the harness, whichever of its threads starts them.

A model server or an SSH connection runs in its own session (a Ctrl-C of the terminal is the
harness's to handle), so nothing ends it when the harness is killed but Linux's
``PR_SET_PDEATHSIG``: the child gets a signal when its parent dies. The parent there is the
*thread* that forked it, not the process: a server restarted by an episode's worker thread (after
its idle stop, or by a model call through the run's proxy) was signalled when that worker ended,
and one started by a thread without the setting outlived a killed harness for good. So every such
child is forked by the main thread or by one spawner thread that lives as long as the process.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any

_PR_SET_PDEATHSIG = 1
_HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM}

_requests: queue.SimpleQueue[tuple[Callable[[], subprocess.Popen[bytes]], Future[subprocess.Popen[bytes]]]]
_requests = queue.SimpleQueue()
_spawner: threading.Thread | None = None
_spawner_lock = threading.Lock()


def _load_prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not glibc Linux: children are not tied
        return None


# Looked up here, not in the child: a dlopen between fork and exec can deadlock on a loader lock
# another thread held at the fork.
_PRCTL = _load_prctl()


def _setup_in_child(parent: int, signo: int, also: Callable[[], None] | None) -> Callable[[], None]:
    def setup() -> None:
        # the stop signals back (a main-thread fork holds them, and the mask is inherited)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD_SIGNALS)
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, signo)
        if os.getppid() != parent:  # the parent died before the setting took: nobody will signal
            os.kill(os.getpid(), signo)
        if also is not None:
            also()

    return setup


@contextlib.contextmanager
def stop_signals_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM while the main thread forks, deliver them right after.

    A signal that lands during the fork runs its Python handler inside an at-fork callback
    (logging's lock release), where CPython prints the KeyboardInterrupt and drops it: the
    harness went on serving and the first Ctrl-C was lost. Held, it arrives once ``Popen`` has
    returned, when the new process is known and can be stopped. (Other threads never run the
    handlers: a fork there cannot swallow them.) A caller that records the process wraps the call
    and the record in it too: held only inside ``popen_tied``, a Ctrl-C arrived as it returned,
    before the caller had the process (a serve stopped then left its vLLM to the death signal).
    Nested, the inner one restores the outer's mask: nothing arrives before the outer ends.
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _serve() -> None:
    while True:
        make, done = _requests.get()
        if not done.set_running_or_notify_cancel():
            continue
        try:
            done.set_result(make())
        except BaseException as exc:  # handed to the caller, raised there
            done.set_exception(exc)


def _spawner_thread() -> None:
    global _spawner
    with _spawner_lock:
        if _spawner is None or not _spawner.is_alive():
            # a daemon that never returns: it ends only with the process, and its children then
            _spawner = threading.Thread(target=_serve, name="child-spawner", daemon=True)
            _spawner.start()


def popen_tied(
    argv: Sequence[str],
    *,
    signo: int = signal.SIGTERM,
    preexec: Callable[[], None] | None = None,
    **kwargs: Any,
) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(argv, **kwargs)`` whose child gets ``signo`` when this process dies, even
    by SIGKILL, and not before. From the main thread it forks there; from any other thread the
    spawner thread forks it. ``preexec``: more child-side setup, after the tie."""
    setup = _setup_in_child(os.getpid(), signo, preexec)
    if threading.current_thread() is threading.main_thread():
        with stop_signals_held():
            return subprocess.Popen(argv, preexec_fn=setup, **kwargs)
    _spawner_thread()
    done: Future[subprocess.Popen[bytes]] = Future()
    _requests.put((lambda: subprocess.Popen(argv, preexec_fn=setup, **kwargs), done))
    return done.result()
