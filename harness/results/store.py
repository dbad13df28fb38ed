"""The run store: one directory per run, append-only and resumable.

results/<run>/
  run.json                 what was asked (models, tasks, seeds, scaffold snapshot hash, sampling sent)
  episodes.jsonl           one EpisodeRecord per line, appended (and fsynced) when an episode ends;
                           verification appends the same key again with the reward: the last line
                           for a (model, task, seed) is authoritative
  trajectories/<model>/<task>/seed<N>.jsonl   Turn records
  episodes/<model>/<task>/seed<N>/            workspace, SDK conversation, raw completions,
                                              verifier.log (the tests' output, capped at 1 MiB)
  server.log
  harness.log              the OpenHands SDK's warnings and errors, each naming its episode
"""

import contextlib
import json
import os
import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import HarnessError
from harness.monitor import LoopFinding, StallFinding, Turn
from harness.paths import absolute
from harness.results.run_files import read_run_file, run_lines
from harness.results.run_lock import lock_run_dir

VERIFIER_LOG = "verifier.log"  # in an episode's directory

# infra_error: the infrastructure failed (server, connection, disk, container), retries ran out;
# not a score (left out of rates like an unverified episode), and the next eval reruns it.
Status = Literal["resolved", "unresolved", "loop_stopped", "max_iterations", "error", "infra_error"]


class EpisodeError(BaseModel):
    model_config = ConfigDict(frozen=True)

    type: str
    message: str


class EpisodeRecord(BaseModel):
    """One episode (DESIGN.md data contract), plus whether it has been verified yet."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    model: str = Field(description="The model, or MODEL@SCAFFOLD in a run of several scaffolds.")
    model_path: str
    scaffold: str | None = Field(
        None, description="The scaffold it ran under (None: a run before it was kept)."
    )
    task_id: str
    suite: str
    seed: int
    status: Status
    reward: float | None = Field(None, description="0..1 from the task's tests; None until verified.")
    turns: int
    tool_calls: int
    format_errors: dict[str, int]
    repairs: dict[str, int] = {}
    loop: LoopFinding | None
    stall: StallFinding | None = Field(
        None,
        description="Varied attempts that kept getting the same failure back: reported, never a loop "
        "(not in the loop rate, never stopped an episode).",
    )
    prompt_tokens: int
    completion_tokens: int
    wall_s: float
    llm_s: float
    error: EpisodeError | None
    trajectory: str
    verified: bool = False
    verify_mode: Literal["fresh", "shared"] | None = Field(
        None,
        description="Where the tests ran: a fresh sandbox with only the agent's files, or the agent's own "
        "(Harbor's shared mode, where the agent could have tampered); None until verified.",
    )

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.model, self.task_id, self.seed)


class RunManifest(BaseModel):
    """run.json: what a run asked for; a resumed run must ask for the same tasks and scaffold."""

    model_config = ConfigDict(extra="allow")

    run_id: str
    tasks: list[str]
    suite: str
    tasks_source: str = ""
    models: list[str]
    seeds: list[int]
    scaffold: str
    scaffold_hash: str
    runtime: str = "local"
    # The sampling parameters every request of the run sends (temperature, top_p, max_output_tokens;
    # the seed is the episode's) and where they came from: a resumed run must send the same.
    sampling: dict[str, Any] | None = None


class RunStore:
    def __init__(self, root: Path) -> None:
        self.root = absolute(root)  # episode directories are handed to shells that start elsewhere
        self.episodes_path = self.root / "episodes.jsonl"
        self._lock = threading.Lock()

    def init(self, manifest: RunManifest) -> None:
        """Create the run directory, or check that a resumed run asks for the same thing.

        Also takes the directory's eval lock (held while this store lives): a second eval on the
        same directory is refused with the first one's PID; a read-only directory is one line.
        """
        self._run_lock = lock_run_dir(self.root)
        path = self.root / "run.json"
        new = manifest.model_dump(mode="json")
        if path.exists():
            try:
                old: dict[str, Any] = json.loads(read_run_file(path))
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
                raise HarnessError(f"{path}: not valid JSON ({exc}); use another --run-dir") from None
            for key in ("tasks", "scaffold", "scaffold_hash"):
                if old.get(key) != new.get(key):
                    raise HarnessError(
                        f"{self.root}: this run was made with a different {key}; use another --run-dir to start a new run"
                    )
            _check_same_sampling(self.root, old.get("sampling"), new.get("sampling"))
            merged = {
                **old,
                **({"sampling": new["sampling"]} if new.get("sampling") and not old.get("sampling") else {}),
                "models": sorted(set(old.get("models", [])) | set(manifest.models)),
                "seeds": sorted(set(old.get("seeds", [])) | set(manifest.seeds)),
            }
            path.write_text(json.dumps(merged, indent=2))
        else:
            path.write_text(json.dumps(new, indent=2))

    def append(self, record: EpisodeRecord) -> None:
        """Append one record and fsync: an interrupted machine loses no finished episode."""
        line = record.model_dump_json() + "\n"
        with self._lock, self.episodes_path.open("a+b") as fh:
            # A line torn by a kill or a full disk would swallow this record: start a new line.
            if fh.seek(0, os.SEEK_END):
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    line = "\n" + line
            fh.write(line.encode())
            fh.flush()
            os.fsync(fh.fileno())

    def records(self) -> dict[tuple[str, str, int], EpisodeRecord]:
        """The latest record per (model, task, seed); a torn last line (a kill mid-write) is ignored."""
        latest: dict[tuple[str, str, int], EpisodeRecord] = {}
        if not self.episodes_path.exists():
            return latest
        for _, line in run_lines(self.episodes_path):  # bounded: a planted file is an error, not OOM
            if line is None or not line.strip():
                continue
            try:
                rec = EpisodeRecord.model_validate_json(line)
            except ValidationError:
                continue
            latest[rec.key] = rec
        return latest

    def trajectory_path(self, model: str, task_id: str, seed: int) -> Path:
        return self.root / "trajectories" / _safe(model) / task_id / f"seed{seed}.jsonl"

    def episode_dir(self, model: str, task_id: str, seed: int) -> Path:
        return self.root / "episodes" / _safe(model) / task_id / f"seed{seed}"

    def write_verifier_log(self, model: str, task_id: str, seed: int, text: str) -> None:
        """The episode's verifier output as ``verifier.log`` in its directory (a link or anything else
        the agent may have left at that name is replaced, never written through)."""
        path = self.episode_dir(model, task_id, seed) / VERIFIER_LOG
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            path.unlink()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as fh:
            fh.write(text)

    def write_trajectory(self, path: Path, turns: list[Turn]) -> str:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(t.model_dump_json() + "\n" for t in turns))
        return str(path.relative_to(self.root))


_SAMPLED = ("temperature", "top_p", "max_output_tokens")


def _check_same_sampling(root: Path, old: Any, new: Any) -> None:
    """Episodes sampled two ways in one run would be averaged as one experiment: refuse."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return  # a run made before sampling was recorded: it is recorded from now on
    for key in _SAMPLED:
        if old.get(key) != new.get(key):
            flag = "--temperature" if key == "temperature" else f"the scaffold's {key}"
            raise HarnessError(
                f"{root}: this run sampled with {key} {old.get(key)}, this command with {new.get(key)} "
                f"({flag}); use another --run-dir to start a new run"
            )


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
