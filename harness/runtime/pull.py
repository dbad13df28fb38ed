"""Pulling a task's prebuilt image from its registry, with progress, and saying in one line why not.

The engine pulls (``POST /images/create``): it authenticates as it is configured to (docker-py
sends the credentials of ``docker login`` from ``~/.docker/config.json``; podman's service reads
its own auth file, ``podman login``), and decides which registries it may reach over plain HTTP
(Docker: ``insecure-registries`` in daemon.json, 127.0.0.0/8 by default; podman:
``insecure = true`` in registries.conf). The harness never sees a password, and what it prints of
an engine's error is scrubbed of anything that looks like one.

Progress: Docker reports bytes per layer as it downloads; podman 4 reports only layers
(``Pulling fs layer`` / ``Download complete`` / ``Already exists``). The spinner shows what the
engine gives; the line at the end says how many layers came and how many were already here.
"""

import contextlib
import re
import time
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict
from rich.markup import escape

from harness.progress import console, spinner

if TYPE_CHECKING:
    import docker

MAX_LINE = 200  # the one line a failed pull is reported in

# What registries and engines answer, in a few words (first match wins; lower-cased text).
_WHY = (
    ("server gave http response to https client", "the registry speaks plain HTTP: mark it insecure"),
    ("manifest unknown", "not in the registry"),
    ("name unknown", "not in the registry"),
    ("not found", "not in the registry"),
    ("unauthorized", "access denied: log in (docker login / podman login)"),
    ("authentication required", "access denied: log in (docker login / podman login)"),
    ("denied", "access denied: log in (docker login / podman login)"),
    ("toomanyrequests", "rate-limited by the registry"),
    ("no such host", "no such registry host"),
    ("server misbehaving", "no such registry host"),
    ("connection refused", "the registry refused the connection"),
    ("network is unreachable", "no network to the registry"),
    ("i/o timeout", "the registry timed out"),
    ("timeout", "the registry timed out"),
    ("x509", "the registry's TLS certificate is not trusted"),
    ("certificate", "the registry's TLS certificate is not trusted"),
    ("short-name", "a short name the engine will not resolve: write REGISTRY/NAME"),
    ("no space left", "no space left on the engine's disk"),
)
_SECRETS = (
    re.compile(r"(://)[^/@\s:]+:[^/@\s]+@"),  # scheme://user:password@host
    re.compile(r"\b(Basic|Bearer)\s+[A-Za-z0-9._~+/=-]+", re.IGNORECASE),
    re.compile(r"((?:password|token|secret|auth)[\"']?\s*[:=]\s*)[^\s,;\"'}]+", re.IGNORECASE),
)


def scrub(text: str) -> str:
    """``text`` without anything that looks like a credential (a URL's user:password, a token)."""
    text = _SECRETS[0].sub(r"\1***@", text)
    text = _SECRETS[1].sub(r"\1 ***", text)
    return _SECRETS[2].sub(r"\1***", text)


def why(error: str) -> str:
    """An engine's pull error in a few words."""
    low = error.lower()
    for needle, words in _WHY:
        if needle in low:
            return words
    last = scrub(error).strip().rstrip(".").rsplit(": ", 1)[-1]
    return last if len(last) <= 60 else last[:57] + "..."


def failure_line(ref: str, error: str, asked: str | None = None) -> str:
    """One line (at most MAX_LINE characters) naming the image, why the pull failed, and the
    --image-map that points it at a mirror. ``asked``: the reference the task wrote, when
    --image-map made ``ref`` of it."""
    original = asked or ref
    mapped = f" (mapped from {asked})" if asked and asked != ref else ""
    reason = why(error)
    for hint in (f"--image-map {original}=YOUR_REGISTRY/IMAGE", "--image-map IMAGE=YOUR_REGISTRY/IMAGE"):
        for shown in (mapped, ""):
            line = f"cannot pull {ref}{shown}: {reason}; mirror it and pass {hint}"
            if len(line) <= MAX_LINE:
                return line
    head = f"cannot pull {ref}: "
    tail = "; pass --image-map IMAGE=YOUR_REGISTRY/IMAGE"
    room = MAX_LINE - len(head) - len(tail)
    if room >= 12:
        return head + (reason if len(reason) <= room else reason[: room - 3] + "...") + tail
    return (head + reason)[: MAX_LINE - 3] + "..."


class Pulled(BaseModel):
    """What one pull did: layers fetched and already here, bytes when the engine reported them."""

    model_config = ConfigDict(frozen=True)

    ref: str
    layers: int
    cached_layers: int
    bytes: int  # downloaded; 0 when the engine reports no byte counts (podman)
    size: int  # the image's size in the engine (unpacked)
    seconds: float


class PullFailed(Exception):
    """The engine could not pull the image; ``error`` is its message (scrubbed)."""

    def __init__(self, ref: str, error: str) -> None:
        super().__init__(f"{ref}: {error}")
        self.ref, self.error = ref, error


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


class _Quiet:
    def update(self, text: str) -> None:
        pass


class _Layers:
    """The progress events of one pull, summed up."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.cached: set[str] = set()
        self.done: set[str] = set()
        self.current: dict[str, int] = {}
        self.total: dict[str, int] = {}

    def add(self, event: dict[str, Any]) -> None:
        layer = str(event.get("id") or "")
        state = str(event.get("status") or "")
        if not layer or layer.startswith(("sha256:", "latest")) or " " in layer:
            return
        detail = event.get("progressDetail") or {}
        if state.startswith("Pulling fs layer") or state.startswith("Waiting"):
            self.seen.add(layer)
        elif state.startswith("Already exists"):
            self.seen.add(layer)
            self.cached.add(layer)
        elif state.startswith("Downloading"):
            self.seen.add(layer)
            if isinstance(detail.get("current"), int):
                self.current[layer] = detail["current"]
            if isinstance(detail.get("total"), int) and detail["total"] > 0:
                self.total[layer] = detail["total"]
        elif state.startswith(("Download complete", "Pull complete")):
            self.seen.add(layer)
            self.done.add(layer)
            if layer in self.total:
                self.current[layer] = self.total[layer]

    @property
    def bytes(self) -> int:
        return sum(self.current.values())

    def summary(self) -> str:
        fetched = len(self.seen - self.cached)
        text = f"{len(self.done - self.cached)}/{fetched} layers"
        if self.total:
            text += f", {_mb(self.bytes)} of {_mb(sum(self.total.values()))}"
        return text


def pull_image(client: "docker.DockerClient", ref: str, *, live: bool = True) -> Pulled:
    """Pull ``ref`` through the engine with a progress display (``live``: a spinner of its own;
    else only the line at the end, for pulls running side by side under one display); PullFailed
    with the engine's (scrubbed) error when it cannot."""
    from docker.errors import DockerException

    start = time.monotonic()
    layers = _Layers()
    error = ""
    shown = escape(ref)
    with spinner(f"Pulling {shown}") if live else contextlib.nullcontext(_Quiet()) as spin:
        try:
            for event in client.api.pull(ref, stream=True, decode=True):
                if not isinstance(event, dict):
                    continue
                if event.get("error") or event.get("errorDetail"):
                    detail = event.get("errorDetail") or {}
                    error = str(event.get("error") or detail.get("message") or "")
                    continue
                layers.add(event)
                spin.update(f"Pulling {shown}: {layers.summary()}")
        except DockerException as exc:
            error = str(getattr(exc, "explanation", None) or exc)
        except OSError as exc:  # the engine's socket went away
            error = str(exc)
    if error:
        raise PullFailed(ref, scrub(error))
    try:  # the image as the engine now has it (podman counts the config blob among "layers")
        attrs = client.images.get(ref).attrs
    except DockerException as exc:
        raise PullFailed(ref, f"the engine reported a pull but has no such image ({exc})") from None
    total = len((attrs.get("RootFS") or {}).get("Layers") or [])
    cached = min(len(layers.cached), total)
    pulled = Pulled(
        ref=ref,
        layers=total - cached,
        cached_layers=cached,
        bytes=layers.bytes,
        size=int(attrs.get("Size") or 0),
        seconds=time.monotonic() - start,
    )
    here = f", {cached} already here" if cached else ""
    got = f", {_mb(pulled.bytes)} downloaded" if pulled.bytes else ""
    console.print(
        f"[green]✓[/] pulled {shown} ({pulled.layers} layer{'s' if pulled.layers != 1 else ''}{here}{got}, "
        f"{_mb(pulled.size)} unpacked, {pulled.seconds:.1f} s)",
        highlight=False,
    )
    return pulled
