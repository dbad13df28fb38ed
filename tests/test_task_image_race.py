"""A task image build that failed on podman's storage race ("layer not known": another image was
removed while the build cache was looked up, as a concurrent prune or test cleanup does) is built
again; a Dockerfile's own failure is not. A fake engine: what is under test is the decision."""

from pathlib import Path

import pytest
from docker.errors import ImageNotFound

from harness.runtime import task_images
from harness.tasks.loader import load_task

HELLO = Path(__file__).parent / "data" / "harbor" / "hello-app"
RACE = "checking if cached image exists from a previous build: getting top layer info: layer not known"
# podman 4.3's service killing a RUN step while another client's containers come and go (fresh1's
# and fresh10's SWE-bench image builds)
KILLED = 'building at STEP "RUN python3 -m venv /opt/x && /opt/x/bin/pip install flake8": while running runtime: signal: killed'


class _Images:
    def __init__(self) -> None:
        self.have: set[str] = {"ubuntu:24.04"}

    def get(self, ref: str) -> object:
        if ref not in self.have:
            raise ImageNotFound(ref)
        return object()


class _Client:
    def __init__(self) -> None:
        self.images = _Images()


@pytest.mark.parametrize(
    ("errors", "built", "tries"),
    [
        ([RACE], True, 2),
        ([KILLED], True, 2),
        ([RACE, KILLED, RACE], False, 3),
        (["RUN failed: exit 1"], False, 1),
    ],
)
def test_a_storage_race_is_built_again_and_a_dockerfile_failure_is_not(
    monkeypatch: pytest.MonkeyPatch, errors: list[str], built: bool, tries: int
) -> None:
    client = _Client()
    calls: list[str] = []

    def build(_client: object, _context: Path, _name: str, tag: str, _timeout: float | None = None):  # type: ignore[no-untyped-def]
        calls.append(tag)
        if len(calls) <= len(errors):
            return ["STEP 5/10: COPY x y"], errors[len(calls) - 1]
        client.images.have.add(tag)
        return [], ""

    monkeypatch.setattr(task_images, "_build", build)
    task = load_task(HELLO, suite="s", images=True)
    if built:
        assert task_images.build_task_image(client, task) == calls[-1]  # type: ignore[arg-type]
    else:
        with pytest.raises(task_images.TaskImageError, match="the image build failed"):
            task_images.build_task_image(client, task)  # type: ignore[arg-type]
    assert len(calls) == tries
