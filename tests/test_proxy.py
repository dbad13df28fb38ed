"""The model-call proxy with a real replay server behind it and the official openai client in front:
answers pass through as the upstream gave them, each request is attributed to its episode, turns
are assembled and validated, a scripted loop is stopped at the right turn, and nothing secret is
written."""

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from harness.monitor import LoopFinding
from harness.proxy import (
    ActionFormat,
    Exchange,
    LoopRecord,
    Proxy,
    ProxyConfig,
    StopAnswer,
    TurnRecord,
    WatchConfig,
    read_records,
    serve_proxy,
)
from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
from tests.helpers.proxying import TERMINAL, Upstream, client, tool_agent
from tests.helpers.raw_upstream import RawUpstream

KEY = "upstream-secret-4f2a"  # the upstream's key: the agent never sees it, no record holds it


def _call(command: str, id: str | None = None) -> ScriptedCall:
    return ScriptedCall(name="terminal", arguments={"command": command}, id=id)


def _comparable(obj: Any) -> dict[str, Any]:
    """A completion or chunk without what differs per answer (its id and time)."""
    data: dict[str, Any] = obj.model_dump()
    data.pop("id")
    data.pop("created")
    return data


def test_answers_pass_through_as_the_upstream_gave_them() -> None:
    script = ReplayScript(
        model="scripted",
        pick="by_turn",
        responses=[
            ScriptedResponse(
                content="Let me look.",
                tool_calls=[_call("ls -la", id="call_a"), _call("pwd", id="call_b")],
                prompt_tokens=51,
                completion_tokens=9,
            ),
            ScriptedResponse(
                content="All done.", finish_reason="stop", prompt_tokens=80, completion_tokens=3
            ),
        ],
    )
    with ReplayServer(script, api_key=KEY) as replay, serve_proxy(Upstream(replay.base_url, KEY)) as proxy:
        endpoint = proxy.episode("m/task/seed1")
        direct, via = client(replay.base_url, KEY), client(endpoint.openai_url, endpoint.api_key)
        conversations = [
            [{"role": "user", "content": "go"}],
            [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": "Let me look."},
                {"role": "user", "content": "more"},
            ],
        ]
        for messages in conversations:
            ask = {"model": "scripted", "messages": messages, "tools": [TERMINAL]}
            assert _comparable(via.chat.completions.create(**ask)) == _comparable(  # type: ignore[call-overload]
                direct.chat.completions.create(**ask)  # type: ignore[call-overload]
            )
            via_chunks = [_comparable(c) for c in via.chat.completions.create(**ask, stream=True)]  # type: ignore[call-overload]
            direct_chunks = [_comparable(c) for c in direct.chat.completions.create(**ask, stream=True)]  # type: ignore[call-overload]
            assert via_chunks == direct_chunks and len(via_chunks) == 2
        assert via.models.list().model_dump() == direct.models.list().model_dump()
        assert endpoint.name == "scripted" and endpoint.openai_url.endswith("/v1")
        assert len(replay.requests) == 8  # every chat request reached the upstream


def test_the_agent_uses_the_proxys_key_and_no_record_holds_a_key(tmp_path: Path) -> None:
    script = ReplayScript(
        responses=[ScriptedResponse(tool_calls=[_call("ls")])], when_exhausted="repeat_last"
    )
    record = tmp_path / "calls.jsonl"
    with ReplayServer(script, api_key=KEY) as replay, serve_proxy(Upstream(replay.base_url, KEY)) as proxy:
        endpoint = proxy.episode("m/task/seed1", record=record)
        assert KEY not in endpoint.api_key
        with pytest.raises(openai.AuthenticationError, match="key the harness gave"):
            client(endpoint.openai_url, KEY).models.list()
        c = client(endpoint.openai_url, endpoint.api_key)
        c.chat.completions.create(
            model="scripted",
            messages=[{"role": "user", "content": "go"}],
            extra_body={"api_key": KEY, "Authorization": f"Bearer {KEY}"},
        )
        list(
            c.chat.completions.create(
                model="scripted", messages=[{"role": "user", "content": "go"}], stream=True
            )
        )
        c.models.list()
        endpoint.release()
    text = record.read_text()
    assert text.count('"kind":"exchange"') == 3
    assert KEY not in text and endpoint.api_key not in text and "authorization" not in text.lower()


@pytest.mark.slow
def test_interleaved_episodes_are_each_attributed_their_own_requests(tmp_path: Path) -> None:
    # by_turn: every conversation plays the script from its start, however they interleave
    script = ReplayScript(
        pick="by_turn",
        responses=[ScriptedResponse(tool_calls=[_call(f"step {i}")], delay=0.02) for i in range(6)],
    )
    names = [f"model/task-{i}/seed1" for i in range(16)]  # 16 agents at once, 3 of them streaming
    results: dict[str, list[dict[str, Any]]] = {}
    with ReplayServer(script) as replay, serve_proxy(Upstream(replay.base_url)) as proxy:
        endpoints = {n: proxy.episode(n, record=tmp_path / f"{i}.jsonl") for i, n in enumerate(names)}

        def agent(name: str) -> None:
            ep = endpoints[name]
            results[name] = tool_agent(
                client(ep.openai_url, ep.api_key),
                f"task of {name}",
                5,
                stream=name.endswith(("3/seed1", "7/seed1")),
                observe=lambda t, call: f"output {t} of {name}",
            )

        threads = [threading.Thread(target=agent, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        turns = {n: ep.watch.finish() for n, ep in endpoints.items()}
    assert len({ep.openai_url for ep in endpoints.values()}) == len(names)
    for i, name in enumerate(names):
        assert [t.observation for t in turns[name]] == [f"output {t} of {name}" for t in range(4)] + [""]
        assert [json.loads(t.tool_calls[0].arguments) for t in turns[name]] == [
            {"command": f"step {t}"} for t in range(5)
        ]
        exchanges = [r for r in read_records(tmp_path / f"{i}.jsonl", full=True) if isinstance(r, Exchange)]
        assert [e.n for e in exchanges] == list(range(5))
        assert (
            exchanges[0].request is not None
            and exchanges[0].request["messages"][1]["content"] == f"task of {name}"
        )
        # the record's messages, put back together, are what the agent sent
        assert exchanges[-1].request is not None and exchanges[-1].request["messages"] == results[name][:-2]


def test_turns_of_a_tool_calling_scaffold_are_assembled_and_validated(tmp_path: Path) -> None:
    script = ReplayScript(
        responses=[
            ScriptedResponse(
                content="Listing.", tool_calls=[_call("ls")], prompt_tokens=40, completion_tokens=6
            ),
            ScriptedResponse(
                content='<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}\n</tool_call>'
            ),
            ScriptedResponse(tool_calls=[ScriptedCall(name="browser", arguments={"url": "x"})]),
            ScriptedResponse(tool_calls=[ScriptedCall(name="terminal", arguments='{"command": "ls"')]),
            ScriptedResponse(content="Done.", finish_reason="length"),
        ]
    )
    record = tmp_path / "calls.jsonl"
    findings: list[tuple[int, list[str]]] = []
    with ReplayServer(script) as replay, serve_proxy(Upstream(replay.base_url)) as proxy:
        endpoint = proxy.episode(
            "m/task/seed1",
            record=record,
            on_turn=lambda turn, fmt: findings.append((turn.index, [e.category.value for e in fmt.errors])),
        )
        tool_agent(
            client(endpoint.openai_url, endpoint.api_key), "go", 5, observe=lambda t, call: f"result {t}"
        )
        assert len(endpoint.watch.turns) == 4  # the last one waits for what answers it
        turns = endpoint.watch.finish()
    assert [t.observation for t in turns] == [
        "result 0",
        "Please continue: call a tool.",
        "result 2",
        "result 3",
        "",
    ]
    assert turns[0].text == "Listing." and turns[0].tool_calls[0].arguments == '{"command": "ls"}'
    assert (turns[0].finish_reason, turns[0].prompt_tokens, turns[0].completion_tokens) == (
        "tool_calls",
        40,
        6,
    )
    assert findings == [
        (0, []),
        (1, ["tool_call_in_content"]),
        (2, ["unknown_tool"]),  # validated against the tools the request declared
        (3, ["invalid_json_arguments"]),
        (4, ["truncated", "no_tool_call"]),
    ]
    records = read_records(record)
    assert [r.turn.index for r in records if isinstance(r, TurnRecord)] == [0, 1, 2, 3, 4]
    assert [r.turn for r in records if isinstance(r, Exchange)] == [0, 1, 2, 3, 4]


def test_turns_of_a_text_action_scaffold_parse_its_fenced_command() -> None:
    block = "```mswea_bash_command\n{}\n```"
    script = ReplayScript(
        responses=[
            ScriptedResponse(content="I will list the files.\n\n" + block.format("ls -la")),
            ScriptedResponse(content="Two at once:\n" + block.format("ls") + "\n" + block.format("pwd")),
            ScriptedResponse(content="I think I am done."),
            ScriptedResponse(content=""),
            ScriptedResponse(content=block.format("cat a.txt | head")),
        ]
    )
    observations = [
        "<returncode>0</returncode>\n<output>\na.txt\n</output>",
        "Please always provide EXACTLY ONE action in triple backticks, found 2 actions.",
        "Please always provide EXACTLY ONE action in triple backticks, found 0 actions.",
        "Please always provide EXACTLY ONE action in triple backticks, found 0 actions.",
    ]
    with ReplayServer(script) as replay, serve_proxy(Upstream(replay.base_url)) as proxy:
        # three refusals in a row are a loop (repeat_error): watched, not stopped, so turn 4 is parsed too
        watch = WatchConfig(actions=ActionFormat(), stop_on_loop=False)
        endpoint = proxy.episode("m/task/seed1", watch)
        c = client(endpoint.openai_url, endpoint.api_key)
        messages: list[Any] = [{"role": "system", "content": "act"}, {"role": "user", "content": "task"}]
        for obs in [*observations, None]:
            text = c.chat.completions.create(model="scripted", messages=messages).choices[0].message.content
            messages += [{"role": "assistant", "content": text}]
            if obs is not None:
                messages += [{"role": "user", "content": obs}]
        turns, formats = endpoint.watch.finish(), endpoint.watch.formats
    calls = [[(c.name, json.loads(c.arguments)) for c in t.tool_calls] for t in turns]
    assert calls == [
        [("bash", {"command": "ls -la"})],
        [("bash", {"command": "ls"}), ("bash", {"command": "pwd"})],
        [],
        [],
        [("bash", {"command": "cat a.txt | head"})],
    ]
    assert [[e.category.value for e in f.errors] for f in formats] == [
        [],
        ["multiple_tool_calls"],
        ["no_tool_call"],
        ["empty_response"],
        [],
    ]
    assert [t.observation for t in turns] == [*observations, ""]
    # the scaffold's format-error feedback answers a response it could not run: an error
    assert [t.observation_is_error for t in turns] == [False, True, True, True, False]
    loop = endpoint.watch.loop
    assert loop is not None and (loop.kind.value, loop.start_turn) == ("repeat_error", 1), loop


def _looping_script(stream_first: bool = False) -> ReplayScript:
    return ReplayScript(
        responses=[
            ScriptedResponse(tool_calls=[_call("cat setup.py")]),
            ScriptedResponse(tool_calls=[_call("python -m pytest")]),
        ],
        when_exhausted="repeat_last",
    )


def test_a_scripted_loop_is_stopped_at_the_right_turn_with_an_error(tmp_path: Path) -> None:
    found: list[LoopFinding] = []
    turns_then: list[int] = []
    record = tmp_path / "calls.jsonl"
    with ReplayServer(_looping_script()) as replay, serve_proxy(Upstream(replay.base_url)) as proxy:

        def on_loop(finding: LoopFinding) -> None:  # a runner's callback may read the watch
            found.append(finding)
            turns_then.append(len(endpoint.watch.turns))

        endpoint = proxy.episode("m/task/seed1", record=record, on_loop=on_loop)
        c = client(endpoint.openai_url, endpoint.api_key)
        with pytest.raises(
            openai.BadRequestError, match=r"loop.*repeat_call from turn 1, seen at turn 4"
        ) as err:
            tool_agent(c, "fix it", 20, observe=lambda t, call: "1 failed, 2 passed" if t else "setup()")
        assert replay.served == 5  # turns 0..4 reached the model; the 6th request was answered by the proxy
        assert endpoint.watch.stopped.is_set() and len(found) == 1 and turns_then == [5]
        # every later request gets the same answer at once, streamed or not
        for stream in (False, True):
            t0 = time.monotonic()
            with pytest.raises(openai.BadRequestError, match="loop"):
                c.chat.completions.create(
                    model="scripted", messages=[{"role": "user", "content": "again"}], stream=stream
                )
            assert time.monotonic() - t0 < 5
        assert replay.served == 5
        endpoint.release()
    loop = found[0]
    assert (loop.kind.value, loop.start_turn, loop.detected_at, loop.repeats) == ("repeat_call", 1, 4, 4)
    assert err.value.status_code == 400  # a client error: never retried, never an infrastructure failure
    records = read_records(record)
    assert [r.finding for r in records if isinstance(r, LoopRecord)] == [loop]
    by_proxy = [r for r in records if isinstance(r, Exchange) and r.answered_by == "proxy"]
    assert [(r.n, r.status) for r in by_proxy] == [(5, 400), (6, 400), (7, 400)]


def test_a_stopped_episode_can_be_answered_with_a_final_message_streamed_or_not() -> None:
    finish = StopAnswer(
        mode="message", content="Stopping: loop.", tool="finish", arguments={"message": "loop"}
    )
    with ReplayServer(_looping_script()) as replay, serve_proxy(Upstream(replay.base_url)) as proxy:
        endpoint = proxy.episode("m/task/seed1", WatchConfig(answer=finish))
        c = client(endpoint.openai_url, endpoint.api_key)
        messages = tool_agent(c, "fix it", 6, observe=lambda t, call: "same")
        assert messages[-2]["content"] == "Stopping: loop."
        assert messages[-2]["tool_calls"][0]["function"] == {
            "name": "finish",
            "arguments": '{"message":"loop"}',
        }
        streamed = list(c.chat.completions.create(model="scripted", messages=messages, stream=True))  # type: ignore[arg-type]
        assert streamed[0].choices[0].delta.content == "Stopping: loop."
        assert streamed[0].choices[0].delta.tool_calls[0].function.name == "finish"  # type: ignore[index]
        assert streamed[-1].choices[0].finish_reason == "tool_calls"
        assert replay.served == 5


def test_watch_off_records_but_neither_assembles_nor_stops(tmp_path: Path) -> None:
    record = tmp_path / "calls.jsonl"
    with ReplayServer(_looping_script()) as replay, serve_proxy(Upstream(replay.base_url)) as proxy:
        endpoint = proxy.episode("m/task/seed1", WatchConfig(watch=False), record=record)
        tool_agent(client(endpoint.openai_url, endpoint.api_key), "fix it", 8, observe=lambda t, call: "same")
        assert endpoint.watch.finish() == [] and endpoint.watch.loop is None
        assert not endpoint.watch.stopped.is_set() and replay.served == 8
    assert [r.kind for r in read_records(record)] == ["exchange"] * 8


def test_a_request_without_an_episode_prefix_is_told_the_expected_form() -> None:
    with ReplayServer(_looping_script()) as replay, serve_proxy(Upstream(replay.base_url)) as proxy:
        ask = {"model": "scripted", "messages": [{"role": "user", "content": "go"}]}
        with pytest.raises(openai.NotFoundError, match=r"use /ep/<episode>/v1/chat/completions"):
            client(f"{proxy.url}/v1", proxy.api_key).chat.completions.create(**ask)  # type: ignore[call-overload]
        with pytest.raises(openai.NotFoundError, match=r"unknown episode 'nobody'.*/ep/<episode>/v1/"):
            client(f"{proxy.url}/ep/nobody/v1", proxy.api_key).chat.completions.create(**ask)  # type: ignore[call-overload]
        endpoint = proxy.episode("m/task/seed1")
        c = client(endpoint.openai_url, endpoint.api_key)
        c.chat.completions.create(**ask)  # type: ignore[call-overload]
        endpoint.release()
        with pytest.raises(openai.NotFoundError, match="unknown episode"):  # closed: no stray request lands
            c.chat.completions.create(**ask)  # type: ignore[call-overload]
        again = proxy.episode("m/task/seed1")  # a retry of the same key gets its own prefix
        assert again.openai_url != endpoint.openai_url
        assert httpx.get(f"{proxy.url}/ep").status_code == 404
        assert replay.served == 1


def test_the_proxy_stops_cleanly_with_a_request_in_flight() -> None:
    before = {t.ident for t in threading.enumerate()}
    with RawUpstream("slow_stream", chunks=600, gap=0.05) as upstream:  # a 30 s answer
        proxy = Proxy(Upstream(upstream.base_url), ProxyConfig(shutdown_grace_s=0.5)).start()
        endpoint = proxy.episode("m/task/seed1")
        errors: list[BaseException] = []

        def ask() -> None:
            try:
                client(endpoint.openai_url, endpoint.api_key).chat.completions.create(
                    model="scripted", messages=[{"role": "user", "content": "go"}]
                )
            except Exception as exc:
                errors.append(exc)

        asker = threading.Thread(target=ask)
        asker.start()
        deadline = time.monotonic() + 10
        while not upstream.sent_at and time.monotonic() < deadline:
            time.sleep(0.01)
        t0 = time.monotonic()
        proxy.stop()
        stop_s = time.monotonic() - t0
        asker.join(timeout=10)
        assert not asker.is_alive() and errors  # the agent got an answer (an error), not a hang
        assert upstream.hung_up.wait(5)  # the upstream request was cancelled, not left running
        assert stop_s < 10
    left = [t for t in threading.enumerate() if t.ident not in before and t.name == "harness-proxy"]
    assert not left
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", proxy.port), timeout=1):
        pass


@pytest.mark.slow
def test_a_streamed_answer_is_recorded_before_the_agent_sees_its_end(tmp_path: Path) -> None:
    script = ReplayScript(
        responses=[ScriptedResponse(tool_calls=[_call("ls")])], when_exhausted="repeat_last"
    )
    with ReplayServer(script) as replay, serve_proxy(Upstream(replay.base_url)) as proxy:
        for i in range(30):  # an episode that ends the moment its last stream does
            endpoint = proxy.episode(f"m/task-{i}/seed1", record=tmp_path / f"{i}.jsonl")
            c = client(endpoint.openai_url, endpoint.api_key)
            list(
                c.chat.completions.create(
                    model="scripted", messages=[{"role": "user", "content": "go"}], stream=True
                )
            )
            endpoint.release()
            assert len(endpoint.watch.turns) == 1
            assert [r.kind for r in read_records(tmp_path / f"{i}.jsonl")] == ["exchange", "turn"]


def test_episode_names_from_paths_and_headers_never_collapse_into_one() -> None:
    """``..`` (a path's ``%2e%2e`` once decoded), ``.``, ``.hidden`` and ``a b`` were made safe by
    stripping and replacing, which mapped several names onto one episode (``..`` and ``.`` both
    ``episode``, ``.hidden`` onto ``hidden``): each is its own now, and a safe name stays itself."""
    from harness.proxy.standalone import episode_name

    names = ["..", ".", "...", ".hidden", "hidden", "a b", "a_b", "a/b", "x" * 150, "x" * 151, "episode"]
    made = [episode_name(n) for n in names]
    assert len(set(made)) == len(names), dict(zip(names, made, strict=True))
    assert (
        episode_name("hidden") == "hidden"
        and episode_name("a_b") == "a_b"
        and episode_name("t-1.2") == "t-1.2"
    )
    for m in made:
        assert m and not m.startswith(".") and "/" not in m and len(m) <= 100 and m == episode_name(m)


def test_a_body_past_the_cap_is_413_a_slow_body_408_and_unfinished_connections_are_closed(
    tmp_path: Path,
) -> None:
    """The proxy took any body (one of 600 MB: 2.8 GB of memory and a 601 MB record) and kept a
    connection that never finished its headers open for ever (3,200 of them)."""
    script = ReplayScript(model="scripted", responses=[ScriptedResponse(content="ok", finish_reason="stop")])
    config = ProxyConfig(max_body_bytes=64 << 10, body_timeout_s=1.0, header_timeout_s=1.0)
    with (
        ReplayServer(script, api_key=KEY) as replay,
        serve_proxy(Upstream(replay.base_url, KEY), config) as proxy,
    ):
        endpoint = proxy.episode("m/task/seed1", record=tmp_path / "calls.jsonl")
        url = f"{endpoint.openai_url}/chat/completions"
        auth = {"Authorization": f"Bearer {endpoint.api_key}"}
        big = json.dumps({"model": "scripted", "messages": [{"role": "user", "content": "x" * (70 << 10)}]})
        said = httpx.post(url, content=big, headers=auth, timeout=30)
        assert said.status_code == 413 and "over the proxy's 64 KiB limit" in said.text, said.text

        def chunks():  # no Content-Length: the cap holds as the body arrives
            for _ in range(8):
                yield b"x" * (16 << 10)

        assert httpx.post(url, content=chunks(), headers=auth, timeout=30).status_code == 413
        small = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(url, json=small, headers=auth, timeout=30).status_code == 200
        host, port = "127.0.0.1", int(endpoint.openai_url.split(":")[2].split("/")[0])

        def closed_within(sock: socket.socket, seconds: float) -> bool:
            sock.settimeout(seconds)
            try:
                data = sock.recv(65536)
                while data and b"\r\n\r\n" not in data:
                    data += sock.recv(65536)
                return data == b"" or sock.recv(65536) == b""
            except TimeoutError:
                return False

        partial = socket.create_connection((host, port))
        partial.sendall(b"POST /x HTTP/1.1\r\nHost: a\r\n")  # headers never finished
        assert closed_within(partial, 20), "an unfinished connection stayed open"
        partial.close()
        slow = socket.create_connection((host, port))
        path = url.split(f":{port}", 1)[1]
        slow.sendall(
            f"POST {path} HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {endpoint.api_key}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{".encode()
        )
        slow.settimeout(20)
        answer = slow.recv(65536)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        slow.close()
    recorded = read_records(tmp_path / "calls.jsonl")
    assert [r.status for r in recorded if isinstance(r, Exchange)] == [200]  # nothing of the refused bodies
    assert (tmp_path / "calls.jsonl").stat().st_size < 64 << 10
