"""Task images: a Harbor task's own environment, built from its Dockerfile or named by
``[environment] docker_image``, for the docker runtime.

Built as Harbor builds them (build context ``environment/``; RUN steps on the engine's bridge
network, never in this machine's network namespace: see BUILD_NETWORK), tagged
``localhost/harness-task-<task>:<hash of the context>`` so an unchanged task is never rebuilt. A
``docker_image`` is used as Harbor uses it: taken from the engine when there, else pulled
(pull.py: progress, one line when it fails); its Dockerfile is built instead only under
``--force-build`` (Harbor's flag), never as a silent fallback. A build that fails, or an image
that cannot be had, is the task's failure, not the run's: its episodes end as errors carrying the
reason, and the other tasks run.

``--image-map FROM=TO`` substitutes images for air-gapped machines: a ``docker_image`` or a
Dockerfile's ``FROM`` image written exactly FROM becomes TO; a FROM ending in ``/`` or ``:`` is
a prefix (``docker.io/library/=mirror.local/library/``). A rewritten Dockerfile is built from a
temporary copy of the context, so the cache tag follows the image actually built.
"""

import contextlib
import hashlib
import json
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from harness.errors import HarnessError
from harness.progress import console, progress_bar, spinner
from harness.runtime.prune import record_pull
from harness.runtime.pull import PullFailed, failure_line, pull_image
from harness.tasks import Task, TaskImage
from harness.tasks.identifiers import is_image_reference

if TYPE_CHECKING:
    import docker

_TAIL_LINES = 3  # of a failed build's log, in its one-line error
_TAIL_CHARS = 300


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


def _tag(task: Task, context: Path) -> str:
    name = re.sub(r"[^a-z0-9._-]+", "-", task.id.lower()).strip(".-_") or "task"
    return f"localhost/harness-task-{name[:60]}:{context_hash(context)}"


def uses_prebuilt(task: Task, force_build: bool = False) -> bool:
    """Whether the task runs in its ``docker_image`` (pulled when the engine lacks it) rather than
    in an image built from its Dockerfile: Harbor's rule (``should_use_prebuilt_docker_image``):
    a ``docker_image`` is used unless ``--force-build`` is given and there is a Dockerfile."""
    spec = task.image
    return spec is not None and bool(spec.ref) and not (force_build and spec.dockerfile is not None)


def prebuilt_image(
    client: "docker.DockerClient",
    task: Task,
    image_map: Mapping[str, str] | None = None,
    failed: dict[str, TaskImageError] | None = None,
    *,
    live: bool = True,
) -> str:
    """The task's ``docker_image`` (after --image-map), pulled when the engine lacks it; a
    TaskImageError of one line otherwise. ``failed``: images that already failed in this run
    (each is tried once, however many tasks name it); ``live``: see pull_image."""
    spec = task.image
    assert spec is not None and spec.ref
    ref = map_image(spec.ref, image_map or {})
    if not is_image_reference(ref):  # it would go into the engine's API paths as it is
        raise TaskImageError(
            f"{task.path / 'task.toml'}: [environment] docker_image {ref!r}"
            + (f" (--image-map gave it for {spec.ref})" if ref != spec.ref else "")
            + ": not an image reference ([registry[:port]/]name[:tag][@digest], name in lower case)"
        )
    if failed is not None and ref in failed:
        raise failed[ref]
    if _has(client, ref):
        return ref
    try:
        pull_image(client, ref, live=live)
        record_pull(ref)  # `harness runtime prune --all` may remove it later
    except PullFailed as exc:
        error = TaskImageError(failure_line(ref, exc.error, spec.ref))
        if failed is not None:
            failed[ref] = error
        raise error from None
    return ref


# Two ways podman 4.3 fails a build although nothing is wrong with it; the same build again
# succeeds. Its build cache lookup reads every image's top layer: an image removed meanwhile
# (another build's intermediate, `runtime prune`, another run's cleanup) fails the lookup with
# "layer not known". And the service itself SIGKILLs a RUN step while other clients' containers
# come and go ("while running runtime: signal: killed", no OOM kill in the kernel's log;
# reproduced: a build's `sleep` step killed during another process's eval in containers, 5 times
# in 5, and in 0 of 5 with a container of its own running beside it; a step the kernel kills for
# memory reads the same, and fails each try).
_RACE_TRIES = 3
_ENGINE_RACES = ("layer not known", "while running runtime: signal: killed")


def engine_race(error: str) -> bool:
    """Whether a build failed on the engine's own trouble, not on the Dockerfile."""
    return any(race in error for race in _ENGINE_RACES)


def build_retrying(
    client: "docker.DockerClient", context: Path, dockerfile: str, tag: str, timeout: float | None = None
) -> tuple[list[str], str]:
    """``_build``, made again when the engine, not the Dockerfile, failed it (``_RACE_TRIES`` at most)."""
    log: list[str] = []
    error = ""
    for _ in range(_RACE_TRIES):
        log, error = _build(client, context, dockerfile, tag, timeout)
        if not engine_race(error):
            break
    return log, error


def build_task_image(
    client: "docker.DockerClient",
    task: Task,
    image_map: Mapping[str, str] | None = None,
    *,
    force_build: bool = False,
) -> str:
    """The task's image reference, pulled or built when needed; TaskImageError with the reason else."""
    spec = task.image
    assert spec is not None
    image_map = image_map or {}
    if uses_prebuilt(task, force_build):
        return prebuilt_image(client, task, image_map)
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
        log, error = build_retrying(
            client, context, dockerfile.name, tag, task.harbor.build_timeout_s if task.harbor else None
        )
    if error or not _has(client, tag):
        missing = [b for b in base_images(rewritten) if is_image_reference(b) and not _has(client, b)]
        hint = (
            f" (its base {missing[0]} is not in the engine: pull it, or mirror it and pass "
            f"--image-map {missing[0]}=YOUR_REGISTRY/IMAGE)"
            if missing
            else ""
        )
        tail = " | ".join([*log[-_TAIL_LINES:], error][-_TAIL_LINES:])
        tail = tail if len(tail) <= _TAIL_CHARS else "..." + tail[-_TAIL_CHARS:]
        raise TaskImageError(f"{dockerfile}: the image build failed{hint}: {tail}")
    return tag


# RUN steps get a network namespace of their own, on the engine's bridge: package indexes and
# registries answer, this machine's loopback does not (a Dockerfile fetched a token from a service
# bound to the host's 127.0.0.1). Docker's builder reads `networkmode`; podman's Docker-API build
# ignores it and runs RUN steps in the host's network namespace unless `nsoptions` asks for a
# private one (podman 4.3 to 5.x), which Docker ignores in turn. Both are sent.
BUILD_NETWORK = {"networkmode": "bridge", "nsoptions": json.dumps([{"Name": "network", "Host": False}])}


def _build_stream(
    client: "docker.DockerClient", context: Path, dockerfile: str, tag: str, timeout: float | None = None
) -> Iterator[Any]:
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
            api._url("/build"), data=body, params=params, headers=headers, stream=True, timeout=timeout
        )
    return api._stream_helper(response, decode=True)  # type: ignore[no-any-return]


def _build(
    client: "docker.DockerClient", context: Path, dockerfile: str, tag: str, timeout: float | None = None
) -> tuple[list[str], str]:
    """Build ``tag``; the log's lines and the error the engine reported ("" when none). Past
    ``timeout`` seconds (Harbor's ``build_timeout_sec``) the build is given up: an error."""
    log: list[str] = []
    error = ""
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        for chunk in _build_stream(client, context, dockerfile, tag, timeout):
            if deadline is not None and time.monotonic() > deadline:
                return log, f"took longer than [environment] build_timeout_sec = {timeout:g}"
            if "stream" in chunk:
                log.extend(line for line in str(chunk["stream"]).splitlines() if line.strip())
            if "error" in chunk or "errorDetail" in chunk:
                error = str(chunk.get("error") or (chunk.get("errorDetail") or {}).get("message") or "")
    except Exception as exc:  # the engine refused the build itself (bad context, API error), or silence
        if deadline is not None and time.monotonic() > deadline:
            return log, f"took longer than [environment] build_timeout_sec = {timeout:g}"
        error = str(exc)
    return log, error


def resolve_task_images(
    client: "docker.DockerClient",
    tasks: list[Task],
    image_map: Mapping[str, str] | None = None,
    *,
    force_build: bool = False,
) -> dict[str, str | TaskImageError]:
    """Every image task's image: prebuilt ones first, each pulled once (a progress line each),
    then the Dockerfile builds with a progress bar. A failed one maps to its error, said once
    per image (the tasks that need it name it again where their results are shown)."""
    todo = [t for t in tasks if t.image is not None]
    out: dict[str, str | TaskImageError] = {}
    failed: dict[str, TaskImageError] = {}
    said: set[int] = set()
    prebuilt = [t for t in todo if uses_prebuilt(t, force_build)]
    _pull_ahead(client, prebuilt, image_map or {}, failed)
    for task in prebuilt:
        try:
            out[task.id] = prebuilt_image(client, task, image_map, failed)
        except TaskImageError as exc:
            if id(exc) not in said:  # one line per image, however many tasks name it
                said.add(id(exc))
                console.print(
                    f"  [red]no image[/] (its episodes will error): {escape(str(exc))}", highlight=False
                )
            out[task.id] = exc
        except Exception as exc:  # an engine error: this task's, the others go on
            out[task.id] = TaskImageError(
                f"{task.image.ref if task.image else None}: {type(exc).__name__}: {exc}"
            )
    builds = [t for t in todo if t.id not in out]
    if not builds:
        return out
    for task in builds:
        if task.image is not None and task.image.ref:
            console.print(
                f"{escape(task.id)}: building environment/Dockerfile instead of pulling its docker_image "
                f"{escape(task.image.ref)} (--force-build)",
                highlight=False,
            )
    with progress_bar("task images", len(builds)) as bar:  # in a log: a line at intervals
        for task in builds:
            try:
                out[task.id] = build_task_image(client, task, image_map, force_build=force_build)
            except Exception as exc:  # whatever one task's image does, the others go on
                if not isinstance(exc, TaskImageError):
                    what = task.image.dockerfile if task.image else None
                    exc = TaskImageError(f"{task.path}: no image for {what}: {type(exc).__name__}: {exc}")
                out[task.id] = exc
                bar.print(
                    f"  [red]{escape(task.id)}[/]: no image (its episodes will error): {escape(str(exc))}"
                )
            bar.advance()
    return out


PULLS_AT_ONCE = 4  # images pulled side by side (the engine fetches their layers in parallel too)


def _pull_ahead(
    client: "docker.DockerClient",
    tasks: list[Task],
    image_map: Mapping[str, str],
    failed: dict[str, TaskImageError],
) -> None:
    """Every distinct ``docker_image`` of ``tasks`` the engine lacks, pulled PULLS_AT_ONCE at a time
    under one spinner (a line per image as it lands); failures land in ``failed``."""
    from concurrent.futures import ThreadPoolExecutor

    first: dict[str, Task] = {}
    for task in tasks:
        if task.image is not None and task.image.ref:
            ref = map_image(task.image.ref, image_map)
            if is_image_reference(ref):
                first.setdefault(ref, task)
    missing = [(ref, task) for ref, task in first.items() if not _has(client, ref)]
    if len(missing) < 2:
        return  # one pull shows its own progress
    done = 0
    with spinner(f"Pulling {len(missing)} images") as spin:

        def one(item: tuple[str, Task]) -> None:
            nonlocal done
            with contextlib.suppress(Exception):  # a failed pull is in ``failed``, said by the caller
                prebuilt_image(client, item[1], image_map, failed, live=False)
            done += 1
            spin.update(f"Pulling {len(missing)} images: {done} done")

        with ThreadPoolExecutor(max_workers=PULLS_AT_ONCE, thread_name_prefix="pull") as pool:
            list(pool.map(one, missing))


VERIFIER_SUFFIX = "-verifier"


def verifier_task(task: Task) -> Task | None:
    """A Harbor task's separate verifier as a task of its own for the image code (its image from
    ``[verifier.environment] docker_image`` or ``tests/Dockerfile``); None when it uses the task's
    own image, or the task has no separate verifier."""
    spec = task.harbor
    if spec is None or spec.verifier_mode != "separate":
        return None
    if spec.verifier_image:
        image = TaskImage(ref=spec.verifier_image)
    elif spec.verifier_dockerfile is not None:
        image = TaskImage(dockerfile=spec.verifier_dockerfile)
    else:
        return None
    return task.model_copy(update={"id": task.id + VERIFIER_SUFFIX, "image": image})


def image_workdir(client: "docker.DockerClient", ref: str) -> str:
    config = client.images.get(ref).attrs.get("Config") or {}
    return str(config.get("WorkingDir") or "/")
