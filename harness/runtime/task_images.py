"""Task images: a Harbor task's own environment, built from its Dockerfile or named by
``[environment] docker_image``, for the docker runtime.

Built as Harbor builds them (build context ``environment/``), tagged
``localhost/harness-task-<task>:<hash of the context>`` so an unchanged task is never rebuilt. A
``docker_image`` is used when the engine has it or can pull it, else built from the task's
Dockerfile when it has one. A build that fails, or an image that cannot be had, is the task's
failure, not the run's: its episodes end as errors carrying the reason, and the other tasks run.

``--image-map FROM=TO`` substitutes images for air-gapped machines: a ``docker_image`` or a
Dockerfile's ``FROM`` image written exactly FROM becomes TO; a FROM ending in ``/`` or ``:`` is
a prefix (``docker.io/library/=mirror.local/library/``). A rewritten Dockerfile is built from a
temporary copy of the context, so the cache tag follows the image actually built.
"""

import hashlib
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from harness.errors import HarnessError
from harness.progress import progress_bar
from harness.tasks import Task

if TYPE_CHECKING:
    import docker

_TAIL_LINES = 12


class TaskImageError(HarnessError):
    """A task's image could not be had (build failed, not in the engine)."""


def context_hash(context: Path) -> str:
    """Content hash of a build context (paths, modes, bytes), independent of timestamps."""
    digest = hashlib.sha256()
    for path in sorted(p for p in context.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(context).as_posix()
        digest.update(rel.encode() + b"\0" + oct(path.lstat().st_mode).encode() + b"\0")
        digest.update((str(path.readlink()) if path.is_symlink() else "").encode() + b"\0")
        if path.is_file() and not path.is_symlink():
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _has(client: "docker.DockerClient", ref: str) -> bool:
    from docker.errors import ImageNotFound

    try:
        client.images.get(ref)
    except ImageNotFound:
        return False
    return True


def parse_image_map(entries: Iterable[str]) -> dict[str, str]:
    """``FROM=TO`` strings as a mapping; a malformed one is a one-line error naming the flag."""
    out: dict[str, str] = {}
    for entry in entries:
        src, sep, dst = entry.partition("=")
        if not sep or not src.strip() or not dst.strip():
            raise HarnessError(
                f"--image-map {entry!r}: write FROM=TO, e.g. --image-map python:3.12-slim=mirror.local/python:3.12-slim"
            )
        out[src.strip()] = dst.strip()
    return out


def map_image(ref: str, image_map: Mapping[str, str]) -> str:
    """``ref`` after --image-map: an exact entry, else the longest prefix entry (ending in / or :)."""
    if ref in image_map:
        return image_map[ref]
    for src in sorted(image_map, key=len, reverse=True):
        if src.endswith(("/", ":")) and ref.startswith(src):
            return image_map[src] + ref[len(src) :]
    return ref


_FROM = re.compile(r"^(\s*FROM\s+(?:--\S+\s+)*)(\S+)(.*)$", re.IGNORECASE)


def base_images(dockerfile_text: str) -> list[str]:
    """The images a Dockerfile's FROM lines name (earlier stages' names excluded)."""
    stages: set[str] = set()
    images: list[str] = []
    for line in dockerfile_text.splitlines():
        if m := _FROM.match(line):
            if m.group(2).lower() not in stages and "$" not in m.group(2):
                images.append(m.group(2))
            alias = m.group(3).split()
            if len(alias) >= 2 and alias[0].upper() == "AS":
                stages.add(alias[1].lower())
    return images


def rewrite_from(dockerfile_text: str, image_map: Mapping[str, str]) -> str:
    """The Dockerfile with each FROM image passed through --image-map."""
    if not image_map:
        return dockerfile_text
    lines = dockerfile_text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if (m := _FROM.match(line.rstrip("\r\n"))) and (new := map_image(m.group(2), image_map)) != m.group(
            2
        ):
            lines[i] = m.group(1) + new + m.group(3) + line[len(line.rstrip("\r\n")) :]
    return "".join(lines)


def _pull(client: "docker.DockerClient", ref: str) -> bool:
    """Ask the engine to pull ``ref`` (an air-gapped engine answers at once that it cannot)."""
    try:
        client.images.pull(ref)
    except Exception:  # not found, no registry, bad reference: the caller says what to do
        return False
    return _has(client, ref)


def _tag(task: Task, context: Path) -> str:
    name = re.sub(r"[^a-z0-9._-]+", "-", task.id.lower()).strip(".-_") or "task"
    return f"localhost/harness-task-{name[:60]}:{context_hash(context)}"


def build_task_image(
    client: "docker.DockerClient", task: Task, image_map: Mapping[str, str] | None = None
) -> str:
    """The task's image reference, pulled or built when needed; TaskImageError with the reason else."""
    spec = task.image
    assert spec is not None
    image_map = image_map or {}
    if spec.ref:
        ref = map_image(spec.ref, image_map)
        if _has(client, ref) or _pull(client, ref):
            return ref
        if spec.dockerfile is None:
            mapped = f" (--image-map gave it for {spec.ref})" if ref != spec.ref else ""
            raise TaskImageError(
                f"{task.path / 'task.toml'}: [environment] docker_image {ref}{mapped} is not in the container "
                "engine, cannot be pulled, and the task has no environment/Dockerfile to build it: load it into "
                f"the engine, or mirror it and pass --image-map {spec.ref}=YOUR_REGISTRY/IMAGE"
            )
    dockerfile = spec.dockerfile
    assert dockerfile is not None
    text = dockerfile.read_text(errors="replace")
    rewritten = rewrite_from(text, image_map)
    with tempfile.TemporaryDirectory(prefix="harness-context-") as tmp:
        context = dockerfile.parent
        if rewritten != text:  # build the rewritten Dockerfile from a copy: the task stays as it is
            context = Path(tmp) / "context"
            shutil.copytree(dockerfile.parent, context, symlinks=True)
            (context / dockerfile.name).write_text(rewritten)
        tag = _tag(task, context)
        if _has(client, tag):
            return tag
        log, error = _build(client, context, dockerfile.name, tag)
    if error or not _has(client, tag):
        tail = " | ".join([*log[-_TAIL_LINES:], error][-_TAIL_LINES:])
        missing = [b for b in base_images(rewritten) if not _has(client, b)]
        hint = (
            f"; the base image {missing[0]} is not in the engine: pull it, or mirror it and pass "
            f"--image-map {missing[0]}=YOUR_REGISTRY/IMAGE"
            if missing
            else ""
        )
        raise TaskImageError(f"{dockerfile}: the image build failed: {tail}{hint}")
    return tag


def _build(client: "docker.DockerClient", context: Path, dockerfile: str, tag: str) -> tuple[list[str], str]:
    """Build ``tag``; the log's lines and the error the engine reported ("" when none)."""
    log: list[str] = []
    error = ""
    try:
        for chunk in client.api.build(
            path=str(context), dockerfile=dockerfile, tag=tag, rm=True, forcerm=True, decode=True
        ):
            if "stream" in chunk:
                log.extend(line for line in str(chunk["stream"]).splitlines() if line.strip())
            if "error" in chunk or "errorDetail" in chunk:
                error = str(chunk.get("error") or (chunk.get("errorDetail") or {}).get("message") or "")
    except Exception as exc:  # the engine refused the build itself (bad context, API error)
        error = str(exc)
    return log, error


def resolve_task_images(
    client: "docker.DockerClient", tasks: list[Task], image_map: Mapping[str, str] | None = None
) -> dict[str, str | TaskImageError]:
    """Every image task's image, pulled or built with a progress bar; a failed one maps to its error."""
    todo = [t for t in tasks if t.image is not None]
    out: dict[str, str | TaskImageError] = {}
    if not todo:
        return out
    with progress_bar("task images", len(todo)) as bar:  # in a log: a line at intervals
        for task in todo:
            try:
                out[task.id] = build_task_image(client, task, image_map)
            except TaskImageError as exc:
                out[task.id] = exc
                bar.print(f"  [red]{task.id}[/]: no image (its episodes will error): {escape(str(exc))}")
            bar.advance()
    return out


def image_workdir(client: "docker.DockerClient", ref: str) -> str:
    config = client.images.get(ref).attrs.get("Config") or {}
    return str(config.get("WorkingDir") or "/")
