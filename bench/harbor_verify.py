"""Benchmark: `harness tasks verify --runtime docker` on 20 Harbor fixtures with cached images.

The fixtures are Terminal-Bench 2 shaped (WORKDIR /app, RUN steps that create the task's files,
a solve.sh, a test.sh that runs Python and writes /logs/verifier/reward.txt), built FROM the
harness sandbox image (no registry needed).

1. Image cache: a first verification builds what is missing; the next one must build nothing
   (every image id unchanged, no new image) and its image step must take well under a second per task.
2. Parallel verifications: wall time of the whole `tasks verify` at --concurrency 1 and 4,
   medians of --rounds runs each (alternated, so drift on a shared machine hits both).
   Target: 1 / 4 speed-up >= 3. Printed beside it: the CPU the whole machine spent on them, and
   the speed-up that leaves possible on its cores (concurrency 4 cannot beat busy CPU / cores).

usage: .venv/bin/python bench/harbor_verify.py [--rounds N] [--tasks N]
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from harness.runtime.engine import docker_client
from harness.runtime.images import ensure_sandbox_image
from harness.tasks.oracle import verify_suite


def make_tasks(root: Path, base: str, n: int) -> Path:
    suite = root / "bench-harbor"
    for i in range(n):
        d = suite / f"bench-hv-{i:02d}"
        (d / "environment").mkdir(parents=True)
        (d / "solution").mkdir()
        (d / "tests").mkdir()
        (d / "instruction.md").write_text(
            f"Write the sum of the numbers in /app/data.txt to /app/sum.txt (task {i}).\n"
        )
        (d / "task.toml").write_text(
            'version = "1.0"\n[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 60.0\n'
        )
        numbers = " ".join(str(i * 7 + k) for k in range(5))
        (d / "environment" / "Dockerfile").write_text(
            f"FROM {base}\nWORKDIR /app\nRUN for n in {numbers}; do echo $n >> /app/data.txt; done\n"
        )
        (d / "solution" / "solve.sh").write_text(
            "#!/usr/bin/env bash\nawk '{s += $1} END {print s}' data.txt > sum.txt\n"
        )
        (d / "tests" / "test.sh").write_text(
            "#!/usr/bin/env bash\n"
            "python3 - <<'EOF'\n"
            "from pathlib import Path\n"
            "want = sum(int(x) for x in Path('/app/data.txt').read_text().split())\n"
            "got = Path('/app/sum.txt').read_text().strip() if Path('/app/sum.txt').exists() else ''\n"
            "Path('/logs/verifier/reward.txt').write_text('1' if got == str(want) else '0')\n"
            "EOF\n"
        )
    return suite


def task_images(client) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The bench's task images: tag -> image id."""
    return {
        tag: img.id
        for img in client.images.list()
        for tag in img.tags
        if tag.startswith("localhost/harness-task-bench-hv-")
    }


def busy_cpu_s() -> float:
    """CPU seconds this whole machine has spent busy so far (every process: the engine's work, the
    containers', the harness's), from /proc/stat; 0 where there is none."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


CPU: dict[int, list[float]] = {1: [], 4: []}


def run(suite: Path, concurrency: int) -> float:
    cpu0 = busy_cpu_s()
    report = verify_suite(str(suite), runtime="docker", concurrency=concurrency)
    CPU.setdefault(concurrency, []).append(busy_cpu_s() - cpu0)
    bad = [c for c in report.checks if c.status != "valid"]
    if bad:
        raise SystemExit(f"bench: {bad[0].task_id} is not valid: {bad[0].detail}")
    return report.wall_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=20)
    args = ap.parse_args()
    client = docker_client()
    base = ensure_sandbox_image(client)
    with tempfile.TemporaryDirectory(prefix="bench-harbor-") as tmp:
        suite = make_tasks(Path(tmp), base, args.tasks)
        before = task_images(client)
        t0 = time.perf_counter()
        first = run(suite, 4)
        built = {t for t, i in task_images(client).items() if before.get(t) != i}
        print(
            f"first run: {first:.1f} s ({len(built)} of {args.tasks} images built, {time.perf_counter() - t0:.1f} s)"
        )
        cached = task_images(client)
        from harness.runtime.task_images import resolve_task_images
        from harness.tasks import load_tasks

        tasks = load_tasks(str(suite), images=True)
        t0 = time.perf_counter()
        refs = resolve_task_images(client, tasks)
        step = time.perf_counter() - t0
        second = run(suite, 4)
        rebuilt = {t for t, i in task_images(client).items() if cached.get(t) != i}
        hit = not rebuilt and all(isinstance(r, str) and cached.get(r) for r in refs.values())
        print(
            f"image cache: second run rebuilt {len(rebuilt)} images; all {len(refs)} tasks on cached images: "
            f"{'yes' if hit else 'NO'}; image step {step:.2f} s for {len(refs)} tasks; verify {second:.1f} s"
        )
        walls: dict[int, list[float]] = {1: [], 4: []}
        CPU[1].clear()
        CPU[4].clear()
        for r in range(args.rounds):
            for k in (1, 4) if r % 2 == 0 else (4, 1):
                walls[k].append(run(suite, k))
                print(f"  round {r + 1}: concurrency {k}: {walls[k][-1]:.1f} s", flush=True)
        m1, m4 = statistics.median(walls[1]), statistics.median(walls[4])
        print(
            f"tasks verify, {args.tasks} Harbor tasks, cached images, medians of {args.rounds}: "
            f"concurrency 1 {m1:.1f} s, concurrency 4 {m4:.1f} s, speed-up {m1 / m4:.2f}x (target >= 3)"
        )
        cores = os.cpu_count() or 1
        c4 = statistics.median(CPU[4])
        if c4 > 0:
            print(
                f"  the machine's busy CPU for the {args.tasks} tasks: concurrency 1 {statistics.median(CPU[1]):.1f} s, "
                f"concurrency 4 {c4:.1f} s; on {cores} cores concurrency 4 cannot take less than {c4 / cores:.1f} s, "
                f"so the speed-up here is at most {m1 / (c4 / cores):.2f}x (load average "
                + ", ".join(f"{x:.1f}" for x in os.getloadavg())
                + ")"
            )


if __name__ == "__main__":
    main()
