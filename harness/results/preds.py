"""Export a run as SWE-bench predictions: preds.jsonl with instance_id, model_name_or_path, model_patch.

The patch is the diff from the task's starting workspace to the episode's final workspace, in the
`git diff` format the official SWE-bench harness applies at the repository root.
"""

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from harness._text import markup
from harness.errors import HarnessError
from harness.progress import console
from harness.results.store import RunStore
from harness.runtime.export_caps import ExportLimits, check_tree
from harness.tasks import Task, load_tasks, prepare_workspace
from harness.tasks.identifiers import check_commit

_JUNK = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".git", ".mypy_cache")


# Settings that make git run a command, for every call: the agent's repository must not choose them.
_NO_COMMANDS = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.sshCommand=false")
# The whole configuration of an agent's repository copy: its own may name commands (fsmonitor,
# filter drivers run by `git add`, external diff and textconv drivers, hooks).
_SAFE_CONFIG = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "core.symlinks=true", "-c", "core.autocrlf=false", *_NO_COMMANDS, *args],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull},
    )
    if done.returncode != 0:
        raise HarnessError(f"git {args[0]} failed: {done.stderr.strip()[:200]}")
    return done.stdout


def workspace_patch(original: Path, final: Path) -> str:
    """Unified diff original -> final with a/ and b/ prefixes (empty when nothing changed).

    Both trees are staged in a scratch git index and diffed there, so the patch is exactly what
    `git diff` writes: paths relative to the root (added and deleted files too), binary files as
    git binary patches, and a symbolic link as a link (mode 120000, its target as the content),
    never followed: a link to a file outside the workspace exports its target path, not the file.
    """
    if final.is_symlink():
        raise HarnessError(
            f"{final}: the episode's workspace is a symbolic link (to {os.readlink(final)}); "
            "not following it out of the run directory"
        )
    with tempfile.TemporaryDirectory(prefix="harness-diff-") as tmp:
        repo = Path(tmp) / "repo"
        if original.is_dir():
            shutil.copytree(original, repo, ignore=_JUNK, symlinks=True)
        else:
            repo.mkdir()
        _git(repo, "init", "-q")
        _git(repo, "add", "-A", "-f", ".")
        start = _git(repo, "write-tree").strip()  # the starting files, as a tree to diff against
        for entry in repo.iterdir():  # keep the index and .git; the final files replace the rest
            if entry.name != ".git":
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        shutil.copytree(final, repo, ignore=_JUNK, symlinks=True, dirs_exist_ok=True)
        # An emptied index makes git hash every final file: copies keep their mtime and size, and
        # an index entry whose stat data still matches would hide a same-size edit.
        _git(repo, "read-tree", "--empty")
        _git(repo, "add", "-A", "-f", ".")
        return _git(
            repo,
            "diff",
            "--cached",
            "--no-color",
            "--binary",
            "--no-renames",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            start,
        )


def _swebench_patch(task: Task, final: Path) -> str:
    """A SWE-bench episode's patch as agents write theirs: ``git add -A`` in the final repository
    (its .gitignore honoured: build output such as *.egg-info stays out), diffed against
    ``base_commit``, in a scratch copy."""
    base = str(task.metadata.get("base_commit") or "")
    dot_git = final / ".git"
    # A .git that is a link or a `gitdir:` file would make git use a repository outside the run.
    if dot_git.is_symlink() or not dot_git.is_dir() or not base:
        return workspace_patch(task.path / "environment" / "repo", final)
    check_commit(base, f"{task.path / 'task.toml'}: base_commit")  # git diff would take an option
    with tempfile.TemporaryDirectory(prefix="harness-diff-") as tmp:
        repo = Path(tmp) / "repo"
        shutil.copytree(final, repo, symlinks=True)
        _disarm(repo / ".git")
        _git(repo, "add", "-A", ".")
        return _git(
            repo,
            "diff",
            "--cached",
            "--no-color",
            "--binary",
            "--no-renames",
            "--no-ext-diff",
            "--no-textconv",
            "--end-of-options",
            base,
        )


def _disarm(git_dir: Path) -> None:
    """The agent's repository copy without what could run a command on this machine when git
    reads it: its configuration replaced (objects, refs and index kept), its hooks removed."""
    (git_dir / "config").unlink(missing_ok=True)  # a link is replaced, never written through
    (git_dir / "config").write_text(_SAFE_CONFIG)
    hooks = git_dir / "hooks"
    if hooks.is_symlink() or hooks.is_file():
        hooks.unlink()
    elif hooks.is_dir():
        shutil.rmtree(hooks)


def _patch_from_start(task: Task, final: Path) -> str:
    # A SWE-bench instance: built here (environment/repo) or in its official image (the final
    # workspace holds the image's repository at base_commit).
    if task.metadata.get("category") == "swe-bench" and (
        (task.path / "environment" / "repo").is_dir() or (final / ".git").is_dir()
    ):
        return _swebench_patch(task, final)
    if task.container is None:
        return workspace_patch(task.workspace_dir, final)
    with tempfile.TemporaryDirectory(prefix="harness-start-") as tmp:  # a Harbor task's start is built
        return workspace_patch(prepare_workspace(task, Path(tmp) / "start"), final)


def export_preds(run_dir: Path, out: Path, model: str | None = None) -> int:
    from harness.results.runs import read_manifest

    manifest = read_manifest(run_dir)  # one line for what is wrong with it
    source = manifest.get("tasks_source") or manifest.get("suite", "")
    # SWE-bench instances are image tasks; their starting repository is on this machine all the same.
    tasks = {
        t.id: t for t in load_tasks(source, skip_unsupported=True, images=str(source).endswith(".jsonl"))
    }
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
        try:  # the diff is made from a copy: a run from before the export caps may hold a 1 TB file
            check_tree(final, ExportLimits())
            patch = _patch_from_start(task, final)
        except HarnessError as exc:  # over the caps, a bad base_commit: this episode's, not the file's
            console.print(f"[yellow]{markup(rec.task_id)} seed {rec.seed} left out[/]: {markup(str(exc))}")
            continue
        lines.append(
            json.dumps(
                {
                    "instance_id": rec.task_id,
                    "model_name_or_path": rec.model,
                    "model_patch": patch,
                    "seed": rec.seed,
                }
            )
        )
    out.write_text("\n".join(lines) + ("\n" if lines else ""))
    return len(lines)
