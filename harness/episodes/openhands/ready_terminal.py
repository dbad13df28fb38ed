"""The SDK's PTY bash, ready when its prompt is up instead of after a blind 1 s sleep.

Used by local episodes (sdk_tuning's ``terminal`` registry entry) and by the tool server in an
episode's container, which runs this file beside toolserver.py: it imports only the standard
library and openhands, never harness.
"""

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from openhands.tools.terminal.constants import CMD_OUTPUT_PS1_END
from openhands.tools.terminal.impl import TerminalExecutor
from openhands.tools.terminal.terminal.subprocess_terminal import SubprocessTerminal
from openhands.tools.terminal.terminal.terminal_session import TerminalSession
from openhands.tools.terminal.terminal.tmux_pane_pool import DEFAULT_MAX_PANES

_READY_TIMEOUT_S = 10.0  # a shell with no prompt by then is used as it is, as the SDK would after 1 s


_SETTLE_S = 5.0  # the longest a clear waits for the prompt it asked for


def _at_prompt(text: str) -> bool:
    """The shell is back at its prompt: the prompt's end marker last (readline prints the prompt
    once it reads the next line)."""
    return text.rstrip().endswith(_MARKER)


_MARKER = CMD_OUTPUT_PS1_END.rstrip()


# What the terminal's keys send (Ctrl-C, Ctrl-\\, Ctrl-Z): the agent's shell needs them as a terminal has them.
_KEY_SIGNALS = {signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP}


class _SetupSent(Exception):
    """Raised by our _write_pty to end SubprocessTerminal.initialize before its blind sleep."""


class ReadyTerminal(SubprocessTerminal):
    """The SDK's PTY bash; ready when its prompt is up instead of after a fixed 1 s sleep.

    ``initialize`` runs the SDK's own start-up (environment, PTY, bash, reader thread, set-up
    command) and returns at once; a thread waits for the prompt that follows the set-up command,
    clears the screen as the SDK does (which asks bash for a fresh prompt) and waits for that
    prompt too. Reading or typing waits until then, so the first command never races the fresh
    prompt (the SDK's terminal can: its first command, sent at once, may read an empty screen).
    """

    def __init__(self, work_dir: str, history_file: str | None = None, confine: tuple[str, ...] = ()) -> None:
        """``history_file``: where bash keeps the agent's command history (None: nowhere);
        ``confine``: a command that bash runs under (a PID namespace of its own, procs.py)."""
        # Absolute: bash starts in the workspace, where a relative path (a relative run
        # directory's) names nothing; the no-rc wrapper was not found and every command hung.
        history_file = os.path.abspath(history_file) if history_file else None
        # HISTFILE from the start, so that bash never reads the user's history in
        super().__init__(
            work_dir,
            env={"HISTFILE": history_file or os.devnull},
            shell_path=_bash_without_rc(history_file, confine),
        )
        self._history_file = history_file
        self._ready = threading.Event()
        self._setup_echo: str | None = None
        self._nudged = False

    def initialize(self) -> None:
        if self._initialized:
            return
        try:
            # The shell and what it runs inherit the starting thread's signal mask: a Ctrl-C held
            # there (a thread made while the harness held its stop signals) would never reach an
            # interrupted command, and the agent's ``C-c`` did nothing but time out.
            held = signal.pthread_sigmask(signal.SIG_UNBLOCK, _KEY_SIGNALS)
            try:
                super().initialize()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
        except _SetupSent:
            threading.Thread(target=self._await_prompt, name="terminal-ready", daemon=True).start()
        else:  # an SDK that no longer writes that command: it did its own waiting
            self._ready.set()

    def _write_pty(self, data: bytes) -> None:
        self._nudged = data == b"\n"  # what the SDK's clear writes when it asks for a prompt
        first = self._setup_echo is None and not self._ready.is_set()
        if first:
            # ~/.bashrc ran before this line and may have pointed HISTFILE at ~/.bash_history
            history = (
                f"HISTFILE={shlex.quote(self._history_file)}" if self._history_file else "unset HISTFILE"
            )
            data = data.rstrip(b"\r\n") + f"; {history}".encode() + b"\n"
        super()._write_pty(data)
        if first:
            # The SDK's first write is its set-up command (set +H; PROMPT_COMMAND=...; PS2=""); the
            # shell echoes its last line, runs it and prints the prompt we wait for.
            self._setup_echo = data.decode("utf-8", "replace").strip().rsplit("\n", 1)[-1]
            raise _SetupSent

    def _await_prompt(self) -> None:
        marker = _MARKER
        deadline = time.monotonic() + _READY_TIMEOUT_S

        def set_up(text: str) -> bool:  # the prompt after the set-up command's echo is up
            _, echoed, after = text.rpartition(self._setup_echo or "")
            return bool(echoed) and marker in after and text.rstrip().endswith(marker)

        try:
            self._wait_for(set_up, deadline)
            self._clear_and_settle(deadline)  # as the SDK does after its sleep: drop start-up output
        finally:
            self._ready.set()

    def clear_screen(self) -> None:
        """The SDK's screen clear, returning once the prompt it asks for is up.

        The SDK's clear looks for its prompt with ``\\n`` line ends in a PTY's ``\\r\\n``
        output, never finds it, empties the screen and presses Enter for a fresh prompt. It runs
        at the end of every command; when the next command read the screen before that fresh
        prompt came (under load), the prompt then counted as the command's end: the observation
        was empty and every later one was the command before's output (a loop found turns late,
        a root agent's ``kill -9 -1`` seemingly never run). Here the clear waits for that prompt
        (bounded: a program still reading the terminal may never print one)."""
        self._clear_and_settle(time.monotonic() + _SETTLE_S)

    def _clear_and_settle(self, deadline: float) -> None:
        self._nudged = False
        super().clear_screen()
        if self._nudged:  # the screen was emptied and Enter pressed for a fresh prompt
            self._wait_for(_at_prompt, deadline)

    def _wait_for(self, condition: Callable[[str], bool], deadline: float) -> bool:
        while time.monotonic() < deadline and not self._closed:
            with self.output_lock:
                text = "".join(self.output_buffer).replace("\r", "")
            if condition(text):
                return True
            time.sleep(0.005)
        return False

    def _wait_ready(self) -> None:
        self._ready.wait(_READY_TIMEOUT_S + 5)

    def send_keys(self, text: str, enter: bool = True) -> None:
        self._wait_ready()
        super().send_keys(text, enter)

    def read_screen(self) -> str:
        self._wait_ready()
        return super().read_screen()

    def close(self) -> None:
        """The shell ended and the SDK's PTY reader stopped before the SDK closes the PTY. The SDK's
        own close shuts the PTY as soon as bash is gone, under a reader that may be about to
        select() on it: "PTY reader thread error: Bad file descriptor" and its traceback in the
        harness's output after a stop (fresh18, under load)."""
        proc = self.process
        if not self._closed and proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(OSError):  # the SDK's own way out; a dead PTY says nothing
                    os.write(self._pty_master_fd, b"exit\n")  # type: ignore[arg-type]
                try:
                    proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(OSError):
                        os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=5)
            if self.reader_thread is not None and self.reader_thread.is_alive():
                self.reader_thread.join(timeout=2)  # it stops once it sees the shell gone
            self.process = None  # ended: the SDK's close only shuts the PTY now
        super().close()


class ReadyTerminalExecutor(TerminalExecutor):
    """The SDK's single-session ``TerminalExecutor`` over a ``ReadyTerminal``.

    ``TerminalExecutor.__init__`` always starts (and sleeps in) a terminal of its own, so the same
    single-session state is set here instead.
    """

    def __init__(
        self,
        working_dir: str,
        full_output_save_dir: str | None = None,
        history_file: str | None = None,
        confine: tuple[str, ...] = (),
    ) -> None:
        self.shell_path = None
        self._working_dir = working_dir
        self._username = None
        self._no_change_timeout_seconds = None
        self._terminal_type = "subprocess"
        self._env = None
        self._max_panes = DEFAULT_MAX_PANES
        self.full_output_save_dir = full_output_save_dir
        self._pool = None
        self._sessions = {}
        self._sessions_lock = threading.Lock()
        self._pool_recovery_lock = threading.Lock()
        self._session = TerminalSession(ReadyTerminal(working_dir, history_file, confine))
        self._session.initialize()


def _bash_without_rc(history_file: str | None, confine: tuple[str, ...] = ()) -> str | None:
    """A bash that skips the user's ~/.bashrc, written beside the episode's history file.

    The user's rc file is theirs, not the task's: it can print, change directories, or (pyenv's
    `pyenv init`) take a lock; an agent's shell stopped inside it left pyenv's rehash lock behind,
    and every interactive bash on the machine then waited 60 s for it. None (the SDK's bash) when
    the episode keeps no files.
    """
    bash = shutil.which("bash")
    if history_file is None or bash is None:
        return None
    wrapper = Path(os.path.abspath(history_file)).with_name("bash-norc")
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    prefix = "".join(f"{shlex.quote(word)} " for word in (*_keys_by_default(), *confine))
    wrapper.write_text(f'#!/bin/sh\nexec {prefix}{shlex.quote(bash)} --norc "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def _keys_by_default() -> tuple[str, ...]:
    """A prefix that gives the shell Ctrl-C and Ctrl-\\ back where the harness was started with them
    ignored (``harness eval ... &`` from a script, or under nohup-like launchers): an ignored signal
    stays ignored through exec, bash cannot reset one it found ignored, and the agent's ``C-c``
    reached a ``sleep`` that ignored it. GNU env >= 8.31 resets them; elsewhere, nothing."""
    if (
        signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
        and signal.getsignal(signal.SIGQUIT) is not signal.SIG_IGN
    ):
        return ()
    env = shutil.which("env")
    if env is None:
        return ()
    probe = subprocess.run(
        [env, "--default-signal=INT,QUIT", "true"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return (env, "--default-signal=INT,QUIT") if probe.returncode == 0 else ()
