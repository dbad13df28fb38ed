"""``harness runtime prune``: task images the harness made or pulled, removed when stale.

Task images pile up: every change to a task's environment/ builds a new
``localhost/harness-task-<task>:<hash>`` and leaves the old one, and a Terminal-Bench 2 suite pulls
one multi-GB ``docker_image`` per task. What is removed:

- by default, the stale ones: a harness-built task image whose task has a newer build (same
  repository, older image), and a killed run's ``localhost/harness-phase`` images (an agent's
  container committed for a verifier on another network);
- with ``everything``: every harness-built task image, and every image the harness pulled for a
  task (recorded in ``<cache>/images/pulled.txt`` when it pulled them); both come back (rebuilt,
  pulled) when a run needs them.

Never removed: an image any container uses (running or stopped: a run may still verify in it),
the sandbox image, and images the harness neither built nor pulled. ``match`` narrows it all to
references matching a glob.
"""

import fcntl
import fnmatch
import re
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from harness.paths import cache_dir
from harness.runtime.engine import containers_now

if TYPE_CHECKING:
    import docker

BUILT_PREFIX = "localhost/harness-task-"
PHASE_PREFIX = "localhost/harness-phase:"  # container.PHASE_IMAGE (a killed run's leftover)


class PruneReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    removed: list[str]  # references (tags) removed, or that would be with dry_run
    in_use: list[str]  # candidates kept because a container uses their image
    freed_bytes: int  # sizes of the images left with no tag (an estimate: layers may be shared)
    dry_run: bool


def pulled_record() -> Path:
    return cache_dir() / "images" / "pulled.txt"


def record_pull(ref: str) -> None:
    """Remember that the harness pulled ``ref`` for a task (prune --all may remove it later)."""
    path = pulled_record()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        if ref not in fh.read().splitlines():
            fh.write(ref + "\n")


def _pulled() -> set[str]:
    path = pulled_record()
    return set(path.read_text().split()) if path.is_file() else set()


def _forget_pulls(refs: set[str]) -> None:
    path = pulled_record()
    if not refs or not path.is_file():
        return
    with open(path, "r+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        kept = [line for line in fh.read().splitlines() if line and line not in refs]
        fh.seek(0)
        fh.truncate()
        fh.write("".join(f"{line}\n" for line in kept))


def _created(value: object) -> float:
    """An image's creation time as seconds (Docker writes RFC 3339 with nanoseconds, podman too)."""
    if isinstance(value, int | float):
        return float(value)
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:?\d\d)?", str(value))
    if not m:
        return 0.0
    zone = m.group(3) or "Z"
    stamp = datetime.fromisoformat(m.group(1) + ("+00:00" if zone == "Z" else zone))
    return stamp.timestamp() + float(f"0.{m.group(2) or 0}")


def _repository(tag: str) -> str:
    return tag.rsplit(":", 1)[0] if ":" in tag.rsplit("/", 1)[-1] else tag


def prune_task_images(
    client: "docker.DockerClient",
    *,
    everything: bool = False,
    match: str | None = None,
    dry_run: bool = False,
) -> PruneReport:
    """Remove stale task images (``everything``: all the harness built or pulled); see the module."""
    from docker.errors import APIError, NotFound

    pulled = _pulled()
    images = client.images.list()
    used = {str(c.attrs.get("Image") or "") for c in containers_now(client)}
    built: dict[str, list[tuple[float, str, str]]] = {}  # repository -> [(created, image id, tag)]
    candidates: list[tuple[str, str]] = []  # (tag, image id)
    for image in images:
        created = _created(image.attrs.get("Created"))
        for tag in image.tags:
            if tag.startswith(PHASE_PREFIX):  # an agent's container committed for its verifier: a leftover
                candidates.append((tag, str(image.id)))
            elif tag.startswith(BUILT_PREFIX):
                built.setdefault(_repository(tag), []).append((created, str(image.id), tag))
            elif everything and tag in pulled:
                candidates.append((tag, str(image.id)))
    for entries in built.values():
        entries.sort()
        stale = entries if everything else entries[:-1]  # the newest build of a task is its current one
        candidates += [(tag, image_id) for _, image_id, tag in stale]
    if match:
        candidates = [(t, i) for t, i in candidates if fnmatch.fnmatchcase(t, match)]
    removed: list[str] = []
    in_use: list[str] = []
    for tag, image_id in sorted(candidates):
        if image_id in used:
            in_use.append(tag)
            continue
        if not dry_run:
            try:
                client.images.remove(tag)
            except NotFound:  # gone already (another prune)
                pass
            except APIError:  # in use after all (a container started since), or a conflict
                in_use.append(tag)
                continue
        removed.append(tag)
    gone = set(removed)
    freed = sum(
        int(image.attrs.get("Size") or 0)
        for image in images
        if image.tags and all(t in gone for t in image.tags)
    )
    if not dry_run:
        _forget_pulls(gone & pulled)
    return PruneReport(removed=removed, in_use=sorted(in_use), freed_bytes=freed, dry_run=dry_run)
