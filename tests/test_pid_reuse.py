"""A kill by a session's or group's number never reaches a process that took the number later.

pid_max is 32,768 here and the suite goes round it in minutes: the harness killed an agent's shell
session, a test script's or the vLLM server's process group by its leader's number after the
leader was reaped, and a new session or group that had the number by then (a container build's
RUN step, seen as "signal: killed") went with it. Each case below makes the reuse happen for real:
in a PID namespace of the test's own, ``ns_last_pid`` hands the old leader's number to the next
process, which leads a session (or group) of its own.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO

SCRIPT = r"""
import json, os, subprocess, sys, time
from pathlib import Path
from harness.leader import Leader
from harness.runtime.procs import kill_session
from harness.server.config import ServerConfig
from harness.server.process import VLLMServer

TICK = os.sysconf("SC_CLK_TCK")

def ticks():
    return float(Path("/proc/uptime").read_text().split()[0]) * TICK

def reaped_then_reused(leader_argv):
    '''A session leader, seen, then killed and reaped; the next process (a session leader too) gets
    its number, started on a later clock tick (a number wraps round in minutes, never in one tick).'''
    old = subprocess.Popen(leader_argv, start_new_session=True)
    lead = Leader.of(old.pid)
    old.kill()
    old.wait()
    while ticks() < lead.started + 2:
        time.sleep(0.005)
    Path("/proc/sys/kernel/ns_last_pid").write_text(str(old.pid - 1))
    new = subprocess.Popen(["sleep", "300"], start_new_session=True)
    assert new.pid == old.pid, (new.pid, old.pid)
    return old, lead, new

out = {}
# 1. a local shell's session: its number taken by a new session leader
old, lead, new = reaped_then_reused(["sleep", "300"])
out["killed"] = kill_session(lead)
out["new_session_alive"] = new.poll() is None
new.kill(); new.wait()

# 2. what the shell left running holds the number: killed by it
shell = subprocess.Popen(["sh", "-c", "sleep 300 & echo $!"], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
lead = Leader.of(shell.pid)
child = int(shell.stdout.readline())
shell.wait()
out["member_killed"] = kill_session(lead)

def alive(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

deadline = time.monotonic() + 10  # SIGKILL takes effect at once, the state shows it a moment later
while alive(child) and time.monotonic() < deadline:
    time.sleep(0.01)
out["member_alive"] = alive(child)

# 3. the vLLM server's process group, stopped after its API process was reaped
server = VLLMServer(ServerConfig(model="smollm2-135m"), run_dir=Path("/tmp/unused"))
old, lead, new = reaped_then_reused(["sleep", "300"])
server._proc, server._leader = old, lead
server._terminate(grace=0.1)
out["new_group_alive"] = new.poll() is None
new.kill(); new.wait()
print(json.dumps(out))
"""


def _own_pid_namespace() -> list[str]:
    """unshare into a PID namespace where this test may set the next pid (CAP_SYS_ADMIN there)."""
    unshare = shutil.which("unshare")
    assert unshare, "util-linux's unshare is missing"
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return [unshare, *user, "--pid", "--fork", "--mount-proc"]


def test_a_kill_by_a_reaped_leader_s_number_spares_the_process_that_took_it() -> None:
    done = subprocess.run(
        [*_own_pid_namespace(), sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    if done.returncode != 0 and "ns_last_pid" in done.stderr and "ermission" in done.stderr:
        pytest.fail(f"this machine lets no test set the next pid: {done.stderr[-500:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["new_session_alive"] and out["killed"] == 0, out  # another's session: untouched
    assert out["member_killed"] >= 1 and not out["member_alive"], out  # its own leftovers: ended
    assert out["new_group_alive"], out  # the vLLM server's stop spared the group that took its number
