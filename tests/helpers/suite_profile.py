"""Where the suite's time goes: each test's wall time with the real components it started.

A pytest plugin (tests/conftest.py loads it), off unless asked for (it samples the process table
from a thread, which costs a little CPU): ``HARNESS_SUITE_PROFILE=PATH pytest ...`` (an environment
variable, not a flag: the suite runs pytest itself in task directories, where a flag of ours would be
unknown). For each test it writes one JSON line to PATH (node id, file, seconds for setup + call +
teardown, outcome, its wall-clock start and end and its xdist worker, and the processes first seen while it ran, counted by kind) and prints two tables at the end: seconds by file and by
component. A test's component is the most expensive kind it started (vLLM > Ray > container > SSH >
browser > CLI subprocess > other subprocess > none); the seconds it spent in ``time.sleep`` on its
own thread are counted too (polling loops included: the waiting a test does on its own).

A test is charged only with its own worker's descendants (a container's conmon, the engine's
child, is charged to whichever test runs when it appears: under ``-n 2`` the other worker's
containers may be counted too). Processes are seen by sampling, every 0.2 s, so one that lives
shorter than that may be missed: a CLI run (an interpreter start and the imports) lives longer, a
container's conmon lives as long as the container.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import psutil
import pytest

KINDS = ("vllm", "ray", "container", "ssh", "browser", "cli", "subprocess", "none")


def kind_of(name: str, cmdline: list[str]) -> str | None:
    """The component a new process belongs to, or None for one that is not worth counting (a shell
    or a tool the harness calls, counted as 'subprocess' only when it is the test's own child)."""
    cmd = " ".join(cmdline)
    if "vllm.entrypoints" in cmd or name.startswith("VLLM::") or cmd.startswith("VLLM::"):
        return "vllm"
    if name in ("raylet", "gcs_server") or "ray/_private" in cmd or "ray::" in name or "ray::" in cmd:
        return "ray"
    if name == "conmon":
        return "container"
    if name in ("sshd", "ssh"):
        return "ssh"
    if "chrom" in name:
        return "browser"
    if "harness.cli" in cmd or (len(cmdline) > 1 and cmdline[1].endswith("/harness")):
        return "cli"
    return None


class Sampler:
    """Every new process system-wide, by kind, attributed to the test running when it appeared."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.current: Counter[str] | None = None
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.me = psutil.Process()
        self.pids: set[int] = set()
        self._scan(count=False)
        self.thread = threading.Thread(target=self._loop, name="suite-profile", daemon=True)
        self.thread.start()

    def _scan(self, count: bool = True) -> None:
        # Only the processes new since the last scan are read (a full read of every process's
        # command line five times a second cost a tenth of a core, on a box the suite saturates).
        # A pid absent from the last scan is a new process (one that reused a pid between two scans
        # 0.2 s apart is missed, as one that lived shorter is).
        pids = set(psutil.pids())
        new, self.pids = pids - self.pids, pids
        if not count:
            return
        for pid in new:
            try:
                proc = psutil.Process(pid)
                kind = kind_of(proc.name(), proc.cmdline())
                mine = self._descends(proc)
            except psutil.Error:  # gone already
                continue
            if kind is None and mine:
                kind = "subprocess"
            # Under pytest-xdist the other worker's processes appear too: only this worker's own
            # descendants count, except a container's conmon (the engine's child, never ours).
            if kind not in (None, "container") and not mine:
                kind = None
            if kind is not None:
                with self.lock:
                    if self.current is not None:
                        self.current[kind] += 1

    def _descends(self, proc: psutil.Process) -> bool:
        while (ppid := proc.ppid()) > 1:
            if ppid == self.me.pid:
                return True
            proc = psutil.Process(ppid)
        return False

    def _loop(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                self._scan()
            except (psutil.Error, OSError):  # a process went away mid-scan: the next one sees the rest
                continue

    def begin(self) -> None:
        with self.lock:
            self.current = Counter()

    def end(self) -> Counter[str]:
        self._scan()  # what started just before the end
        with self.lock:
            got, self.current = self.current or Counter(), None
        return got


class SuiteProfile:
    def __init__(self, path: Path, *, worker: bool) -> None:
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not worker:  # pytest-xdist's workers append to the file their controller started
            self.path.write_text("")
        self.sampler = Sampler()
        self.rows: list[dict[str, Any]] = []
        self.slept = 0.0
        self.main = threading.get_ident()
        real_sleep = time.sleep

        def counting_sleep(seconds: float) -> None:
            if threading.get_ident() == self.main:
                self.slept += max(0.0, seconds)
            real_sleep(seconds)

        time.sleep = counting_sleep  # type: ignore[assignment]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        self.sampler.begin()
        self.slept = 0.0
        t0, wall0 = time.monotonic(), time.time()
        outcome = {"value": "passed"}
        item.stash[_OUTCOME] = outcome
        yield
        seconds = time.monotonic() - t0
        started = self.sampler.end()
        kind = next((k for k in KINDS if started.get(k)), "none")
        row = {
            "nodeid": item.nodeid,
            "file": item.nodeid.split("::")[0],
            "seconds": round(seconds, 3),
            "outcome": outcome["value"],
            "component": kind,
            "started": dict(started),
            "slept_s": round(self.slept, 3),
            "markers": sorted({m.name for m in item.iter_markers()} - {"timeout", "parametrize"}),
            # wall clock and worker: a failure lined up with what the other worker ran meanwhile
            "start": round(wall0, 2),
            "end": round(time.time(), 2),
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
        }
        self.rows.append(row)
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = (yield).get_result()
        outcome = item.stash.get(_OUTCOME, None)
        if outcome is not None and report.outcome != "passed" and outcome["value"] == "passed":
            outcome["value"] = report.outcome

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        self.sampler.stop.set()
        tr = terminalreporter
        if not self.rows:  # the controller of pytest-xdist's workers: the rows they wrote
            self.rows = [json.loads(line) for line in self.path.read_text().splitlines() if line]
        by_file: dict[str, list[float]] = defaultdict(list)
        by_kind: dict[str, list[float]] = defaultdict(list)
        for row in self.rows:
            by_file[row["file"]].append(row["seconds"])
            by_kind[row["component"]].append(row["seconds"])
        total = sum(r["seconds"] for r in self.rows) or 1.0
        tr.write_sep("=", f"suite profile ({self.path})")
        tr.write_line(f"{'component':<12} {'tests':>6} {'seconds':>9} {'share':>6}")
        for kind in KINDS:
            if kind in by_kind:
                s = sum(by_kind[kind])
                tr.write_line(f"{kind:<12} {len(by_kind[kind]):>6} {s:>9.1f} {s / total:>6.1%}")
        tr.write_line(f"{'slept':<12} {'':>6} {sum(r['slept_s'] for r in self.rows):>9.1f}")
        tr.write_line("")
        tr.write_line(f"{'file':<48} {'tests':>6} {'seconds':>9}")
        for name, secs in sorted(by_file.items(), key=lambda kv: -sum(kv[1])):
            tr.write_line(f"{name:<48} {len(secs):>6} {sum(secs):>9.1f}")


_OUTCOME = pytest.StashKey[dict[str, str]]()


def pytest_configure(config: pytest.Config) -> None:
    if path := os.environ.get("HARNESS_SUITE_PROFILE"):
        worker = hasattr(config, "workerinput")
        config.pluginmanager.register(SuiteProfile(Path(path), worker=worker), "suite-profile")
