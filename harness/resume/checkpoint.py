"""Mid-episode checkpoints: after a completed turn, the runner's state and the sandbox's files in the
episode's directory; an interrupted episode goes on from its last one.

    episodes/<model>/<task>/seed<N>/checkpoint/
      journal             one line per checkpoint, appended (no file made or renamed per turn): the
                          turn, the file generations that make the sandbox as it was then, and the
                          runner's state (mini-swe-agent: its messages; OpenHands: the conversation's
                          id, event count and base state) with its hash. The last whole line whose
                          hash holds is the checkpoint: a line torn by a kill is ignored (and cut
                          off when the episode resumes)
      data                appended per checkpoint (files.py): a tar of the sandbox's files changed
                          since the checkpoint before and, when that set changed, every path the
                          sandbox had then; a journal line names its parts by offset and length

A checkpoint is taken every ``every`` turns and whenever the run is stopping (``Drain``); its state
and files are of the same turn, so a resumed episode never sees files from a turn its agent does
not remember. The state is taken at the end of the turn; the files, for a runner that calls
``before_tools``, while the model answers the next call (nothing changes them until a tool runs,
and before_tools waits for the save): off the episode's path, the journal line written when they
are. A kill in that millisecond loses that turn's checkpoint too, never a whole one. A checkpoint
that cannot be restored (corrupt, missing, refused by its sandbox or its runner) is set aside: the
episode begins again from turn 1 and its record says why (``resume_note``).
"""

import concurrent.futures
import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from harness.resume.files import DATA, CheckpointUnusable, FileSnapshots, part_end, part_exists
from harness.resume.snapshots import snapshots_for
from harness.runtime.export_caps import ExportLimit, remove_tree
from harness.seam import ResumeState

_log = logging.getLogger(__name__)

DIR = "checkpoint"
JOURNAL = "journal"
# What of an episode directory a resumed episode keeps: its checkpoint and the runner's own records
# (the conversation, raw completions, model calls, trajectory). The sandbox's files are put back from
# the checkpoint instead: a local workspace as the kill left it may be ahead of the checkpoint.
_SANDBOX_FILES = ("workspace",)


class Marker(BaseModel):
    """One journal line's head (the state follows it, after a tab)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    scaffold: str
    turn: int
    tars: list[str]
    paths: str | None  # the last listing (None: the set of paths never changed)
    state_sha256: str
    requires: list[str] = []  # files of the episode directory the runner's state relies on
    saved_at: float


def _last_checkpoint(journal: Path) -> tuple[Marker, dict[str, Any], int] | str:
    """The journal's last whole, intact line: its marker, state and where it ends; or why none."""
    try:
        data = journal.read_bytes()
    except OSError as exc:
        return f"journal unreadable ({exc.strerror or exc})"
    lines = data.split(b"\n")
    end = len(data) - len(lines[-1])  # the bytes after the last newline are a torn line
    for line in reversed(lines[:-1]):
        head, tab, body = line.partition(b"\t")
        try:
            marker = Marker.model_validate_json(head) if tab else None
        except (ValidationError, ValueError):
            marker = None
        if marker is not None and hashlib.sha256(body).hexdigest() == marker.state_sha256:
            try:
                state = json.loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError):
                state = None
            if isinstance(state, dict):
                return marker, state, end
        return "the journal's last checkpoint is corrupt (its state does not match its hash)"
    return "the journal holds no whole checkpoint"


def load(out_dir: Path, scaffold: str) -> tuple[Marker, ResumeState, int] | str | None:
    """The episode's last checkpoint (and where its journal line ends); a reason when there is one
    that cannot be used; None when there is none."""
    root = out_dir / DIR
    journal = root / JOURNAL
    if not journal.exists():
        return "a checkpoint directory without its journal" if root.exists() and any(root.iterdir()) else None
    found = _last_checkpoint(journal)
    if isinstance(found, str):
        return found
    marker, state, end = found
    if marker.scaffold != scaffold:
        return f"the checkpoint is of scaffold {marker.scaffold}, the episode runs {scaffold}"
    missing = [
        n for n in [*marker.tars, *([marker.paths] if marker.paths else [])] if not part_exists(root, n)
    ]
    missing += [r for r in marker.requires if not (out_dir / r).exists()]
    if missing:
        return f"the checkpoint's {missing[0]} is missing"
    return marker, ResumeState(turn=marker.turn, state=state), end


def set_aside(out_dir: Path) -> None:
    """An unusable checkpoint removed (the episode begins again; the record says why)."""
    with contextlib.suppress(FileNotFoundError):
        remove_tree(out_dir / DIR)


class EpisodeCheckpoint:
    """One attempt's checkpoints (the seam's ``Checkpointing``): handed to the runner in its spec."""

    def __init__(
        self,
        out_dir: Path,
        scaffold: str,
        files: FileSnapshots,
        *,
        every: int,
        drain: threading.Event,
        resumed: tuple[Marker, ResumeState] | None = None,
        on_commit: Callable[[Marker, int], None] | None = None,
    ) -> None:
        self.out_dir, self.root = out_dir, out_dir / DIR
        # told of each checkpoint once its journal line is written (the marker, where the line ends):
        # a Ray episode ships its checkpoints to the driver from there (harness/cluster/mirror.py)
        self.on_commit = on_commit
        self.scaffold = scaffold
        self.files = files
        self.every = every
        self._drain = drain
        self._marker: Marker | None = resumed[0] if resumed is not None else None
        self._resume: ResumeState | None = resumed[1] if resumed is not None else None
        self._last = self._resume.turn if self._resume is not None else 0
        self._journal: IO[bytes] | None = None
        self.drained = False
        self.saves = 0
        self.skipped = 0  # turns not checkpointed: the files were over the export cap
        self.failed: str | None = None  # why checkpoints ended early, this attempt
        self.seconds = 0.0  # the episode's wait for its checkpoints, this attempt
        self.save_seconds = 0.0  # spent saving them, on the episode's path or beside it
        # the sandbox's files saved beside the episode once its runner is seen to call before_tools
        self._overlap = False
        self._pending: concurrent.futures.Future[None] | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    @property
    def resume(self) -> ResumeState | None:
        return self._resume

    def turn_done(self, turns: int, state: Callable[[], dict[str, Any]]) -> bool:
        draining = self._drain.is_set()
        due = draining or (self.every and turns % self.every == 0)
        if turns > self._last and due and self.failed is None:
            started = time.perf_counter()
            self._settle()  # the checkpoint before, whole first: generations are appended in order
            # the runner's state now, as JSON: it is the runner's live data, changed by the next turn
            st = state()
            requires = [str(r) for r in st.pop("_requires", [])]
            body = json.dumps(st).encode()
            self._last = turns
            if draining or not self._overlap:
                self._save_counted(turns, body, requires)
            else:
                # the files while the model thinks: no tool runs before before_tools() has waited
                self._pending = self._saver().submit(self._save_counted, turns, body, requires)
            self.seconds += time.perf_counter() - started
        if draining:
            self.drained = True
        return draining

    def before_tools(self) -> None:
        self._overlap = True
        if self._pending is not None:
            started = time.perf_counter()
            self._settle()
            self.seconds += time.perf_counter() - started

    def _saver(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="checkpoint")
        return self._pool

    def _settle(self) -> None:
        """The save in the background, done (what it raised, raised here)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def _save_counted(self, turns: int, body: bytes, requires: list[str]) -> None:
        started = time.perf_counter()
        try:
            self._save(turns, body, requires)
            self.saves += 1
        except ExportLimit:
            # the sandbox's files are over the export cap (a 1 TB sparse file is nothing in the
            # sandbox and a terabyte in any copy): no checkpoint of this turn; a resume goes on
            # from the one before, and the episode's export says what is over
            self.skipped += 1
        except Exception as exc:
            # a save that failed (a full disk, a sandbox that refused): the episode goes on, its
            # checkpoints end here (what a later one would hold relative to this one is unknown);
            # a resume goes on from the last whole one, which nothing here touched
            self.failed = f"checkpoint of turn {turns} failed ({type(exc).__name__}: {str(exc)[:300]})"
            _log.warning("%s: %s; no more checkpoints this attempt", self.out_dir, self.failed)
        finally:
            self.save_seconds += time.perf_counter() - started

    def _save(self, turns: int, body: bytes, requires: list[str]) -> None:
        if self._journal is None:
            self.root.mkdir(exist_ok=True)
            self._journal = (self.root / JOURNAL).open("ab")
        gen = self.files.snapshot(self.root, turns)
        marker = Marker(
            scaffold=self.scaffold,
            turn=turns,
            tars=[*(self._marker.tars if self._marker else []), *([gen.tar] if gen.tar else [])],
            paths=gen.paths or (self._marker.paths if self._marker else None),
            state_sha256=hashlib.sha256(body).hexdigest(),
            requires=requires,
            saved_at=time.time(),
        )
        # the generation is whole on disk before the line that names it; the line is the commit
        self._journal.write(marker.model_dump_json().encode() + b"\t" + body + b"\n")
        self._journal.flush()
        self._marker = marker
        if self.on_commit is not None:
            self.on_commit(marker, self._journal.tell())

    def finish_saves(self) -> None:
        """The episode's last save done, before its sandbox stops (the episode has ended: a save
        that failed now costs nothing but a resume from the one before, which it no longer needs)."""
        with contextlib.suppress(Exception):
            self._settle()

    def close(self) -> None:
        self.finish_saves()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        close_files = getattr(self.files, "close", None)
        if close_files is not None:
            close_files()  # a watcher's connection (daemon_files.py)
        if self._journal is not None:
            self._journal.close()
            self._journal = None


def open_checkpoint(
    out_dir: Path,
    scaffold: str,
    sandbox_for: Callable[[], Any],
    *,
    every: int,
    drain: threading.Event,
) -> tuple[Any, EpisodeCheckpoint, str | None]:
    """The episode's sandbox (``sandbox_for()`` makes a fresh one from its task), with the files of
    its last checkpoint put back when it has one; its checkpoints; why a checkpoint on disk was not
    used, if one was not. ``every`` 0: checkpoints only when the run stops gracefully."""
    found = load(out_dir, scaffold)
    note = found if isinstance(found, str) else None
    if isinstance(found, tuple):
        marker, state, end = found
        _tidy(out_dir, marker, end)
        sandbox = sandbox_for()
        files = snapshots_for(sandbox)
        try:
            files.restore(out_dir / DIR, marker.tars, marker.paths)
        except CheckpointUnusable as exc:
            with contextlib.suppress(Exception):
                sandbox.close()
            note = f"checkpoint of turn {marker.turn} not restored: {exc}"
        else:
            resumed = (marker, state)
            return (
                sandbox,
                EpisodeCheckpoint(out_dir, scaffold, files, every=every, drain=drain, resumed=resumed),
                None,
            )
    if out_dir.exists():
        remove_tree(out_dir)  # an interrupted attempt without a usable checkpoint: from a fresh workspace
    sandbox = sandbox_for()
    files = snapshots_for(sandbox)
    files.baseline()
    return (
        sandbox,
        EpisodeCheckpoint(out_dir, scaffold, files, every=every, drain=drain),
        (f"{note}; the episode began again from turn 1" if note else None),
    )


def _tidy(out_dir: Path, marker: Marker, end: int) -> None:
    """What the interrupted attempt left beyond its checkpoint: the sandbox's files (put back from
    the checkpoint), a torn journal line and the generations no whole line names."""
    for name in _SANDBOX_FILES:
        path = out_dir / name
        if path.is_dir() and not path.is_symlink():
            remove_tree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    root = out_dir / DIR
    with (root / JOURNAL).open("r+b") as journal:
        journal.truncate(end)
    parts = [*marker.tars, *([marker.paths] if marker.paths else [])]
    # what a torn checkpoint appended to the data file after the last whole one: cut off
    data_end = max((e for n in parts if (e := part_end(root, n)) is not None), default=0)
    if (root / DATA).is_file():
        with (root / DATA).open("r+b") as data:
            data.truncate(data_end)
    keep = {JOURNAL, DATA, *parts}
    for entry in root.iterdir():
        if entry.name not in keep:
            remove_tree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
