"""Commands whose output the engine's exec stream lost, and what an exec costs, with and without the
harness's handshake (harness/runtime/container_exec.py).

Three threads each run short commands in a container of their own (what concurrent episodes do)
while two other processes keep the cores busy; each command prints a line only it prints. "plain"
is an exec as docker-py makes it (create, start with the stream attached, inspect); "handshake" is
``exec_capped``. Printed per round: execs, outputs lost (empty where the line was printed), and
milliseconds an exec (wall time over all threads).

    .venv/bin/python bench/container_exec.py [--execs 80] [--rounds 2] [--busy 2]
"""

import argparse
import multiprocessing
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.runtime.container_exec import exec_capped
from harness.runtime.engine import docker_client
from harness.runtime.images import ensure_sandbox_image


def busy() -> None:
    while True:
        sum(range(10_000))


def plain(container: Any, cmd: list[str]) -> bytes:
    api = container.client.api
    exec_id = api.exec_create(container.id, cmd, user="1000", workdir="/")["Id"]
    out = b"".join(o or b"" for o, _ in api.exec_start(exec_id, stream=True, demux=True))
    api.exec_inspect(exec_id)
    return out


def handshake(container: Any, cmd: list[str]) -> bytes:
    return exec_capped(container, cmd, user="1000", workdir="/", env={})[1]


def one_round(containers: list[Any], run: Callable[[Any, list[str]], bytes], execs: int) -> tuple[int, float]:
    lost: list[int] = []

    def work(k: int) -> None:
        for i in range(execs):
            line = f"line-{k}-{i}"
            if line.encode() not in run(containers[k], ["bash", "-c", f"ls -A /tmp | wc -l; echo {line}"]):
                lost.append(i)

    start = time.monotonic()
    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(containers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(lost), (time.monotonic() - start) / (execs * len(containers)) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--execs", type=int, default=80, help="commands per thread and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--busy", type=int, default=2, help="processes keeping a core busy")
    args = parser.parse_args()
    client = docker_client()
    image = ensure_sandbox_image(client)
    containers = [
        client.containers.run(image, ["sleep", "3600"], detach=True, network_mode="none") for _ in range(3)
    ]
    burners = [multiprocessing.Process(target=busy, daemon=True) for _ in range(args.busy)]
    for b in burners:
        b.start()
    try:
        print(f"{'exec':<10} {'execs':>6} {'lost':>5} {'ms/exec':>8}")
        for _ in range(args.rounds):
            for name, run in (("plain", plain), ("handshake", handshake)):
                lost, ms = one_round(containers, run, args.execs)
                print(f"{name:<10} {args.execs * len(containers):>6} {lost:>5} {ms:>8.0f}")
    finally:
        for b in burners:
            b.kill()
        for c in containers:
            c.remove(force=True)


if __name__ == "__main__":
    main()
