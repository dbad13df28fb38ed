"""Benchmark: `harness tasks verify --runtime docker` on 20 Harbor tasks whose images are pulled
from a registry (the tests' Debian docker-registry on 127.0.0.1, scripts/test-registry).

Each task names its own prebuilt `docker_image` (as every Terminal-Bench 2 task does): a small
static busybox + bash root filesystem plus a layer of --payload-mb incompressible bytes, so every
image is distinct and its pull moves real data. They are pushed, then removed from the engine.

1. Cold: no image in the engine; `tasks verify` pulls all 20 (one line each), then verifies.
2. Warm: the same run again, every image cached: nothing pulled.

Printed for each: time to the first verified task and to the last (wall time of the whole
`tasks verify`), and the bytes the registry sent (its access log: the bytes of every blob GET),
per image and in all. Target: each image's bytes pulled once (cold), none warm.

usage: PYTHONPATH=. .venv/bin/python bench/registry_pull.py [--tasks N] [--payload-mb M] [--concurrency K]
"""

import argparse
import os
import re
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

from harness.runtime.engine import docker_client
from harness.runtime.images import ensure_sandbox_image
from harness.tasks.oracle import TaskCheck, verify_suite
from tests.helpers.registry import forget, import_image, push, registry_address, registry_log

_GET = re.compile(r'"GET /v2/(\S+)/blobs/(sha256:[0-9a-f]{64}) HTTP/[\d.]+" 200 (\d+)')


def make_suite(root: Path, refs: list[str]) -> Path:
    suite = root / "bench-registry"
    for i, ref in enumerate(refs):
        d = suite / f"pulled-{i:02d}"
        (d / "solution").mkdir(parents=True)
        (d / "tests").mkdir()
        (d / "instruction.md").write_text(
            f"Write the sum of the numbers in /app/data.txt to /app/sum.txt ({i}).\n"
        )
        (d / "task.toml").write_text(
            f'version = "1.0"\n[environment]\ndocker_image = "{ref}"\ncpus = 1\nmemory_mb = 256\n'
            "[verifier]\ntimeout_sec = 60.0\n"
        )
        (d / "solution" / "solve.sh").write_text(
            "#!/bin/bash\nawk '{s += $1} END {print s}' data.txt > sum.txt\n"
        )
        (d / "tests" / "test.sh").write_text(
            "#!/bin/bash\n"
            "want=$(awk '{s += $1} END {print s}' /app/data.txt)\n"
            'if [ "$(cat /app/sum.txt 2>/dev/null)" = "$want" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'
        )
    return suite


def publish_images(client, registry: str, n: int, payload_mb: int) -> list[str]:  # type: ignore[no-untyped-def]
    run = uuid.uuid4().hex[:8]
    refs = []
    for i in range(n):
        ref = f"{registry}/harness-bench/task-{i:02d}:{run}"
        numbers = "".join(f"{i * 7 + k}\n" for k in range(5))
        image = import_image(
            client,
            ref,
            {"app/data.txt": numbers, "opt/payload.bin": os.urandom(payload_mb << 20)},
            workdir="/app",
        )
        push(client, ref)
        forget(client, image)
        refs.append(ref)
    return refs


def pulled_bytes(log: Path, offset: int) -> tuple[Counter[str], Counter[str]]:
    """Bytes sent per repository, and GETs per blob, since ``offset`` in the registry's log."""
    per_repo: Counter[str] = Counter()
    per_blob: Counter[str] = Counter()
    with open(log, errors="replace") as fh:
        fh.seek(offset)
        for line in fh:
            if m := _GET.search(line):
                per_repo[m.group(1)] += int(m.group(3))
                per_blob[m.group(2)] += 1
    return per_repo, per_blob


def verify(suite: Path, concurrency: int) -> tuple[float, float, list[TaskCheck]]:
    done: list[float] = []
    start = time.monotonic()
    report = verify_suite(
        str(suite), runtime="docker", concurrency=concurrency, on_done=lambda c: done.append(time.monotonic())
    )
    bad = [c for c in report.checks if c.status != "valid"]
    if bad:
        raise SystemExit(f"bench: {bad[0].task_id} is not valid: {bad[0].detail}")
    return min(done) - start, time.monotonic() - start, report.checks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("--payload-mb", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=4)
    args = ap.parse_args()
    client = docker_client()
    ensure_sandbox_image(client)
    registry = registry_address()
    log = registry_log()
    t0 = time.perf_counter()
    refs = publish_images(client, registry, args.tasks, args.payload_mb)
    print(
        f"pushed {len(refs)} images of ~{args.payload_mb + 4} MB each to {registry} ({time.perf_counter() - t0:.1f} s)"
    )
    try:
        with tempfile.TemporaryDirectory(prefix="bench-registry-") as tmp:
            suite = make_suite(Path(tmp), refs)
            for phase in ("cold", "warm"):
                offset = log.stat().st_size
                first, total, _ = verify(suite, args.concurrency)
                per_repo, per_blob = pulled_bytes(log, offset)
                ours = {r: b for r, b in per_repo.items() if r.startswith("harness-bench/")}
                sizes = sorted(ours.values())
                twice = sum(1 for n in per_blob.values() if n > 1)
                each = f", per image {sizes[0] / 1e6:.1f} to {sizes[-1] / 1e6:.1f} MB" if sizes else ""
                print(
                    f"{phase}: first verified task after {first:.1f} s, all {len(refs)} after {total:.1f} s "
                    f"(--concurrency {args.concurrency}); pulled {sum(ours.values()) / 1e6:.1f} MB from "
                    f"{len(ours)} images{each}; blobs fetched more than once: {twice}"
                )
    finally:
        for ref in refs:
            forget(client, ref)


if __name__ == "__main__":
    main()
