"""Identifiers that come from outside (task directories, task.toml, SWE-bench rows), checked
before they reach git, the container engine's API or a path.

Each check raises BadIdentifier with one line naming the field and what is allowed; the caller
makes it that task's error, never the run's. What they stop: a ``base_commit`` of
``--upload-pack=CMD`` that git took for an option (and ran CMD), a ``docker_image`` of
``../../../etc/passwd`` that the Docker SDK put into an API path, a task id too long to be a
directory name that stopped the whole run.
"""

import re

from harness.errors import HarnessError


class BadIdentifier(HarnessError):
    """An externally supplied identifier that is not what its field allows."""


_COMMIT = re.compile(r"[0-9a-fA-F]{7,64}")  # abbreviated or full; SHA-1 or SHA-256
_GITHUB_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")

# The image reference grammar of distribution/reference (what Docker and podman accept):
# [domain[:port]/]path-component[/path-component...][:tag][@digest], name at most 255 characters.
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::{_TAG})?(?:@{_DIGEST})?", re.ASCII)


def _shown(value: object) -> str:
    text = str(value)
    return repr(text if len(text) <= 80 else text[:77] + "...")


def check_commit(value: object, what: str) -> str:
    """A git commit id (7 to 64 hex digits): never an option, a range or a ref name."""
    if not isinstance(value, str) or not _COMMIT.fullmatch(value):
        raise BadIdentifier(f"{what} {_shown(value)}: not a commit id (7 to 64 hexadecimal digits)")
    return value


def check_github_repo(value: object, what: str) -> str:
    """``owner/name`` as GitHub spells it (letters, digits, '.', '_', '-'), neither part . or .."""
    if (
        not isinstance(value, str)
        or not _GITHUB_REPO.fullmatch(value)
        or any(part in (".", "..") for part in value.split("/"))
    ):
        raise BadIdentifier(f"{what} {_shown(value)}: not an owner/name repository")
    return value


def is_image_reference(value: object) -> bool:
    match = _REFERENCE.fullmatch(value) if isinstance(value, str) else None
    return match is not None and len(match.group("name")) <= 255


def check_image_reference(value: object, what: str) -> str:
    """An image reference as the engines read one (``[registry/]name[:tag][@digest]``)."""
    if not is_image_reference(value):
        raise BadIdentifier(
            f"{what} {_shown(value)}: not an image reference ([registry[:port]/]name[:tag][@digest], "
            "name in lower case)"
        )
    return str(value)


def check_path_component(value: object, what: str) -> str:
    """One directory name: not empty, not . or .., no / or NUL, at most 255 bytes (a nested suite's
    id joins its directories' names and can outgrow that). Other characters are data: printed as
    text, never interpreted."""
    if (
        not isinstance(value, str)
        or value in ("", ".", "..")
        or "/" in value
        or "\0" in value
        or len(value.encode(errors="surrogateescape")) > 255
    ):
        raise BadIdentifier(f"{what} {_shown(value)}: not usable as a directory name")
    return value
