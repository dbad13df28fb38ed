"""A command in a container (harness/runtime/container_exec.py), on the real engine: its output and
exit status come back whole, and an exec whose stream never worked is made again without the
command having run (podman 4.3's API loses the whole output of about 1 exec in 30 under load, which
cannot be made to happen on demand: here a stream that ends before the handshake's marker stands in
for it, and the container says how often the command ran)."""

from collections.abc import Iterator
from typing import Any

import pytest

import harness.runtime.container_exec as container_exec
from harness.runtime.container_exec import ExecUnattached, exec_capped

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def container() -> Iterator[Any]:
    from harness.runtime.engine import docker_client
    from harness.runtime.images import ensure_sandbox_image

    client = docker_client()
    c = client.containers.run(
        ensure_sandbox_image(client),
        ["sleep", "600"],
        detach=True,
        network_mode="none",
        labels={"harness.test": "1"},
    )
    try:
        yield c
    finally:
        c.remove(force=True)


def runs(container: Any, name: str) -> int:
    code, out, _ = exec_capped(
        container, ["sh", "-c", f"cat /tmp/{name} 2>/dev/null | wc -l"], user="1000", workdir="/", env={}
    )
    assert code == 0
    return int(out)


def test_output_error_stream_exit_status_and_a_left_daemon(container: Any) -> None:
    code, out, err = exec_capped(
        container,
        ["bash", "-c", 'echo out; echo err >&2; read -r x || echo "stdin closed"; sleep 60 & exit 3'],
        user="1000",
        workdir="/tmp",
        env={"GREETING": "hi"},
    )
    assert (code, out, err.text()) == (3, b"out\nstdin closed\n", "err\n")  # the daemon holds nothing up
    code, out, err = exec_capped(
        container,
        ["sh", "-c", "echo $GREETING $(pwd) $(id -u)"],
        user="1000",
        workdir="/tmp",
        env={"GREETING": "hi"},
    )
    assert (code, out) == (0, b"hi /tmp 1000\n")
    code, _, err = exec_capped(container, ["no-such-command"], user="1000", workdir="/", env={})
    assert code == 127 and "no-such-command" in err.text()


def test_a_stream_lost_before_the_command_runs_is_made_again_and_the_command_runs_once(
    container: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = container_exec._frame
    lost = {"left": 1}

    def frame(raw: Any) -> tuple[int, bytes] | None:
        if lost["left"]:  # this exec's stream ends before anything came: as the engine's loss does
            lost["left"] -= 1
            return None
        return real(raw)

    monkeypatch.setattr(container_exec, "_frame", frame)
    code, out, _ = exec_capped(
        container, ["sh", "-c", "echo ran >> /tmp/once; echo done"], user="1000", workdir="/", env={}
    )
    assert (code, out) == (0, b"done\n")
    monkeypatch.undo()
    assert runs(container, "once") == 1  # the first exec's sh got no line: it ran nothing


def test_an_engine_that_never_connects_the_stream_is_one_error_and_nothing_ran(
    container: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(container_exec, "_frame", lambda raw: None)
    with pytest.raises(
        ExecUnattached, match=r"connected no output to 3 execs of \['sh'\] \(nothing ran; "
    ) as err:
        exec_capped(container, ["sh", "-c", "echo ran >> /tmp/never"], user="1000", workdir="/", env={})
    monkeypatch.undo()
    # each attempt says what the engine reported of it: the next real loss names its kind
    assert str(err.value).count("the stream ended, exec running=") == 3, err.value
    assert "container running" in str(err.value), err.value
    assert runs(container, "never") == 0
