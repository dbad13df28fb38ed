"""Turn a failed vLLM start's log into one actionable diagnosis."""

import re
from pathlib import Path

from harness.server.gpu import describe_holders, gpu_info, selected_gpu_indices

_ESTIMATED = re.compile(r"estimated maximum model length is (\d+)")
_NEEDED = re.compile(
    r"max seq len \((\d+)\), \(([\d.]+) GiB KV cache is needed.*?available KV cache memory \(([\d.]+) GiB\)"
)
_FREE = re.compile(r"Free memory on device (\S+) \(([\d.]+)/([\d.]+) GiB\)")


def log_tail(log: Path, lines: int = 12, max_bytes: int = 8192) -> list[str]:
    """The last non-empty lines of a log, reading only its end (it is polled while vLLM starts)."""
    try:
        with log.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            text = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    return [line for line in text if line.strip()][-lines:]


_EXCEPTION_LINE = re.compile(r"^\s*(?:\(\w+ pid=\d+\) )?(?:\w+\.)*\w*(?:Error|Exception): .+", re.M)


def last_exception(log_text: str) -> str | None:
    """The last 'SomethingError: message' line of a log: usually the real cause of a crash."""
    found = _EXCEPTION_LINE.findall(log_text)
    return found[-1].strip()[:300] if found else None


def diagnose(log_text: str) -> str | None:
    """A one-line cause and fix for the known startup failures, or None if unrecognised."""
    if m := _NEEDED.search(log_text):
        fit = _ESTIMATED.search(log_text)
        fix = f"pass --max-model-len {fit.group(1)} (what fits)" if fit else "lower --max-model-len"
        return (
            f"KV cache too small: one {m.group(1)}-token sequence needs {m.group(2)} GiB but "
            f"{m.group(3)} GiB is available; {fix}, or raise --gpu-memory-utilization"
        )
    if "No available memory for the cache blocks" in log_text:
        return (
            "no memory left for the KV cache after loading the weights; raise "
            "--gpu-memory-utilization, use a smaller --max-model-len, or a bigger GPU"
        )
    if m := _FREE.search(log_text):
        holders = (
            "; ".join(describe_holders(info) for i in selected_gpu_indices() if (info := gpu_info(i)))
            or "nvidia-smi shows which processes"
        )
        return (
            f"another process holds GPU memory (free {m.group(2)} of {m.group(3)} GiB on "
            f"{m.group(1)}): {holders}; stop it or lower --gpu-memory-utilization"
        )
    if "CUDA out of memory" in log_text or "OutOfMemoryError" in log_text:
        return "out of GPU memory while loading; lower --max-model-len / --max-num-seqs or use a bigger GPU"
    if "Address already in use" in log_text:
        return "the port is already in use; pass another --port or leave it out to pick a free one"
    if m := re.search(
        r"--tool-call-parser (\S+) cannot be used with the tokenizer of '[^']*': (.*)", log_text
    ):
        return (
            f"--tool-call-parser {m.group(1)} does not fit this model's tokenizer ({m.group(2).strip()[:120]}); "
            "leave the flag out to use the parser chosen from the chat template"
        )
    if m := re.search(r"No module named '([^']+)'", log_text):
        return f"the vLLM environment lacks module {m.group(1)}; run `harness server setup --force`"
    return None
