"""What the model-call proxy costs: per turn of an episode, and per request at 16 concurrent streams.

The model is `harness replay` in its own process (as vLLM would be); the agent is the official
openai client in a loop that grows its message list as an agent's does (each turn's tool call
answered by a tool message of --obs-chars characters). The proxy runs in this process, in its
background thread, as it does inside `harness eval`, recording every exchange to a temporary
directory and watching every turn (assembly, validation, loop monitor).

1. Per-turn overhead: a --turns-turn episode straight to the replay server and through the proxy,
   alternated --reps times; the median time per turn of each, for each replay delay in --delays
   (0: the bare hop; a model answers in tenths of seconds at best), and the CPU time the proxy's
   thread spent per turn (what it costs the harness process, whatever the machine's load).
3. `harness proxy` as a command (its own process, episodes attributed by their conversations):
   --streams concurrent streaming episodes straight and through it, replay delay --command-delay
   (0.2 s: a model's answer time), mean/p50/p95 per request and the overhead in percent.
2. Latency at --streams concurrent streaming episodes: each request's time to its last chunk,
   straight and through the proxy (p50/p95), and the proxy's own part of each proxied request:
   the agent's time minus the upstream's as the proxy recorded it (agent-side work included), and
   the time inside the proxy (arrival to the answer's end) minus the upstream's.

    .venv/bin/python bench/proxy_overhead.py [--turns 20] [--reps 10] [--delays 0,0.2] [--streams 16]
"""

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.proxy import Exchange, Proxy, read_records, serve_proxy
from harness.server.endpoint import ExternalEndpoint

TERMINAL = {
    "type": "function",
    "function": {
        "name": "terminal",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}


def start_replay(script: dict[str, Any], folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    path = folder / f"script-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(script))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "replay", str(path), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                return proc, f"http://127.0.0.1:{port}/v1"
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the replay server did not start")


def script(turns: int, delay: float) -> dict[str, Any]:
    thought = "I should look at the repository layout before changing anything. " * 3
    return {
        "model": "replay",
        "pick": "by_turn",
        "delay": delay,
        "responses": [
            {
                "content": thought,
                "tool_calls": [{"name": "terminal", "arguments": {"command": f"cat file_{i}.py"}}],
            }
            for i in range(turns)
        ],
    }


def episode(c: openai.OpenAI, turns: int, obs_chars: int, *, stream: bool, task: str) -> list[float]:
    """One agent episode; each request's seconds (to the last chunk when streaming)."""
    messages: list[Any] = [
        {"role": "system", "content": "You are a coding agent. " * 40},
        {"role": "user", "content": task},
    ]
    took = []
    for t in range(turns):
        t0 = time.perf_counter()
        if stream:
            chunks = list(
                c.chat.completions.create(model="replay", messages=messages, tools=[TERMINAL], stream=True)
            )  # type: ignore[list-item]
            calls = [
                {
                    "id": tc.id,
                    "type": "function",
                    "function": {"name": tc.function.name, "arguments": tc.function.arguments},
                }
                for ch in chunks
                if ch.choices
                for tc in ch.choices[0].delta.tool_calls or ()
            ]
            text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        else:
            msg = (
                c.chat.completions.create(model="replay", messages=messages, tools=[TERMINAL])
                .choices[0]
                .message
            )  # type: ignore[list-item]
            calls = [tc.model_dump() for tc in msg.tool_calls or ()]
            text = msg.content or ""
        took.append(time.perf_counter() - t0)
        messages.append({"role": "assistant", "content": text, "tool_calls": calls})
        output = (f"line {t}: def f_{t}(x): return x * {t}\n" * (obs_chars // 30 + 1))[:obs_chars]
        messages += [{"role": "tool", "tool_call_id": call["id"], "content": output} for call in calls]
    return took


def client(base_url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=60)


def per_turn(args: argparse.Namespace, folder: Path) -> None:
    print(
        f"1. per-turn time of a {args.turns}-turn episode (median of {args.reps}, alternated; obs {args.obs_chars} chars)"
    )
    print(
        f"   {'replay delay':>12} {'direct ms':>10} {'proxied ms':>11} {'overhead ms':>12} {'overhead':>9}"
        f" {'proxy CPU ms':>12}"
    )
    for delay in args.delays:
        proc, url = start_replay(script(args.turns, delay), folder)
        try:
            with serve_proxy(ExternalEndpoint(url, "EMPTY", "replay")) as proxy:
                direct_c = client(url, "EMPTY")
                episode(direct_c, args.turns, args.obs_chars, stream=False, task="warm-up")
                direct, proxied, cpu = [], [], []
                for rep in range(args.reps):
                    t0 = time.perf_counter()
                    episode(direct_c, args.turns, args.obs_chars, stream=False, task=f"direct {rep}")
                    direct.append((time.perf_counter() - t0) / args.turns)
                    with proxy.episode(
                        f"replay/task/seed{rep}", record=folder / f"turns-{delay}-{rep}.jsonl"
                    ) as ep:
                        c0 = proxy.cpu_s
                        t0 = time.perf_counter()
                        episode(
                            client(ep.openai_url, ep.api_key),
                            args.turns,
                            args.obs_chars,
                            stream=False,
                            task=f"proxied {rep}",
                        )
                        proxied.append((time.perf_counter() - t0) / args.turns)
                        cpu.append((proxy.cpu_s - c0) / args.turns)
                        assert len(ep.watch.turns) == args.turns - 1
        finally:
            proc.kill()
            proc.wait()
        d, p = statistics.median(direct) * 1e3, statistics.median(proxied) * 1e3
        c = statistics.median(cpu) * 1e3
        print(f"   {delay:>10g} s {d:>10.2f} {p:>11.2f} {p - d:>12.2f} {100 * (p - d) / d:>8.1f}% {c:>12.2f}")


def concurrent(args: argparse.Namespace, folder: Path) -> None:
    n = args.streams
    print(
        f"2. {n} concurrent streaming episodes of {args.turns} turns (replay delay {args.stream_delay:g} s): seconds per request"
    )
    proc, url = start_replay(script(args.turns, args.stream_delay), folder)
    try:
        direct: list[float] = []
        proxied: list[float] = []
        own: list[float] = []
        inside: list[float] = []
        lock = threading.Lock()

        def run(k: int, target: str, key: str, out: list[float]) -> None:
            took = episode(client(target, key), args.turns, args.obs_chars, stream=True, task=f"episode {k}")
            with lock:
                out += took

        threads = [threading.Thread(target=run, args=(k, url, "EMPTY", direct)) for k in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        proxy: Proxy
        with serve_proxy(ExternalEndpoint(url, "EMPTY", "replay")) as proxy:
            c0 = proxy.cpu_s
            endpoints = [
                proxy.episode(f"replay/task/seed{k}", record=folder / f"stream-{k}.jsonl") for k in range(n)
            ]
            per_episode: list[list[float]] = [[] for _ in range(n)]
            threads = [
                threading.Thread(target=run, args=(k, ep.openai_url, ep.api_key, per_episode[k]))
                for k, ep in enumerate(endpoints)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            cpu_ms = (proxy.cpu_s - c0) / (n * args.turns) * 1e3
            for ep in endpoints:
                ep.release()
        for k in range(n):
            exchanges = [r for r in read_records(folder / f"stream-{k}.jsonl") if isinstance(r, Exchange)]
            assert len(exchanges) == args.turns and all(e.status == 200 for e in exchanges)
            proxied += per_episode[k]
            own += [c - e.upstream_s for c, e in zip(per_episode[k], exchanges, strict=True)]
            inside += [e.took_s - e.upstream_s for e in exchanges]
    finally:
        proc.kill()
        proc.wait()

    def q(xs: list[float], p: float) -> float:
        return statistics.quantiles(xs, n=100)[p - 1] * 1e3

    print(f"   {'':>24} {'p50 ms':>8} {'p95 ms':>8}")
    print(f"   {'straight to the replay':>24} {q(direct, 50):>8.2f} {q(direct, 95):>8.2f}")
    print(f"   {'through the proxy':>24} {q(proxied, 50):>8.2f} {q(proxied, 95):>8.2f}")
    print(
        f"   {'agent - upstream time':>24} {q(own, 50):>8.2f} {q(own, 95):>8.2f}"
        "   (the agent's time minus the upstream's, as the proxy recorded it)"
    )
    print(
        f"   {'inside the proxy':>24} {q(inside, 50):>8.2f} {q(inside, 95):>8.2f}"
        "   (from the request's arrival to its answer's end, minus the upstream's time)"
    )
    print(f"   the proxy thread's CPU: {cpu_ms:.2f} ms per request")


def command(args: argparse.Namespace, folder: Path) -> None:
    """3.: `harness proxy` as users run it (its own process, episodes told apart by their
    conversations on the plain /v1 URL, every episode recorded into a run directory) against the
    same replay straight, --streams concurrent streaming episodes each, one run of each."""
    n, delay = args.streams, args.command_delay
    print(f"3. harness proxy (its own process): {n} concurrent streaming episodes, replay delay {delay:g} s")
    proc, url = start_replay(script(args.turns, delay), folder)
    run_dir = folder / "proxy-run"
    proxy = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "proxy", "--upstream", url, "--run-dir", str(run_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent), "COLUMNS": "1000"},
    )
    try:
        assert proxy.stdout is not None
        base = key = None
        for line in proxy.stdout:
            if base is None and " on http://127.0.0.1:" in line:
                base = line.split(" on ", 1)[1].split()[0]
            if "API key" in line:
                key = line.split(":", 1)[1].strip()
                break
        assert base and key, "harness proxy did not start"
        started_cpu = psutil.Process(proxy.pid).cpu_times()
        start_cpu = started_cpu.user + started_cpu.system
        results: dict[str, list[float]] = {"direct": [], "proxied": []}
        lock = threading.Lock()

        def run(k: int, target: str, token: str, out: list[float]) -> None:
            took = episode(
                client(target, token), args.turns, args.obs_chars, stream=True, task=f"episode {k}"
            )
            with lock:
                out += took

        means: dict[str, list[float]] = {"direct": [], "proxied": []}
        sides = (("direct", url, "EMPTY"), ("proxied", f"{base}/v1", key))
        # a warm-up of each side, then the sides alternated: one run's mean per round
        for r, (name, target, token) in enumerate([*sides, *(sides * args.command_rounds)]):
            took: list[float] = []
            threads = [
                threading.Thread(target=run, args=(k + 100 * r, target, token, took)) for k in range(n)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if r >= len(sides):
                results[name] += took
                means[name].append(statistics.mean(took))
        # its CPU per proxied request (warm-up included, start-up not): what it costs the machine,
        # whatever else runs on it
        cpu = psutil.Process(proxy.pid).cpu_times()
        cpu_s = cpu.user + cpu.system - start_cpu
        proxy.send_signal(signal.SIGTERM)
        proxy.wait(timeout=60)
        lines = [json.loads(x) for x in (run_dir / "episodes.jsonl").read_text().splitlines() if x.strip()]
        rounds = args.command_rounds + 1
        assert len(lines) == n * rounds and all(r["turns"] == args.turns for r in lines), "not all recorded"
    finally:
        if proxy.poll() is None:
            proxy.kill()
        proc.kill()
        proc.wait()

    def q(xs: list[float], p: int) -> float:
        return statistics.quantiles(xs, n=100)[p - 1] * 1e3

    d, p = results["direct"], results["proxied"]
    print(f"   {'':>24} {'mean ms':>8} {'p50 ms':>8} {'p95 ms':>8}")
    for name, xs in (("straight to the replay", d), ("through harness proxy", p)):
        print(f"   {name:>24} {1e3 * statistics.mean(xs):>8.2f} {q(xs, 50):>8.2f} {q(xs, 95):>8.2f}")
    md, mp = statistics.median(means["direct"]), statistics.median(means["proxied"])
    print(
        f"   overhead per request (median of {args.command_rounds} alternated runs' means): "
        f"{1e3 * (mp - md):+.2f} ms ({100 * (mp / md - 1):+.1f}%; target +5% or less); "
        f"every episode recorded, {args.turns} turns each"
    )
    print(f"   harness proxy's CPU per proxied request: {1e3 * cpu_s / (n * args.turns * rounds):.2f} ms")


def startup() -> None:
    took = []
    for _ in range(5):
        t0 = time.perf_counter()
        proxy = Proxy(ExternalEndpoint("http://127.0.0.1:9/v1", "EMPTY", "replay")).start()
        started = time.perf_counter() - t0
        t0 = time.perf_counter()
        proxy.stop()
        took.append((started, time.perf_counter() - t0))
    print(
        f"0. proxy start {1e3 * took[0][0]:.0f} ms first, {1e3 * statistics.median(t[0] for t in took[1:]):.0f} ms after; "
        f"stop {1e3 * statistics.median(t[1] for t in took):.0f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--delays", type=lambda s: [float(x) for x in s.split(",")], default=[0.0, 0.2])
    ap.add_argument("--obs-chars", type=int, default=2000)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--stream-delay", type=float, default=0.0)
    ap.add_argument(
        "--command-delay", type=float, default=0.2, help="the replay's delay for 3. (a model's answer time)"
    )
    ap.add_argument("--command-rounds", type=int, default=3, help="alternated runs of each side in 3.")
    ap.add_argument("--only", choices=["command"], help="run only this part")
    args = ap.parse_args()
    print(f"cores: {os.cpu_count()}, load average: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        if args.only == "command":
            command(args, Path(tmp))
            return
        startup()
        per_turn(args, Path(tmp))
        concurrent(args, Path(tmp))
        command(args, Path(tmp))


if __name__ == "__main__":
    main()
