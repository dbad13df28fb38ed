"""Task images: a Harbor task's own environment, built from its Dockerfile or named by
``[environment] docker_image``, for the docker runtime.

Built as Harbor builds them (build context ``environment/``; RUN steps on the engine's bridge
network, never in this machine's network namespace: see BUILD_NETWORK), tagged
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
import json
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from harness.errors import HarnessError
from harness.progress import progress_bar
from harness.tasks import Task
from harness.tasks.identifiers import is_image_reference

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
        if not is_image_reference(ref):  # it would go into the engine's API paths as it is
            raise TaskImageError(
                f"{task.path / 'task.toml'}: [environment] docker_image {ref!r}"
                + (f" (--image-map gave it for {spec.ref})" if ref != spec.ref else "")
                + ": not an image reference ([registry[:port]/]name[:tag][@digest], name in lower case)"
            )
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
        missing = [b for b in base_images(rewritten) if is_image_reference(b) and not _has(client, b)]
        hint = (
            f"; the base image {missing[0]} is not in the engine: pull it, or mirror it and pass "
            f"--image-map {missing[0]}=YOUR_REGISTRY/IMAGE"
            if missing
            else ""
        )
        raise TaskImageError(f"{dockerfile}: the image build failed: {tail}{hint}")
    return tag


# RUN steps get a network namespace of their own, on the engine's bridge: package indexes and
# registries answer, this machine's loopback does not (a Dockerfile fetched a token from a service
# bound to the host's 127.0.0.1). Docker's builder reads `networkmode`; podman's Docker-API build
# ignores it and runs RUN steps in the host's network namespace unless `nsoptions` asks for a
# private one (podman 4.3 to 5.x), which Docker ignores in turn. Both are sent.
BUILD_NETWORK = {"networkmode": "bridge", "nsoptions": json.dumps([{"Name": "network", "Host": False}])}


def _build_stream(client: "docker.DockerClient", context: Path, dockerfile: str, tag: str) -> Iterator[Any]:
    """``client.api.build(path=context, dockerfile=..., tag=..., rm=True, forcerm=True, decode=True)``
    with BUILD_NETWORK added: docker-py has no parameter for podman's ``nsoptions``, so its request
    is made here as docker-py 7 makes it (the context tar, .dockerignore, registry auth header)."""
    from docker.api.build import process_dockerfile
    from docker.utils import tar

    ignore = context / ".dockerignore"
    lines = [line.strip() for line in ignore.read_text().splitlines()] if ignore.is_file() else []
    exclude = [line for line in lines if line and not line.startswith("#")] or None
    name = process_dockerfile(dockerfile, str(context))
    api = client.api
    headers = {"Content-Type": "application/tar"}
    api._set_auth_headers(headers)
    params = {"t": tag, "rm": True, "forcerm": True, "dockerfile": name, **BUILD_NETWORK}
    with tar(str(context), exclude=exclude, dockerfile=name) as body:
        response = api._post(
            api._url("/build"), data=body, params=params, headers=headers, stream=True, timeout=None
        )
    return api._stream_helper(response, decode=True)  # type: ignore[no-any-return]


def _build(client: "docker.DockerClient", context: Path, dockerfile: str, tag: str) -> tuple[list[str], str]:
    """Build ``tag``; the log's lines and the error the engine reported ("" when none)."""
    log: list[str] = []
    error = ""
    try:
        for chunk in _build_stream(client, context, dockerfile, tag):
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
            except Exception as exc:  # whatever one task's image does, the others go on
                if not isinstance(exc, TaskImageError):
                    what = task.image.ref or task.image.dockerfile if task.image else None
                    exc = TaskImageError(f"{task.path}: no image for {what}: {type(exc).__name__}: {exc}")
                out[task.id] = exc
                bar.print(f"  [red]{task.id}[/]: no image (its episodes will error): {escape(str(exc))}")
            bar.advance()
    return out


def image_workdir(client: "docker.DockerClient", ref: str) -> str:
    config = client.images.get(ref).attrs.get("Config") or {}
    return str(config.get("WorkingDir") or "/")
