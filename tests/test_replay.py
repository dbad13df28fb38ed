"""The replay server, driven by the official openai client."""

import json
import threading
import time
from pathlib import Path

import openai
import pytest

from harness.errors import HarnessError
from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse, load_script

SCRIPT = ReplayScript(
    model="scripted",
    responses=[
        ScriptedResponse(
            tool_calls=[ScriptedCall(name="terminal", arguments={"command": "ls"}, id="call_1")]
        ),
        ScriptedResponse(
            content='<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"\n</tool_call>'
        ),
        ScriptedResponse(status=400, error="This model's maximum context length is 8192 tokens."),
        ScriptedResponse(content="done", delay=0.3, finish_reason="stop"),
        ScriptedResponse(tool_calls=[ScriptedCall(name="terminal", arguments='{"command": "ls"')]),
    ],
)


def client(server: ReplayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)


def ask(c: openai.OpenAI, **kw: object) -> object:
    return c.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "go"}], **kw)  # type: ignore[call-overload]


def test_plays_script_in_order() -> None:
    with ReplayServer(SCRIPT) as server:
        c = client(server)
        first = ask(c)
        assert first.choices[0].finish_reason == "tool_calls"  # type: ignore[attr-defined]
        call = first.choices[0].message.tool_calls[0]  # type: ignore[attr-defined]
        assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
            "call_1",
            "terminal",
            {"command": "ls"},
        )
        second = ask(c)
        assert "<tool_call>" in second.choices[0].message.content  # type: ignore[attr-defined]
        with pytest.raises(openai.BadRequestError, match="maximum context length"):
            ask(c)
        t0 = time.monotonic()
        assert ask(c).choices[0].message.content == "done"  # type: ignore[attr-defined]
        assert time.monotonic() - t0 >= 0.3
        broken = ask(c).choices[0].message.tool_calls[0].function.arguments  # type: ignore[attr-defined]
        assert broken == '{"command": "ls"'
        with pytest.raises(openai.InternalServerError, match="exhausted"):
            ask(c)
        assert server.served == 6 and len(server.requests) == 6
        assert server.requests[0]["messages"] == [{"role": "user", "content": "go"}]
        assert [m.id for m in c.models.list().data] == ["scripted"]


def test_streaming_matches_non_streaming() -> None:
    with ReplayServer(SCRIPT) as server:
        chunks = list(ask(client(server), stream=True))  # type: ignore[call-overload]
        calls = [tc for ch in chunks for tc in (ch.choices[0].delta.tool_calls or []) if ch.choices]
        assert calls[0].function.name == "terminal"
        assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_api_key_and_concurrent_delays() -> None:
    script = ReplayScript(responses=[ScriptedResponse(content="x")], when_exhausted="repeat_last", delay=1.0)
    with ReplayServer(script, api_key="secret") as server:
        with pytest.raises(openai.AuthenticationError):
            ask(client(server))
        good = openai.OpenAI(base_url=server.base_url, api_key="secret", max_retries=0)
        t0 = time.monotonic()
        threads = [threading.Thread(target=ask, args=(good,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert time.monotonic() - t0 < 3.0  # four 1 s responses overlap (one after another: 4 s)


def test_cycle_mode() -> None:
    script = ReplayScript(
        responses=[ScriptedResponse(content="a"), ScriptedResponse(content="b")], when_exhausted="cycle"
    )
    with ReplayServer(script) as server:
        c = client(server)
        assert [ask(c).choices[0].message.content for _ in range(5)] == ["a", "b", "a", "b", "a"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "not valid JSON"),
        ("{truncated", "not valid JSON"),
        ('{"responses": []}', "at least one response"),
        ('{"responses": [{"contnet": "typo"}]}', "responses.0.contnet"),
        ("\x00\x01\x02binary", "not valid JSON"),
    ],
)
def test_bad_scripts_are_one_clear_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "script.json"
    path.write_text(content)
    with pytest.raises(HarnessError, match=message):
        load_script(path)


def test_recorded_completions_folder(tmp_path: Path) -> None:
    folder = tmp_path / "completions"
    folder.mkdir()
    for i, (content, calls) in enumerate(
        [
            (
                "thinking",
                [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "terminal", "arguments": '{"command":"ls"}'},
                    }
                ],
            ),
            ("all done", None),
        ]
    ):
        (folder / f"{i:03d}.json").write_text(
            json.dumps(
                {
                    "response": {
                        "choices": [
                            {
                                "message": {"role": "assistant", "content": content, "tool_calls": calls},
                                "finish_reason": "tool_calls" if calls else "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 3},
                    }
                }
            )
        )
        time.sleep(0.01)
    script = load_script(folder)
    assert [r.content for r in script.responses] == ["thinking", "all done"]
    assert script.responses[0].tool_calls[0].raw_arguments == '{"command":"ls"}'


@pytest.mark.slow
def test_harness_replay_command_serves_a_script_file(tmp_path: Path) -> None:
    import os
    import signal
    import socket
    import subprocess
    import sys

    import httpx

    from tests.conftest import REPO

    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": "scripted hello"}]))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "replay", str(script), "--port", str(port)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ},
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
        assert ask(c).choices[0].message.content == "scripted hello"  # type: ignore[attr-defined]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    bad = subprocess.run(
        [sys.executable, "-m", "harness.cli", "replay", str(tmp_path / "missing.json")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "no such file" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_harness_replay_stops_within_seconds_with_a_request_in_flight(tmp_path: Path, signame: str) -> None:
    """A response scripted to take 120 s is being served: SIGTERM (or Ctrl-C) ends the server
    within seconds (before: uvicorn waited for the request, the whole 120 s)."""
    import signal
    import socket
    import subprocess
    import sys

    import httpx

    from tests.conftest import REPO

    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": "slow", "delay": 120}]))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "replay", str(script), "--port", str(port)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # a job started in the background of a shell inherits SIGINT ignored: give it back
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    url = f"http://127.0.0.1:{port}"
    answered: list[object] = []

    def ask() -> None:
        try:
            answered.append(httpx.post(f"{url}/v1/chat/completions", json={"messages": []}, timeout=150))
        except httpx.HTTPError as exc:
            answered.append(exc)

    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        asker = threading.Thread(target=ask, daemon=True)
        asker.start()
        time.sleep(1.0)  # the request is in the server's hands, sleeping through its delay
        assert not answered
        t0 = time.monotonic()
        proc.send_signal(getattr(signal, signame))
        _, err = proc.communicate(timeout=150)
        took = time.monotonic() - t0
    finally:
        proc.kill()
        proc.wait()
    assert took < 30, f"the replay server took {took:.1f} s to stop"  # not the response's 120 s
    # uvicorn re-raises SIGTERM after its shutdown (exit 143); Ctrl-C it ends quietly
    assert proc.returncode == (143 if signame == "SIGTERM" else 0), err
    assert "Traceback" not in err, err


def test_an_idle_connection_outlives_a_client_pools_expiry() -> None:
    """httpx drops a pooled connection after 5 s idle; a server that closes at 5 s too races with a
    client reusing one at 4.99 s (uvicorn's default: a ReadError now and then). The server must hold
    it longer: no EOF on the idle connection within 6 s. ~6 s."""
    import http.client
    import select

    with ReplayServer(SCRIPT) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request("GET", "/health")
        assert conn.getresponse().read() == b""
        assert conn.sock is not None
        readable, _, _ = select.select([conn.sock], [], [], 6.0)
        assert not readable, "the server closed an idle connection within 6 s"
        conn.request("GET", "/health")
        assert conn.getresponse().status == 200
        conn.close()


def test_a_refused_request_is_named_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    """uvicorn's "Invalid HTTP request received." says nothing of who sent what; the replay server
    logs the peer and the head of the bytes it refused."""
    import socket

    with caplog.at_level("WARNING", logger="harness.replay"), ReplayServer(SCRIPT) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"\x16\x03\x01\x00\xa5garbage\r\n\r\n")
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 400")
    assert any(
        "refused a request from 127.0.0.1:" in r.message and r"\x16\x03\x01" in r.message
        for r in caplog.records
    )
