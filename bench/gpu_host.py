"""--gpu-host against a local server: ready time (target: at most 1.1x) and per-request latency
through the SSH tunnel (target: at most +5%).

The "GPU host" is this machine reached through a real sshd on 127.0.0.1 (tests/helpers/sshd.py),
so the difference is what the harness adds: the SSH connection, the host script, the keeper, the
metadata shadow and the tunnel. Each server: started, ``--requests`` short chat completions (a
warm-up first), stopped; the order alternates over ``--rounds``.

    .venv/bin/python bench/gpu_host.py [--rounds 2] [--requests 20]

Medians.
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.server.config import ServerConfig
from harness.server.factory import vllm_server
from tests.helpers.sshd import TestSSHD


def measure(config: ServerConfig, requests: int) -> tuple[float, list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()  # the inspection and the plan count: over SSH they are part of the cost
        server = vllm_server(config, run_dir=Path(tmp))
        with server:
            ready = time.perf_counter() - t0
            client = server.client()
            ask = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
            client.chat.completions.create(**ask)
            latencies = []
            for _ in range(requests):
                t1 = time.perf_counter()
                client.chat.completions.create(**ask)
                latencies.append(time.perf_counter() - t1)
    return ready, latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    base = {"model": "smollm2-135m", "idle_timeout": 0, "metrics_interval": 2.0}
    ready: dict[str, list[float]] = {"local": [], "gpu-host": []}
    latency: dict[str, list[float]] = {"local": [], "gpu-host": []}
    with tempfile.TemporaryDirectory() as tmp, TestSSHD(Path(tmp) / "sshd") as sshd:
        remote = ServerConfig(**base, gpu_host=sshd.alias, ssh_config=sshd.config)
        local = ServerConfig(**base)
        for i in range(args.rounds):
            order = [("local", local), ("gpu-host", remote)]
            for name, config in order if i % 2 == 0 else reversed(order):
                r, lat = measure(config, args.requests)
                ready[name].append(r)
                latency[name] += lat
                print(
                    f"round {i + 1} {name}: ready {r:.1f} s, request median {1000 * statistics.median(lat):.1f} ms"
                )
    r_local, r_remote = statistics.median(ready["local"]), statistics.median(ready["gpu-host"])
    l_local, l_remote = statistics.median(latency["local"]), statistics.median(latency["gpu-host"])
    print(
        f"ready     local {r_local:.1f} s  gpu-host {r_remote:.1f} s  = {r_remote / r_local:.2f}x (target <= 1.1x)"
    )
    print(
        f"request   local {1000 * l_local:.1f} ms  gpu-host {1000 * l_remote:.1f} ms  = "
        f"{100 * (l_remote / l_local - 1):+.1f}% (target <= +5%)"
    )


if __name__ == "__main__":
    main()
