"""The guarded runner (harness/tasks/guard.py) as a task's test script calls it: real processes,
the --runtime local installation (the harness's Python, pytest's files alone).

It must run honest tests exactly as ``python`` would (exit status, stdin, arguments, a workspace
CLI's own exit status) while the workspace never shadows the standard library or pytest and the
tested code cannot end the runner with a pass.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.tasks.fresh import GUARD_PREFIX, write_local_guard

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "tests").mkdir()
    write_local_guard(tmp_path / "guard", None)
    return tmp_path / "workspace"


def py(ws: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    guard_bin = ws.parent / "guard" / "bin"
    env = {**os.environ, "WORKSPACE": str(ws), "PATH": f"{guard_bin}:{os.environ['PATH']}"}
    return subprocess.run(
        [str(guard_bin / "python"), *args], cwd=ws, env=env, input=stdin, capture_output=True, text=True
    )


def test_honest_runs_keep_python_s_behaviour(ws: Path) -> None:
    (ws / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    done = py(ws, "-", "x", "y", stdin="import sys, calc\nprint(calc.add(2, 3), sys.argv)\n")
    assert (done.returncode, done.stdout) == (0, "5 ['-', 'x', 'y']\n"), done.stderr
    done = py(ws, "-Bc", "import sys, calc; print(calc.add(1, 1)); sys.exit(4)", "a")
    assert (done.returncode, done.stdout) == (4, "2\n")
    script = ws.parent / "tests" / "check.py"
    script.write_text("import sys, calc\nassert calc.add(2, 2) == 4\nprint(sys.argv[1:])\n")
    done = py(ws, "-W", "ignore", str(script), "--flag")
    assert (done.returncode, done.stdout) == (0, "['--flag']\n"), done.stderr
    # a workspace CLI is the code under test: its own exit status, whatever it is
    (ws / "mycli.py").write_text("import sys\nprint('cli', sys.argv[1:])\nsys.exit(int(sys.argv[1]))\n")
    for code in (0, 3):
        done = py(ws, "-m", "mycli", str(code))
        assert (done.returncode, done.stdout) == (code, f"cli ['{code}']\n")
        assert GUARD_PREFIX not in done.stderr
    # python3 and pytest on PATH are the guard too
    (ws.parent / "tests" / "test_calc.py").write_text(
        "import calc\n\ndef test_add():\n    assert calc.add(2, 3) == 5\n"
    )
    done = subprocess.run(
        ["pytest", "-q", "-p", "no:cacheprovider", str(ws.parent / "tests")],
        cwd=ws,
        env={
            **os.environ,
            "WORKSPACE": str(ws),
            "PATH": f"{ws.parent / 'guard' / 'bin'}:{os.environ['PATH']}",
        },
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr


def test_the_workspace_never_shadows_the_standard_library_or_pytest(ws: Path) -> None:
    for name in ("json", "pytest", "sitecustomize", "usercustomize"):
        (ws / f"{name}.py").write_text("import os\nos._exit(0)\n")
    (ws / "zz.pth").write_text("import os; os._exit(0)\n")
    done = py(ws, "-c", "import json; print(json.dumps([1]))")
    assert (done.returncode, done.stdout) == (0, "[1]\n"), done.stderr
    (ws.parent / "tests" / "test_fails.py").write_text("def test_no():\n    assert False\n")
    done = py(ws, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ws.parent / "tests"))
    assert done.returncode == 1 and "1 failed" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("calc", "says"),
    [
        ("import os\nos._exit(0)\n", "without its end-of-run mark"),
        ("import sys\nsys.exit(0)\n", "SystemExit(0) at"),
        ("import atexit, os\natexit.register(lambda: os._exit(0))\n", "changed the runner's exit status"),
        ("import os, sys\nos.execv('/bin/true', ['true'])\n", "without its end-of-run mark"),
        ("import os\nif os.fork():\n    os._exit(0)\n", "the tested code"),  # the fork may write a mark
    ],
)
def test_the_tested_code_cannot_end_the_runner_with_a_pass(ws: Path, calc: str, says: str) -> None:
    (ws / "calc.py").write_text(calc + "def add(a, b):\n    return a - b\n")
    done = py(ws, "-", stdin="import calc\nassert calc.add(2, 3) == 5\n")
    assert (
        done.returncode != 0 and f"{GUARD_PREFIX} the tested code" in done.stderr and says in done.stderr
    ), (
        done.returncode,
        done.stderr,
    )


def test_an_exit_status_python_would_wrap_to_zero_is_a_failure(ws: Path) -> None:
    assert py(ws, "-c", "import sys; sys.exit(256)").returncode != 0
    assert py(ws, "-c", "import sys; sys.exit(-256)").returncode != 0


def test_a_stop_signal_reaches_the_tests(ws: Path) -> None:
    guard_bin = ws.parent / "guard" / "bin"
    done = subprocess.run(
        ["timeout", "1", str(guard_bin / "python"), "-c", "import time; time.sleep(30)"],
        cwd=ws,
        capture_output=True,
        timeout=20,
    )
    assert done.returncode == 124


PASS_EVERY_FAILURE = (
    "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n    report = outcome.get_result()\n    if report.failed:\n"
    "        report.outcome = 'passed'\n        report.longrepr = None\n"
)


def dist_info(where: Path, name: str, module: str) -> None:
    """A distribution ``name`` whose pytest11 entry point is the module ``name`` (``module``'s code)."""
    meta = where / f"{name}-0.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0\n")
    (meta / "entry_points.txt").write_text(f"[pytest11]\n{name} = {name}\n")
    (where / f"{name}.py").write_text(module)


def test_a_pytest_plugin_in_the_workspace_never_loads_and_one_installed_elsewhere_does(ws: Path) -> None:
    dist_info(ws, "forgeplug", PASS_EVERY_FAILURE)
    installed = ws.parent / "site"
    dist_info(installed, "okplug", "def pytest_report_header(config):\n    return 'okplug loaded'\n")
    (ws.parent / "tests" / "test_fails.py").write_text("def test_no():\n    assert False\n")
    guard_bin = ws.parent / "guard" / "bin"
    done = subprocess.run(
        [str(guard_bin / "python"), "-m", "pytest", "-p", "no:cacheprovider", str(ws.parent / "tests")],
        cwd=ws,
        env={**os.environ, "WORKSPACE": str(ws), "PYTHONPATH": str(installed)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "1 failed" in done.stdout, done.stdout + done.stderr
    assert "okplug loaded" in done.stdout, done.stdout
    assert "not loaded: the pytest plugin forgeplug (forgeplug) in the workspace's forgeplug-0.dist-info" in (
        done.stderr
    )


def test_bytecode_in_the_workspace_never_runs(ws: Path) -> None:
    """A fix compiled and its buggy source put back (same size and mtime), then a module that is
    bytecode alone: the tests import the source, and nothing where there is none."""
    calc = ws / "calc.py"
    calc.write_text("def add(a, b):\n    return a - b\n")
    stat = calc.stat()
    calc.write_text("def add(a, b):\n    return a + b\n")
    os.utime(calc, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    # the guard's interpreter (the harness's, under --runtime local) is the one whose bytecode counts
    subprocess.run(
        [sys.executable, "-c", "import py_compile; py_compile.compile('calc.py')"], cwd=ws, check=True
    )
    calc.write_text("def add(a, b):\n    return a - b\n")
    os.utime(calc, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert list((ws / "__pycache__").iterdir())
    done = py(ws, "-c", "import calc; print(calc.add(2, 3))")
    assert (done.returncode, done.stdout) == (0, "-1\n"), done.stderr
    (ws / "__pycache__").rename(ws / "cache")
    pyc = next((ws / "cache").iterdir())
    pyc.rename(ws / "fixed.pyc")
    done = py(ws, "-c", "import fixed")
    assert done.returncode == 1 and "No module named 'fixed'" in done.stderr, done.stderr


def test_the_tests_import_harness_checks_from_the_runner_not_the_workspace(ws: Path) -> None:
    (ws / "harness_checks.py").write_text("def plain(value):\n    return value\n")
    done = py(ws, "-c", "import harness_checks; harness_checks.plain(type('F', (float,), {})(1))")
    assert done.returncode == 1 and "not a built-in value" in done.stderr, done.stderr
