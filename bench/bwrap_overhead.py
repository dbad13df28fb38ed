"""bwrap against local (target: at most 1.1x) and against docker: a sandbox's start and a command's cost.

- start: ``runtime.open`` of a smoke task's sandbox until its first command has run;
- exec: one short command (``true``) through ``sandbox.exec``, as mini-swe-agent runs every action;
- shell: one command through a persistent shell at its prompt (OpenHands' terminal, which starts
  once per episode under the sandbox's prefix), the per-turn cost of an OpenHands episode.

    .venv/bin/python bench/bwrap_overhead.py [--repeat 30] [--no-docker]

Medians, milliseconds.
"""

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.runtime.base import SandboxConfig
from harness.runtime.select import make_runtime
from harness.tasks.loader import load_suite


def _ms(xs: list[float]) -> float:
    return 1000 * statistics.median(xs)


def measure(name: str, repeat: int) -> dict[str, float]:
    runtime = make_runtime(name, SandboxConfig())
    task = next(t for t in load_suite("smoke", images=runtime.images).tasks if t.id == "fix-add")
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        runtime.prepare(Path(tmp), [task])
        starts, execs = [], []
        for i in range(max(3, repeat // 5)):
            t0 = time.perf_counter()
            sandbox = runtime.open(task, Path(tmp) / f"e{i}", f"bench-{i}")
            sandbox.exec("true", cwd=sandbox.workdir)
            starts.append(time.perf_counter() - t0)
            if i == 0:
                for _ in range(repeat):
                    t1 = time.perf_counter()
                    sandbox.exec("true", cwd=sandbox.workdir)
                    execs.append(time.perf_counter() - t1)
                out["shell"] = _shell(sandbox, repeat) if name != "docker" else float("nan")
            sandbox.close()
        runtime.cool_down()
    out["start"], out["exec"] = _ms(starts), _ms(execs)
    return out


def _shell(sandbox: object, repeat: int) -> float:
    """A persistent shell's round trip at its prompt, started as the OpenHands runner starts it."""
    import harness.episodes.openhands._sdk_env  # noqa: F401
    from harness.episodes.openhands.ready_terminal import ReadyTerminal
    from harness.runtime.procs import own_pid_namespace

    work = Path(sandbox.workdir)  # type: ignore[attr-defined]
    shell = work.parent / "shell"
    shell.mkdir(exist_ok=True)
    prefix = sandbox.helper_prefix([shell]) if hasattr(sandbox, "helper_prefix") else own_pid_namespace()
    term = ReadyTerminal(str(work), str(shell / "bash_history"), tuple(prefix))
    threading.Thread(target=term.initialize).start()
    term._ready.wait(60)
    times = []
    for i in range(repeat):
        t0 = time.perf_counter()
        term.send_keys(f"echo mark{i}")
        while f"mark{i}\n" not in term.read_screen().replace("\r", ""):
            time.sleep(0.001)
        times.append(time.perf_counter() - t0)
    term.close()
    return _ms(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--no-docker", action="store_true")
    args = ap.parse_args()
    names = ["local", "bwrap"] + ([] if args.no_docker else ["docker"])
    found = {n: measure(n, args.repeat) for n in names}
    for n, m in found.items():
        print(
            f"{n:6s}: start {m['start']:.0f} ms, exec {m['exec']:.1f} ms, shell command {m['shell']:.1f} ms"
        )
    local, bwrap = found["local"], found["bwrap"]
    print(
        f"bwrap / local: start {bwrap['start'] / local['start']:.2f}x, exec {bwrap['exec'] / local['exec']:.2f}x, "
        f"shell command {bwrap['shell'] / local['shell']:.2f}x (target <= 1.1x)"
    )
    if "docker" in found:
        d = found["docker"]
        print(
            f"bwrap / docker: start {bwrap['start'] / d['start']:.2f}x, exec {bwrap['exec'] / d['exec']:.2f}x"
        )


if __name__ == "__main__":
    main()
