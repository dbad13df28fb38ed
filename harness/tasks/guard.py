"""The Python a native task's tests run with, out of the tested code's reach (standard library only).

The harness copies this file next to a ``guard.conf`` into a directory the tested code cannot write
(a root-owned one in a container; a private one under --runtime local) and makes it ``$PYTHON`` and
``python``/``python3``/``pytest`` first on PATH for the task's tests:
``guard.py [python options] (-m MODULE | -c CODE | - | SCRIPT) [args]`` runs like ``python``, except:

- the interpreter runs isolated (``-I``: no current or script directory on ``sys.path``, no
  ``PYTHON*`` variables, no user site), so a ``pytest.py``, ``sitecustomize.py``,
  ``usercustomize.py`` or ``.pth`` file in the workspace is never imported by the runner; the
  workspace (the current directory and ``$WORKSPACE``) and ``$PYTHONPATH`` are APPENDED to
  ``sys.path``, after the standard library and the runner's packages, so the code under test is
  importable but never shadows them (``guard.conf``'s ``site 0`` also drops site-packages and
  puts only its ``path`` lines there: under --runtime local, pytest and its dependencies alone);
- the target runs in a child interpreter. This process hands it a one-off nonce through a pipe
  (not argv, not the environment) and the child writes ``nonce exit-code`` back through another
  when the runner has finished, before the interpreter's own shutdown. An exit without that mark
  (``os._exit(0)`` at import time, an ``exec``), a mark that disagrees with how the process
  ended (an ``atexit`` handler that ``os._exit``s), a ``SystemExit`` raised from a workspace file
  (``sys.exit(0)`` at import time in a script runner), and ``pytest.exit()`` or failures under an
  exit status 0 in a pytest run are failures, each with a ``[harness-guard]`` line on stderr that
  the harness reads as tampering (the episode scores 0 whatever the test script then does);
- ``harness_checks`` (checks.py, in ``lib/`` beside this file) is importable by the tests;
- no bytecode and no plugin metadata the workspace supplies are loaded (compiled files are
  read from and written to a private prefix, ``-X pycache_prefix``, and a sourceless ``.pyc`` in
  the workspace is not importable: a fix compiled and its source put back imports the source), and
  no pytest plugin from distribution metadata in the workspace (plugin auto-loading is off; the
  ``pytest11`` entry points of distributions outside the workspace are named with ``-p``, so the
  plugins the tests need still load);
- a target that is itself workspace code (``-m`` naming a workspace module, a script in the
  workspace) is the code under test, not a runner: it runs as plain ``python`` would run it (with
  the private bytecode prefix).

Residual risk, said plainly: the tested code runs inside the runner's process, so code written to
attack this harness specifically can still win: read the nonce and the mark's descriptor from the
interpreter's memory (``gc``, frames) and write a forged mark, patch pytest's reporting in memory,
or print fake results to a log that a log-graded task trusts. A compiled extension module
(``.so``) in the workspace is still imported: repositories build theirs in place. What this
stops is the generic tricks that end or redirect a test runner, and those that need a file
outside the workspace.
"""

import os
import signal
import sys

PREFIX = "[harness-guard]"
_HERE = os.path.dirname(os.path.abspath(__file__))
_CHILD = "--harness-guard-child"
_FLAGS = set("bBdEhiIOPqsSuvVx")  # CPython's options without an argument
_KEPT = set("bBdOquvW") | {"X"}  # passed on to the child; E I s S P are ours to set, i x dropped
_STDIN_NAMES = ("-",)
# Never created: bytecode is neither read from the workspace's __pycache__ nor written (-B).
_PYCACHE = os.path.join(_HERE, "no-bytecode")


def _say(message: str) -> None:
    sys.stderr.write(f"{PREFIX} {message}\n")
    sys.stderr.flush()


def _config() -> tuple[bool, list[str]]:
    """guard.conf: ``site 0|1`` (site-packages on the runner's path) and ``path DIR`` lines (put on
    it after them). Plain lines: this process starts fast, without json."""
    site, path = True, []
    try:
        with open(os.path.join(_HERE, "guard.conf"), encoding="utf-8") as fh:
            for line in fh:
                key, _, value = line.rstrip("\n").partition(" ")
                if key == "site":
                    site = value != "0"
                elif key == "path" and value:
                    path.append(value)
    except OSError:
        pass
    return site, path


def _workspace_dirs() -> list[str]:
    """The code under test: the current directory and $WORKSPACE (what ``python -m`` would put first)."""
    found: list[str] = []
    for d in (os.getcwd(), os.environ.get("WORKSPACE", "")):
        if d and os.path.isdir(d) and (real := os.path.realpath(d)) not in found:
            found.append(real)
    return found


def _in(path: str, dirs: list[str]) -> bool:
    real = os.path.realpath(path)
    return any(real == d or real.startswith(d.rstrip("/") + "/") for d in dirs)


def parse(argv: list[str]) -> tuple[list[str], str, str, list[str]]:
    """(options for the child, mode: m | c | stdin | script | info, target, args) of a python command line."""
    kept: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--version", "--help", "-h", "-V") or arg.startswith("--help-"):
            return kept, "info", arg, argv[i + 1 :]
        if arg == "--check-hash-based-pycs":
            kept += argv[i : i + 2]
            i += 2
            continue
        if arg == "--":
            i += 1
            break
        if arg in _STDIN_NAMES or not arg.startswith("-") or arg.startswith("--"):
            break
        j = 1
        while j < len(arg):  # combined flags: -Bu, -Wignore, -c'code'
            flag = arg[j]
            if flag in ("c", "m", "W", "X"):
                value = arg[j + 1 :]
                if not value:
                    i += 1
                    if i >= len(argv):
                        raise SystemExit(f"Argument expected for the -{flag} option")
                    value = argv[i]
                if flag in ("c", "m"):
                    return kept, flag, value, argv[i + 1 :]
                kept += [f"-{flag}", value]
                break
            if flag not in _FLAGS:
                raise SystemExit(f"Unknown option: -{flag}")
            if flag in _KEPT:
                kept.append(f"-{flag}")
            if flag in ("V", "h"):
                return kept, "info", f"-{flag}", []
            j += 1
        i += 1
    if i >= len(argv) or argv[i] in _STDIN_NAMES:
        return kept, "stdin", "-", argv[i + 1 :]
    return kept, "script", argv[i], argv[i + 1 :]


# Never the code under test, whatever the workspace holds: a test runner is run guarded.
_RUNNERS = {"pytest", "py", "_pytest", "unittest", "doctest", "nose", "nose2", "coverage", "hypothesis"}


def _workspace_module(name: str, dirs: list[str], site: bool, path: list[str]) -> bool:
    """Whether ``-m name`` names workspace code: its top-level package is found in the workspace
    and nowhere the runner looks first. Only the file system is searched: nothing is imported."""
    import site as site_module
    from importlib.machinery import PathFinder

    top = name.split(".")[0]
    if top in sys.builtin_module_names or top in _RUNNERS:
        return False
    outside = [p for p in sys.path if p] + (site_module.getsitepackages() if site else []) + path
    if PathFinder.find_spec(top, [p for p in outside if not _in(p, dirs)]) is not None:
        return False
    return PathFinder.find_spec(top, dirs) is not None


# ---- the parent: start the child, check its end-of-run mark --------------------------------------


def main(argv: list[str]) -> int:
    site, path = _config()
    kept, mode, target, args = parse(argv)
    exe = sys.executable
    dirs = _workspace_dirs()
    if mode == "info":
        os.execv(exe, [exe, target, *args])
    plain = (mode == "script" and _in(target, dirs)) or (
        mode == "m" and _workspace_module(target, dirs, site, path)
    )
    if plain:  # the code under test itself: run as python runs it, its exit status its own
        prefix = ["-X", f"pycache_prefix={_PYCACHE}"]
        os.execv(exe, [exe, "-s", *prefix, *kept, *(["-m"] if mode == "m" else []), target, *args])
    nonce = os.urandom(16).hex().encode()
    nonce_r, nonce_w = os.pipe()
    mark_r, mark_w = os.pipe()
    os.set_inheritable(nonce_r, True)  # the child's two ends; ours stay close-on-exec
    os.set_inheritable(mark_w, True)
    # -B: no bytecode written next to the tests (the harness checks them unchanged afterwards)
    cmd = [exe, "-I", "-B", "-X", f"pycache_prefix={_PYCACHE}", *([] if site else ["-S"]), *kept]
    cmd += [os.path.join(_HERE, "guard.py"), _CHILD]
    cmd += [str(nonce_r), str(mark_w), mode, target, *args]
    pid = os.posix_spawn(exe, cmd, os.environ)
    os.close(nonce_r)
    os.close(mark_w)
    os.write(nonce_w, nonce)
    os.close(nonce_w)

    def forward(signo: int, _frame: object) -> None:
        try:  # noqa: SIM105 (no contextlib import in this process)
            os.kill(pid, signo)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    rc = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    # The mark was written before the child ended; a process the tested code forked may hold the
    # pipe open, so read what is there without waiting for its end.
    os.set_blocking(mark_r, False)
    data = b""
    try:
        while chunk := os.read(mark_r, 65536):
            data += chunk
            if len(data) > 1 << 20:
                break
    except BlockingIOError:
        pass
    os.close(mark_r)
    return verdict(rc, _mark(data, nonce))


def _mark(data: bytes, nonce: bytes) -> int | None:
    for line in data.splitlines():
        head, _, code = line.partition(b" ")
        if head == nonce and code.lstrip(b"-").isdigit():
            return int(code)
    return None


def verdict(rc: int, mark: int | None) -> int:
    """This process's exit status from the child's (``rc``, negative: a signal) and its mark."""
    if rc < 0:
        return 128 - rc  # killed (a time limit): a failure, as the shell reports it
    if mark is None:
        if rc == 0:
            _say(
                "the tested code ended the test runner itself: the runner exited 0 without its "
                "end-of-run mark (os._exit, exec or a fork at import time)"
            )
            return 1
        return rc
    if mark & 0xFF != rc:
        if rc == 0:
            _say(
                f"the tested code changed the runner's exit status after it finished (the runner "
                f"said {mark}, the process ended with 0: an atexit handler?)"
            )
        return rc or 1
    return mark if 0 <= mark <= 255 else 1


# ---- the child: run the target, write the mark ----------------------------------------------------


def _tested_frame(tb: object, dirs: list[str]) -> str | None:
    """``file:line`` of the first workspace frame in a traceback, or None."""
    while tb is not None:
        code = tb.tb_frame.f_code  # type: ignore[attr-defined]
        if code.co_filename and not code.co_filename.startswith("<") and _in(code.co_filename, dirs):
            return f"{code.co_filename}:{tb.tb_lineno}"  # type: ignore[attr-defined]
        tb = tb.tb_next  # type: ignore[attr-defined]
    return None


class _PytestWatch:
    """A pytest plugin: ``pytest.exit()`` called from workspace code, and failures reported."""

    def __init__(self, dirs: list[str]) -> None:
        self.dirs = dirs
        self.exit_from: str | None = None
        self.failed = 0

    def pytest_keyboard_interrupt(self, excinfo: object) -> None:  # pytest.exit() comes here too
        where = _tested_frame(getattr(excinfo, "tb", None), self.dirs)
        if where is not None:
            self.exit_from = where

    def pytest_runtest_logreport(self, report: object) -> None:
        if getattr(report, "failed", False):
            self.failed += 1

    def pytest_collectreport(self, report: object) -> None:
        if getattr(report, "failed", False):
            self.failed += 1


def _no_workspace_bytecode(dirs: list[str]) -> None:
    """Import a workspace directory's modules from their source, never from a ``.pyc`` beside it
    (a sourceless module: the source a reviewer or a diff sees is all that runs)."""
    from importlib import machinery

    ext = (machinery.ExtensionFileLoader, machinery.EXTENSION_SUFFIXES)
    src = (machinery.SourceFileLoader, machinery.SOURCE_SUFFIXES)
    pyc = (machinery.SourcelessFileLoader, machinery.BYTECODE_SUFFIXES)
    anywhere = machinery.FileFinder.path_hook(ext, src, pyc)
    workspace = machinery.FileFinder.path_hook(ext, src)

    def hook(path: str):  # type: ignore[no-untyped-def]
        return (workspace if _in(path or os.getcwd(), dirs) else anywhere)(path)

    for i, found in enumerate(sys.path_hooks):
        if getattr(found, "__name__", "") == "path_hook_for_FileFinder":
            sys.path_hooks[i] = hook
    sys.path_importer_cache.clear()


def _trusted_plugins(dirs: list[str]) -> list[str]:
    """``-p`` options for the pytest plugins installed outside the workspace (auto-loading is off:
    a ``pytest11`` entry point in workspace metadata is never loaded)."""
    from importlib.metadata import distributions

    names: list[str] = []
    for dist in distributions(path=[p for p in sys.path if p and not _in(p, dirs)]):
        for ep in dist.entry_points:
            if ep.group == "pytest11" and ep.name not in names:
                names.append(ep.name)
    for dist in distributions(path=[p for p in sys.path if p and _in(p, dirs)]):
        for ep in dist.entry_points:
            if ep.group == "pytest11" and ep.name not in names:
                where = getattr(dist, "_path", None)  # a PathDistribution's metadata directory
                sys.stderr.write(
                    f"[harness] not loaded: the pytest plugin {ep.name} ({ep.value}) in the workspace's "
                    f"{os.path.basename(str(where)) if where else 'metadata'}: the tests' plugins come "
                    "from outside the workspace\n"
                )
    return [arg for name in names for arg in ("-p", name)]


def _exit_status(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")
    return 1


def _run_target(mode: str, target: str, args: list[str], dirs: list[str]) -> int:
    import runpy
    import types

    main_module = types.ModuleType("__main__")
    main_module.__dict__["__builtins__"] = __builtins__
    if mode == "m" and target in ("pytest", "py.test"):
        import pytest

        sys.argv = [os.path.join(os.path.dirname(pytest.__file__), "__main__.py"), *args]
        watch = _PytestWatch(dirs)
        os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        code = int(pytest.main([*_trusted_plugins(dirs), *args], plugins=[watch]))
        sys.stdout.flush()
        if watch.exit_from is not None and code == 0:
            _say(f"the tested code ended the test run with pytest.exit() at {watch.exit_from}")
            return 1
        if code == 0 and watch.failed:
            _say(f"pytest reported {watch.failed} failure(s) but exit status 0: the status was changed")
            return 1
        return code
    if mode == "m":
        sys.argv = [target, *args]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
        return 0
    if mode == "script":
        sys.argv = [target, *args]
        sys.path.insert(0, os.path.dirname(os.path.realpath(target)))  # as python does, for a runner
        runpy.run_path(target, run_name="__main__")
        return 0
    source = target if mode == "c" else sys.stdin.read()
    sys.argv = ["-c" if mode == "c" else "-", *args]
    sys.modules["__main__"] = main_module
    exec(compile(source, "<string>" if mode == "c" else "<stdin>", "exec"), main_module.__dict__)
    return 0


def child(argv: list[str]) -> None:
    nonce_fd, mark_fd = int(argv[0]), int(argv[1])
    mode, target, args = argv[2], argv[3], argv[4:]
    nonce = b""
    while len(nonce) < 32 and (chunk := os.read(nonce_fd, 64)):
        nonce += chunk
    os.close(nonce_fd)
    os.set_inheritable(mark_fd, False)  # never handed to what the tests start
    _site, extra = _config()
    dirs = _workspace_dirs()
    extra += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [p for p in sys.path if p and os.path.realpath(p) != _HERE]
    lib = os.path.join(_HERE, "lib")  # harness_checks, for the tests (checks.py)
    sys.path += [p for p in [lib, *extra, *dirs] if p not in sys.path]
    _no_workspace_bytecode(dirs)
    try:
        code = _run_target(mode, target, args, dirs)
    except SystemExit as exc:
        code = _exit_status(exc)
        where = _tested_frame(exc.__traceback__, dirs)
        if where is not None and code == 0:
            _say(f"the tested code ended the test runner itself: SystemExit({exc.code!r}) at {where}")
            code = 1
    except BaseException:  # as python reports an uncaught exception
        import traceback

        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 (contextlib: one import more for every run)
            stream.flush()
        except Exception:
            pass
    try:
        os.write(mark_fd, nonce + b" %d\n" % code)
        os.close(mark_fd)
    except OSError:
        pass  # the tested code closed it: no mark, a failure
    sys.exit(code)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == _CHILD:
        child(sys.argv[2:])
    else:
        sys.exit(main(sys.argv[1:]))
