"""Export a run as SWE-bench predictions: preds.jsonl with instance_id, model_name_or_path, model_patch.

The patch is the diff from the task's starting workspace to the episode's final workspace, in the
`git diff` format the official SWE-bench harness applies at the repository root.
"""

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from harness.errors import HarnessError
from harness.results.store import RunStore
from harness.tasks import Task, load_tasks, prepare_workspace

_JUNK = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".git", ".mypy_cache")


def workspace_patch(original: Path, final: Path) -> str:
    """Unified diff original -> final with a/ and b/ prefixes (empty when nothing changed)."""
    with tempfile.TemporaryDirectory(prefix="harness-diff-") as tmp:
        a, b = Path(tmp) / "a", Path(tmp) / "b"
        shutil.copytree(original, a, ignore=_JUNK) if original.is_dir() else a.mkdir()
        shutil.copytree(final, b, ignore=_JUNK, symlinks=True)
        done = subprocess.run(
            [
                "git",
                "diff",
                "--no-index",
                "--no-color",
                "--binary",
                "--src-prefix=a/",
                "--dst-prefix=b/",
                "a",
                "b",
            ],
            cwd=tmp,
            capture_output=True,
            text=True,
        )
        if done.returncode not in (0, 1):  # 1 means "differences found"
            raise HarnessError(f"git diff failed: {done.stderr.strip()[:200]}")
        # Paths come out as a/a/<file> and b/b/<file>: strip the directory names.
        return (
            done.stdout.replace(" a/a/", " a/")
            .replace(" b/b/", " b/")
            .replace("--- a/a/", "--- a/")
            .replace("+++ b/b/", "+++ b/")
        )


def _patch_from_start(task: Task, final: Path) -> str:
    if task.container is None:
        return workspace_patch(task.workspace_dir, final)
    with tempfile.TemporaryDirectory(prefix="harness-start-") as tmp:  # a Harbor task's start is built
        return workspace_patch(prepare_workspace(task, Path(tmp) / "start"), final)


def export_preds(run_dir: Path, out: Path, model: str | None = None) -> int:
    manifest_path = run_dir / "run.json"
    if not manifest_path.is_file():
        raise HarnessError(f"{run_dir}: no run.json; give a harness eval run directory")
    manifest = json.loads(manifest_path.read_text())
    source = manifest.get("tasks_source") or manifest.get("suite", "")
    tasks = {t.id: t for t in load_tasks(source, skip_unsupported=True)}
    store = RunStore(run_dir)
    records = [r for r in store.records().values() if model is None or r.model == model]
    if not records:
        raise HarnessError(f"{run_dir}: no episodes" + (f" for model {model}" if model else ""))
    lines = []
    for rec in sorted(records, key=lambda r: (r.model, r.task_id, r.seed)):
        task = tasks.get(rec.task_id)
        final = store.episode_dir(rec.model, rec.task_id, rec.seed) / "workspace"
        if task is None or not final.is_dir():
            continue
        lines.append(
            json.dumps(
                {
                    "instance_id": rec.task_id,
                    "model_name_or_path": rec.model,
                    "model_patch": _patch_from_start(task, final),
                    "seed": rec.seed,
                }
            )
        )
    out.write_text("\n".join(lines) + ("\n" if lines else ""))
    return len(lines)
