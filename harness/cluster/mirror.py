"""A Ray episode's checkpoints, shipped to the driver's run directory as they are taken.

A Ray episode runs in a scratch directory of its node that goes with its attempt (episode.py): a
checkpoint kept only there would die with the node, or be out of reach when the driver is killed.
So each checkpoint is shipped to the driver once its journal line is written: what was appended to
the checkpoint's journal and data file since the last shipment, and the episode directory's other
files (the runner's records: the conversation's events a checkpoint requires, raw completions,
model calls) that are new or changed since then; a file that only grew, its new bytes alone. The
driver writes a shipment's pieces in order, the journal's last: as in one process, the journal
line is the commit, and the data and files it names are whole on disk before it (checkpoint.py).
A rerun (Ray or threads) finds a checkpoint there as if the episode had run on the driver; a Ray
episode that starts with one gets its directory shipped to it (``pack_episode``) and resumes.

The driver stays the only writer of the run directory: shipments wait in a small actor
(``Mailbox``) until the driver takes them, every few tenths of a second. The same actor carries the
run's graceful stop to the episodes: each task waits on ``until_drain`` and then sets its rollout's
drain event, so that its runner checkpoints after the turn in flight and ends.
"""

import asyncio
import contextlib
import io
import stat
import tarfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.resume import tree
from harness.resume.checkpoint import DIR, JOURNAL, Marker
from harness.resume.files import DATA, part_end
from harness.runtime.export_caps import remove_tree

if TYPE_CHECKING:
    from harness.resume import EpisodeCheckpoint

# The sandbox's files, which a checkpoint's data holds (and a resume puts back from there): never
# shipped as they are (checkpoint.py's _SANDBOX_FILES).
_SKIP = frozenset({"workspace"})
_TAIL = 256  # bytes of a file's end kept per file shipped: it grew by appending when they are unchanged
DRAIN_WAIT_S = 30.0  # a task's wait for the drain is renewed this often (no call waits for ever in the actor)


@dataclass(frozen=True)
class Piece:
    """Bytes of one file of the episode directory: the file is cut at ``offset`` and ``data`` written
    there (0: the whole file)."""

    path: str  # relative to the episode directory
    offset: int
    data: bytes


@dataclass(frozen=True)
class Shipment:
    """One checkpoint's new bytes; the journal's piece last (the commit)."""

    episode: str  # the episode directory, relative to the run directory
    fresh: bool  # the attempt began from turn 1: what the driver holds of the episode is dropped first
    removed: list[str] = field(default_factory=list)
    pieces: list[Piece] = field(default_factory=list)


class Mailbox:
    """The Ray actor between the episodes and the driver: checkpoints shipped (``put``) until the
    driver takes them (``take``), and the run's graceful stop (``drain``, ``until_drain``). Async:
    every task's wait for the drain is a coroutine, not a thread."""

    def __init__(self) -> None:
        self._queue: list[Shipment] = []
        self._drain = asyncio.Event()

    async def put(self, shipment: Shipment) -> None:
        self._queue.append(shipment)

    async def take(self) -> list[Shipment]:
        taken, self._queue = self._queue, []
        return taken

    async def drain(self) -> None:
        self._drain.set()

    async def until_drain(self, timeout: float) -> bool:
        """True once the run drains; False after ``timeout`` seconds (the caller asks again)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._drain.wait(), timeout)
        return self._drain.is_set()


def _inside(base: Path, rel: str) -> Path:
    """``rel`` under ``base``, refused when it would lead out of it."""
    path = Path(rel)
    if path.is_absolute() or ".." in path.parts or not rel:
        raise ValueError(f"a shipped path outside its directory: {rel!r}")
    return base / path


def write_shipment(run_dir: Path, shipment: Shipment) -> None:
    """The driver's part: a shipment's bytes into the run directory, the journal's last."""
    edir = _inside(run_dir, shipment.episode)
    if shipment.fresh and edir.exists():
        remove_tree(edir)  # what an earlier attempt left: the episode began again (as open_checkpoint does)
    for rel in shipment.removed:
        with contextlib.suppress(FileNotFoundError):
            _inside(edir, rel).unlink()
    for piece in shipment.pieces:
        path = _inside(edir, piece.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("r+b" if path.is_file() else "wb") as f:
            f.truncate(piece.offset)  # a torn tail a killed driver left beyond it: cut off
            f.seek(piece.offset)
            f.write(piece.data)


def pack_episode(edir: Path) -> bytes | None:
    """The episode directory as a tar for a task to resume from (its sandbox's files left out: the
    checkpoint puts them back); None when it holds no checkpoint (the episode begins afresh)."""
    if not (edir / DIR).exists():
        return None
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for entry in sorted(edir.iterdir()):
            if entry.name not in _SKIP:
                tar.add(entry, arcname=entry.name)
    return buf.getvalue()


_Facts = tuple[int, int, int]  # inode, size, mtime (ns)


class Mirror:
    """The task's side: each committed checkpoint of its episode shipped to the driver, from a
    thread of its own (the runner's turn never waits for the driver). Checkpoints that come faster
    than they are shipped are shipped together: only the last one's bytes matter."""

    def __init__(self, mailbox: Any, out_dir: Path, episode: str) -> None:
        self._mailbox, self._out, self._episode = mailbox, out_dir, episode
        self._cond = threading.Condition()
        self._pending: tuple[int, int] | None = None  # (journal end, data end) of the last commit not shipped
        self._busy = False  # a shipment being read or sent
        self._closed = False
        # What the driver holds (as this task shipped it, or shipped it here to resume from):
        self._journal = self._data = 0
        self._files: dict[str, tuple[_Facts, bytes]] = {}  # path -> its facts and its last bytes
        self._fresh = False
        self._thread = threading.Thread(target=self._run, name="checkpoint-mirror", daemon=True)
        self._thread.start()

    def seed(self) -> None:
        """The episode directory, just unpacked from the driver's: the driver holds all of it."""
        root = self._out / DIR
        self._journal, self._data = _size(root / JOURNAL), _size(root / DATA)
        for rel, facts in self._walk().items():
            with contextlib.suppress(OSError):
                self._files[rel] = (facts, _last_bytes(self._out / rel, facts[1]))

    def attach(self, checkpoint: "EpisodeCheckpoint") -> None:
        """An attempt's checkpoints, just opened (rollout.Rollout.on_checkpoint)."""
        with self._cond:
            if checkpoint.resume is None:  # from turn 1 (none, or an unusable one set aside): start over
                self._pending, self._fresh = None, True
                self._journal = self._data = 0
                self._files.clear()
            else:  # the journal and data cut back to the checkpoint's end: the driver's too, next time
                root = self._out / DIR
                self._journal = min(self._journal, _size(root / JOURNAL))
                self._data = min(self._data, _size(root / DATA))
        checkpoint.on_commit = self._committed

    def _committed(self, marker: Marker, journal_end: int) -> None:
        parts = [*marker.tars, *([marker.paths] if marker.paths else [])]
        data_end = max((e for n in parts if (e := part_end(self._out / DIR, n)) is not None), default=0)
        with self._cond:
            self._pending = (journal_end, data_end)
            self._cond.notify_all()

    def close(self, *, ship_rest: bool) -> None:
        """No more checkpoints. ``ship_rest``: the ones not yet shipped reach the mailbox first (a
        drained episode's last); else only the shipment already under way is waited for (the
        episode's files come back whole with its result)."""
        with self._cond:
            if not ship_rest:
                self._pending = None
            self._cond.wait_for(lambda: self._pending is None and not self._busy, timeout=60)
            self._closed = True
            self._cond.notify_all()

    def _run(self) -> None:
        import ray

        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None or self._closed)
                if self._pending is None:
                    return
                ends, self._pending = self._pending, None
                self._busy = True
                try:
                    # read under the lock: a new attempt's reset (attach) never meets half a read
                    shipment = self._shipment(*ends)
                except Exception:  # gone meanwhile (a new attempt tidied it): the next commit ships it
                    shipment = None  # (and this thread lives on: close() waits for it)
            try:
                if shipment is not None:
                    ray.get(self._mailbox.put.remote(shipment))
            except ray.exceptions.RayError:
                with self._cond:  # the driver is gone: nothing more to ship to
                    self._closed, self._pending = True, None
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _shipment(self, journal_end: int, data_end: int) -> Shipment:
        """What the driver lacks of the checkpoint that ends at these offsets (under the lock)."""
        root = self._out / DIR
        pieces: list[Piece] = []
        now = self._walk()
        removed = sorted(set(self._files) - set(now))
        files = dict(self._files)
        for rel in removed:
            del files[rel]
        for rel, facts in now.items():
            shipped = files.get(rel)
            if shipped is not None and shipped[0] == facts:
                continue
            try:
                piece, size, tail = _file_piece(self._out / rel, rel, shipped)
            except FileNotFoundError:
                # Gone since the walk: a writer's temporary file renamed, the SDK's event-count
                # marker replaced. Skipped, not fatal: an error here dropped the episode's last
                # checkpoint (seen under load: a drained Ray episode resumed a turn early).
                if rel in files:
                    removed.append(rel)
                    del files[rel]
                continue
            pieces.append(piece)
            files[rel] = ((facts[0], size, facts[2]), tail)  # the size shipped (it may have grown since)
        if data_end > self._data:
            pieces.append(Piece(f"{DIR}/{DATA}", self._data, _read(root / DATA, self._data, data_end)))
        journal = Piece(f"{DIR}/{JOURNAL}", self._journal, _read(root / JOURNAL, self._journal, journal_end))
        shipment = Shipment(self._episode, self._fresh, removed, [*pieces, journal])
        # taken as the driver's from here (a failed send stops the mirror altogether)
        self._files, self._fresh = files, False
        self._data, self._journal = max(self._data, data_end), journal_end
        return shipment

    def _walk(self) -> dict[str, _Facts]:
        """Every regular file of the episode directory but its sandbox's and its checkpoint's."""
        return {
            rel: (facts[4], facts[3], facts[1])  # inode, size, mtime
            for rel, facts in tree.walk(str(self._out), skip=(*_SKIP, DIR)).items()
            if stat.S_ISREG(facts[0])
        }


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read(path: Path, start: int, end: int) -> bytes:
    with path.open("rb") as f:
        f.seek(start)
        data = f.read(end - start)
    if len(data) != end - start:
        raise OSError(f"{path.name} ends before {end}")
    return data


def _last_bytes(path: Path, size: int) -> bytes:
    return _read(path, max(0, size - _TAIL), size) if size else b""


def _file_piece(path: Path, rel: str, shipped: tuple[_Facts, bytes] | None) -> tuple[Piece, int, bytes]:
    """A changed file's piece (its new bytes when it grew by appending: the same inode and the
    bytes it ended with still there; else all of it), its size as shipped and its last bytes."""
    if shipped is not None:
        (ino, old, _), tail = shipped
        st = path.stat()
        if ino == st.st_ino and st.st_size > old:
            data = _read(path, old - len(tail), st.st_size)
            if data[: len(tail)] == tail:
                return Piece(rel, old, data[len(tail) :]), st.st_size, data[-_TAIL:]
    data = path.read_bytes()
    return Piece(rel, 0, data), len(data), data[-_TAIL:]
