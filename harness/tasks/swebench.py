"""SWE-bench instance JSONL as tasks, from local repository checkouts (no network at run time).

Each instance becomes a generated task directory (cached under the harness cache):
- environment/workspace: the repository at ``base_commit`` (cloned from a local checkout found at
  ``$HARNESS_SWEBENCH_REPOS/<owner>__<name>`` or ``<jsonl dir>/repos/<owner>__<name>``);
- instruction.md: the problem statement;
- tests/: ``test_patch`` plus a test.sh that applies it and runs FAIL_TO_PASS + PASS_TO_PASS with pytest;
- solution/solve.sh: applies the gold ``patch``.
Results can also go to the official SWE-bench harness through `harness export-preds`.
"""

import hashlib
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.paths import cache_dir

_REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement")


def _tests(value: Any) -> list[str]:
    if isinstance(value, str):
        value = json.loads(value) if value.strip().startswith("[") else [value]
    return [str(v) for v in value or []]


def _repo_checkout(jsonl: Path, repo: str) -> Path:
    name = repo.replace("/", "__")
    roots = [Path(p) for p in (os.environ.get("HARNESS_SWEBENCH_REPOS"),) if p] + [jsonl.parent / "repos"]
    for root in roots:
        for candidate in (root / name, root / repo.split("/")[-1]):
            if (candidate / ".git").exists():
                return candidate
    raise HarnessError(
        f"{jsonl}: no local checkout of {repo}; clone it to {roots[-1] / name} (or set HARNESS_SWEBENCH_REPOS)"
    )


def _git(*args: str, cwd: Path) -> None:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise HarnessError(f"git {' '.join(args[:3])} in {cwd} failed: {done.stderr.strip()[:200]}")


def _write_task(inst: dict[str, Any], jsonl: Path, dest: Path) -> None:
    work = dest.with_name(dest.name + ".tmp")
    if work.exists():
        shutil.rmtree(work)
    ws = work / "environment" / "workspace"
    ws.parent.mkdir(parents=True)
    _git("clone", "--quiet", "--no-checkout", str(_repo_checkout(jsonl, inst["repo"])), str(ws), cwd=work)
    _git("checkout", "--quiet", inst["base_commit"], cwd=ws)
    (work / "instruction.md").write_text(inst["problem_statement"])
    tests = work / "tests"
    tests.mkdir()
    (tests / "test.patch").write_text(inst.get("test_patch") or "")
    selected = _tests(inst.get("FAIL_TO_PASS")) + _tests(inst.get("PASS_TO_PASS"))
    (tests / "test.sh").write_text(
        '#!/usr/bin/env bash\nset -euo pipefail\ncd "$WORKSPACE"\n'
        'if [ -s "$TESTS_DIR/test.patch" ]; then git apply --whitespace=nowarn "$TESTS_DIR/test.patch"; fi\n'
        f'"${{PYTHON:-python3}}" -m pytest -q -p no:cacheprovider {" ".join(shlex.quote(t) for t in selected)}\n'
    )
    (work / "solution").mkdir()
    (work / "solution" / "gold.patch").write_text(inst.get("patch") or "")
    (work / "solution" / "solve.sh").write_text(
        '#!/usr/bin/env bash\nset -euo pipefail\ngit apply --whitespace=nowarn "$(dirname "$0")/gold.patch"\n'
    )
    (work / "task.toml").write_text('[task]\ncategory = "swe-bench"\n\n[limits]\nverify_timeout_s = 900\n')
    if dest.exists():
        shutil.rmtree(dest)
    work.rename(dest)


def load_swebench(jsonl: Path) -> Path:
    """Generate (once, cached by content) the task directories for an instance file; return their parent."""
    lines = [ln for ln in jsonl.read_text().splitlines() if ln.strip()]
    if not lines:
        raise HarnessError(f"{jsonl}: empty file; expected SWE-bench instances, one JSON object per line")
    digest = hashlib.sha256(jsonl.read_bytes()).hexdigest()[:12]
    root = cache_dir() / "swebench" / f"{jsonl.stem}-{digest}"
    for number, line in enumerate(lines, 1):
        try:
            inst = json.loads(line)
        except json.JSONDecodeError as exc:
            raise HarnessError(f"{jsonl}:{number}: not JSON ({exc.msg})") from None
        missing = [k for k in _REQUIRED if not inst.get(k)]
        if missing:
            raise HarnessError(f"{jsonl}:{number}: missing {', '.join(missing)}; not a SWE-bench instance")
        dest = root / str(inst["instance_id"])
        if not (dest / "instruction.md").is_file():
            _write_task(inst, jsonl, dest)
    return root
