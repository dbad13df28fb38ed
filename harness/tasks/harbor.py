"""Harbor / Terminal-Bench 2 task directories, run on this machine without Docker.

A Harbor task builds its container from ``environment/Dockerfile``: the agent works in the
image's WORKDIR (``/app`` by convention), the verifier uploads ``tests/`` to ``/tests`` and its
``test.sh`` writes the reward to ``/logs/verifier/reward.txt`` (or ``reward.json``), and the
oracle runs ``/solution/solve.sh``. A task whose Dockerfile only names a base image, sets WORKDIR
and ENV, and copies files of ``environment/`` into the working directory needs nothing of that
image beyond a shell and the tools of this machine. Such a task runs here: its workspace is built
from the COPY lines, and the container paths are rewritten to local ones in the instruction, the
tests, the solution and the Dockerfile's ENV values (which reach the tests and the solution; the
agent's shell starts with this machine's environment). A task that needs the image (RUN lines, files copied elsewhere, several
stages, a prebuilt ``docker_image``, docker-compose) is refused with the line that needs it.
"""

import json
import os
import posixpath
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from harness.errors import HarnessError

# Instructions that change nothing the agent or the tests can see outside a container.
_NO_EFFECT = {
    "LABEL",
    "MAINTAINER",
    "EXPOSE",
    "CMD",
    "ENTRYPOINT",
    "USER",
    "VOLUME",
    "STOPSIGNAL",
    "HEALTHCHECK",
    "SHELL",
    "ONBUILD",
}
# COPY/ADD options that change nothing a local copy can show (owner, mode, layer linking).
_KEPT_FLAGS = {"--chown", "--chmod", "--link"}
_ARCHIVE = re.compile(r"\.(tar|tgz|tbz2?|txz)(\.(gz|bz2|xz|zst))?$")

# Where Harbor puts things in the container, besides the working directory.
TESTS_DIR = "/tests"
LOGS_DIR = "/logs"
SOLUTION_DIR = "/solution"


class UnsupportedTask(HarnessError):
    """The task needs its container image; the harness runs tasks on this machine."""


class Copy(BaseModel):
    """One COPY/ADD source (a glob under environment/) and where it lands, relative to WORKDIR."""

    model_config = ConfigDict(frozen=True)

    source: str
    target: str  # "" is the working directory itself
    into_directory: bool  # the target is a directory the sources go into


class ContainerLayout(BaseModel):
    """What a no-image Harbor task's Dockerfile sets up, in terms this machine can reproduce."""

    model_config = ConfigDict(frozen=True)

    base_image: str
    workdir: str
    copies: tuple[Copy, ...] = ()
    env: dict[str, str] = {}

    def container_paths(self, workspace: Path, tests: Path, logs: Path, solution: Path) -> dict[str, Path]:
        return {self.workdir: workspace, TESTS_DIR: tests, LOGS_DIR: logs, SOLUTION_DIR: solution}


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, instruction): continuations joined as Docker joins them (the
    backslash-newline removed, nothing added), comment and blank lines dropped."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # also inside a continued instruction, as Docker does
        if not buf:
            start = number
        body = raw.rstrip()
        if body.endswith("\\"):
            buf.append(body[:-1])
            continue
        buf.append(body)
        out.append((start, "".join(buf).strip()))
        buf = []
    if buf:
        out.append((start, "".join(buf).strip()))
    return out


_VAR_AT = re.compile(r"\$(\w+)|\$\{(\w+)(?::([-+])([^}]*))?\}")


def _words(
    text: str, variables: Mapping[str, str], where: str, fallback: Mapping[str, str] | None = None
) -> list[str]:
    """Docker's word splitting, quote removal and variable substitution for one instruction.

    Whitespace outside quotes separates words; single quotes keep text literal; a backslash
    escapes the next character; $VAR, ${VAR}, ${VAR:-word} and ${VAR:+word} are replaced inside
    words (a value with spaces stays one word). A variable the Dockerfile does not set comes from
    ``fallback`` (for ENV: this machine's environment, standing in for the base image's, as in
    ENV PATH=/x:$PATH; unset is empty, as in Docker); without a fallback it is refused.
    """

    def value_of(m: re.Match[str]) -> str:
        name, op, word = m.group(1) or m.group(2), m.group(3), m.group(4) or ""
        if name in variables:
            current: str | None = variables[name]
        elif fallback is not None:
            current = fallback.get(name)
        elif op == "-":
            current = None
        else:
            raise UnsupportedTask(f"{where}: ${name} is set nowhere in the Dockerfile")
        if op == "-":
            return current if current else word
        if op == "+":
            return word if current else ""
        return current or ""

    words: list[str] = []
    word: list[str] | None = None
    quote: str | None = None
    i = 0
    while i < len(text):
        c = text[i]
        if quote is None and c.isspace():
            if word is not None:
                words.append("".join(word))
                word = None
            i += 1
            continue
        word = [] if word is None else word
        if quote == "'":
            if c == "'":
                quote = None
            else:
                word.append(c)
            i += 1
        elif c == "\\" and i + 1 < len(text):
            word.append(text[i + 1])
            i += 2
        elif c == '"' or (c == "'" and quote is None):
            quote = None if quote == c else c
            i += 1
        elif c == "$" and (m := _VAR_AT.match(text, i)):
            word.append(value_of(m))
            i = m.end()
        else:
            word.append(c)
            i += 1
    if quote is not None:
        raise UnsupportedTask(f"{where}: unterminated {quote} quote in {text[:60]!r}")
    if word is not None:
        words.append("".join(word))
    return words


def _assignments(words: list[str], op: str) -> list[tuple[str, str | None]]:
    """(name, value) pairs of an ENV or ARG line's words; an ARG name without a default: None."""
    if op == "ENV" and words and "=" not in words[0]:  # legacy form: ENV KEY value with spaces
        return [(words[0], " ".join(words[1:]))]
    return [(w.split("=", 1)[0], w.split("=", 1)[1] if "=" in w else None) for w in words]


def _copy_args(rest: str, where: str) -> tuple[list[str], list[str]]:
    """(flags, paths) of a COPY/ADD line, JSON or whitespace form."""
    words = rest.split()
    flags = [w for w in words if w.startswith("--")]
    body = " ".join(w for w in words if not w.startswith("--"))
    if body.startswith("["):
        try:
            paths = json.loads(body)
        except json.JSONDecodeError:
            raise UnsupportedTask(f"{where}: cannot read the JSON form {body!r}") from None
    else:
        paths = body.split()
    if len(paths) < 2:
        raise UnsupportedTask(f"{where}: needs a source and a destination")
    return flags, [str(p) for p in paths]


def parse_dockerfile(dockerfile: Path) -> ContainerLayout:
    """The layout of a Dockerfile that needs no image of its own; UnsupportedTask otherwise."""
    env_dir = dockerfile.parent.resolve()
    variables: dict[str, str] = {}
    build_args: set[str] = set()
    env: dict[str, str] = {}
    base_image = ""
    workdir = "/"
    pending: list[tuple[str, str, bool, str]] = []  # (source, absolute destination, into dir, where)
    for number, line in _logical_lines(dockerfile.read_text(errors="replace")):
        where = f"{dockerfile}:{number}"
        word, _, rest = line.partition(" ")
        op, rest = word.upper(), rest.strip()
        if op == "FROM":
            if base_image:
                raise UnsupportedTask(f"{where}: a second FROM (multi-stage build) needs Docker")
            base_image = rest.split()[0] if rest else ""
        elif op == "WORKDIR":
            words = _words(rest, variables, where)
            workdir = posixpath.normpath(posixpath.join(workdir, words[0] if words else ""))
        elif op in ("ENV", "ARG"):
            # Every value of one line sees the variables as they were before that line. A name
            # the Dockerfile does not set comes from this machine (standing in for the base
            # image: ENV PATH=/x:$PATH), except an ARG declared without a default: that one
            # comes from `docker build --build-arg`, so it is empty here as in a plain build.
            machine = {k: v for k, v in os.environ.items() if k not in build_args}
            pairs = _assignments(_words(rest, variables, where, fallback=machine), op)
            for key, value in pairs:
                if value is None:  # ARG NAME: declared, no default
                    if key not in variables:
                        build_args.add(key)
                    continue
                if op == "ARG" and key in variables:
                    continue  # an ARG does not override an ENV or an earlier ARG
                variables[key] = value
                if op == "ENV":
                    env[key] = value
        elif op in ("COPY", "ADD"):
            flags, paths = _copy_args(rest, where)
            if changing := [f for f in flags if f.split("=", 1)[0] not in _KEPT_FLAGS]:
                raise UnsupportedTask(f"{where}: {op} {changing[0]} is not replayed here; it needs Docker")
            *sources, dest = (" ".join(_words(p, variables, where)) for p in paths)
            for src in sources:
                if op == "ADD" and ("://" in src or src.startswith("git@") or _ARCHIVE.search(src)):
                    raise UnsupportedTask(f"{where}: ADD {src} (a download or an archive) needs Docker")
                if not (env_dir / src.lstrip("/")).resolve().is_relative_to(env_dir):
                    raise UnsupportedTask(f"{where}: {src} is outside environment/")
                if not (found := _matches(env_dir, src)):
                    raise UnsupportedTask(f"{where}: {src} is not in environment/")
                if escape := _link_out(env_dir, found):
                    raise UnsupportedTask(f"{where}: {src}: {escape}")
                if (env_dir / ".dockerignore").is_file() and (len(found) > 1 or found[0].is_dir()):
                    raise UnsupportedTask(
                        f"{where}: {src} with a .dockerignore beside the Dockerfile: not replayed here"
                    )
            into = dest.endswith("/") or len(sources) > 1 or dest in (".", "./")
            target = posixpath.normpath(posixpath.join(workdir, dest))
            pending.extend((src, target, into, where) for src in sources)
        elif op == "RUN":
            raise UnsupportedTask(
                f"{where}: RUN {rest[:60]}{'...' if len(rest) > 60 else ''} builds the image; "
                "the harness runs tasks on this machine without Docker"
            )
        elif op not in _NO_EFFECT:
            raise UnsupportedTask(f"{where}: {op} is not a Dockerfile instruction the harness knows")
    if not base_image:
        raise UnsupportedTask(f"{dockerfile}: no FROM line")
    if workdir == "/":
        raise UnsupportedTask(
            f"{dockerfile}: no WORKDIR, so no directory the agent works in (Harbor tasks use WORKDIR /app)"
        )
    copies = []
    for src, target, into, where in pending:
        if target != workdir and not target.startswith(workdir + "/"):
            raise UnsupportedTask(
                f"{where}: copies {src} to {target}, outside the working directory {workdir}"
            )
        rel = posixpath.relpath(target, workdir)
        copies.append(Copy(source=src, target="" if rel == "." else rel, into_directory=into))
    return ContainerLayout(base_image=base_image, workdir=workdir, copies=tuple(copies), env=env)


def _matches(env_dir: Path, source: str) -> list[Path]:
    """What a COPY source names in the build context (environment/): a path or a glob."""
    rel = source.strip("/") or "."
    if any(c in rel for c in "*?["):
        return sorted(env_dir.glob(rel))
    path = env_dir / rel
    return [path] if path.exists() else []


def _link_out(env_dir: Path, found: list[Path]) -> str | None:
    """Why copying ``found`` (glob matches, resolved) would reach outside environment/, or None.

    A glob match or a directory entry may be a symbolic link to anywhere on this machine
    (``COPY * .`` over ``secrets -> /home/me/.ssh``); Docker's build context never holds what
    such a link points to, so a replay that followed it would copy host files into the task.
    """
    root = env_dir.resolve()
    for path in found:
        if not path.resolve().is_relative_to(root):
            return f"{path.name} is a symbolic link out of environment/ (to {path.resolve()})"
        if path.is_dir():
            for parent, dirs, files in os.walk(path):  # does not descend into linked directories
                for name in dirs + files:
                    entry = Path(parent) / name
                    if entry.is_symlink() and not entry.resolve().is_relative_to(root):
                        return (
                            f"{entry.relative_to(env_dir)} is a symbolic link out of environment/ "
                            f"(to {entry.resolve()})"
                        )
    return None


def build_workspace(layout: ContainerLayout, env_dir: Path, dest: Path) -> Path:
    """The working directory as the image would hold it: the COPY lines replayed into ``dest``."""
    dest.mkdir(parents=True)
    for copy in layout.copies:
        sources = _matches(env_dir, copy.source)
        if escape := _link_out(env_dir, sources):  # checked again: the tree may have changed since
            raise UnsupportedTask(f"COPY {copy.source}: {escape}")
        target = dest / copy.target if copy.target else dest
        into = copy.into_directory or len(sources) > 1  # a glob naming several: Docker wants a dir
        for src in sources:
            if src.is_dir():  # Docker copies a directory's contents, not the directory
                shutil.copytree(src, target, symlinks=True, dirs_exist_ok=True)
            elif into or not copy.target or target.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target / src.name)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target)
    return dest


def _path_pattern(paths: Mapping[str, Path]) -> re.Pattern[str]:
    # Whole path components only: /app, /app/x, file:///app/x, "/app." at a sentence end; never
    # /application, /app.py, $HOME/app or https://host/app.
    names = sorted(paths, key=len, reverse=True)
    return re.compile(
        r"(?:(?<=file://)|(?<![\w.~/-]))(" + "|".join(map(re.escape, names)) + r")(?![\w-]|\.\w)"
    )


def localize(text: str, paths: Mapping[str, Path]) -> str:
    """``text`` with each container path in ``paths`` replaced by its local directory."""
    if not paths:
        return text
    return _path_pattern(paths).sub(lambda m: str(paths[m.group(1)]), text)


def copy_localized(src: Path, dest: Path, paths: Mapping[str, Path]) -> None:
    """Copy a directory, rewriting container paths in its text files (binary files as they are)."""
    pattern = _path_pattern(paths)
    for item in sorted(src.rglob("*")):
        out = dest / item.relative_to(src)
        if item.is_dir():
            out.mkdir(parents=True, exist_ok=True)
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        data = item.read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is None or "\0" in text:
            shutil.copy2(item, out)
        else:
            out.write_text(pattern.sub(lambda m: str(paths[m.group(1)]), text), encoding="utf-8")
            shutil.copymode(item, out)


class InvalidReward(ValueError):
    """test.sh wrote something that is not a reward: the verification fails with this reason
    (an error in the task's row, the episode's verification note), never a clamp or a guess."""


def _reward(value: object, where: str) -> float:
    # a bool is an int to Python (true -> 1.0): a test that wrote one did not mean a score
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise InvalidReward(f"{where} holds {value!r}, not a reward (a number from 0 to 1)")
    return float(value)


def read_reward(verifier_logs: Path) -> tuple[float, str] | None:
    """The reward test.sh wrote (reward.txt, else reward.json) and a note when it had to choose;
    InvalidReward for anything but numbers in 0..1 (NaN, inf, 5.0, true, text)."""
    txt, js = verifier_logs / "reward.txt", verifier_logs / "reward.json"
    if txt.is_file():
        text = txt.read_text(errors="replace")[:200].strip()
        try:
            value: object = float(text)
        except ValueError:
            value = text
        return _reward(value, "reward.txt"), ""
    if js.is_file():
        try:
            data = json.loads(js.read_text(errors="replace")[:100_000])
        except (json.JSONDecodeError, RecursionError) as exc:
            raise InvalidReward(f"reward.json is not JSON ({exc})") from None
        if isinstance(data, dict) and "reward" in data:
            return _reward(data["reward"], "reward.json's 'reward'"), ""
        if isinstance(data, dict):
            numbers = {
                k: _reward(v, f"reward.json's {k!r}") for k, v in data.items() if isinstance(v, int | float)
            }
            if numbers:
                mean = sum(numbers.values()) / len(numbers)
                return mean, f"reward.json has no 'reward': mean of {', '.join(numbers)} = {mean:g}"
        elif isinstance(data, int | float):
            return _reward(data, "reward.json"), ""
        raise InvalidReward(f"reward.json holds no number: {js.read_text(errors='replace')[:80]!r}")
    return None


def read_rewards(verifier_logs: Path) -> dict[str, float] | None:
    """Every reward test.sh wrote, by key as Harbor reads them (reward.txt: ``reward``; reward.json:
    its numbers), for a multi-step task's min_reward and per-key means; None without a file.
    InvalidReward as read_reward."""
    txt, js = verifier_logs / "reward.txt", verifier_logs / "reward.json"
    if txt.is_file() or not js.is_file():
        found = read_reward(verifier_logs)
        return {"reward": found[0]} if found is not None else None
    read_reward(verifier_logs)  # the same checks
    data = json.loads(js.read_text(errors="replace")[:100_000])
    if isinstance(data, dict):
        return {
            str(k): _reward(v, f"reward.json's {k!r}") for k, v in data.items() if isinstance(v, int | float)
        }
    return {"reward": _reward(data, "reward.json")}
