"""The proxy under faults: what goes wrong upstream reaches the agent as the same kind of failure it
would have seen talking to the upstream itself (so the runner's infrastructure rules judge it the
same), a body that is not a completion is a format finding, and the proxy keeps serving."""

import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from harness.episodes.faults import is_infra_fault
from harness.proxy import Exchange, ProxyConfig, TurnRecord, read_records, serve_proxy
from harness.replay import ReplayScript, ReplayServer, ScriptedResponse
from tests.helpers.proxying import Upstream, client
from tests.helpers.raw_upstream import RawUpstream

ASK: dict[str, Any] = {"model": "scripted", "messages": [{"role": "user", "content": "go"}]}


def _failure(call: Callable[[], object]) -> BaseException:
    with pytest.raises(Exception) as err:
        call()
    return err.value


def _stream(c: openai.OpenAI) -> list[Any]:
    return list(c.chat.completions.create(**ASK, stream=True))


def _both(
    base_url: str, call: Callable[[openai.OpenAI], object], **proxy: Any
) -> tuple[BaseException, BaseException]:
    """The failure the agent sees talking to ``base_url`` itself, and through the proxy."""
    direct = _failure(lambda: call(client(base_url, "EMPTY")))
    with serve_proxy(Upstream(base_url), ProxyConfig(**proxy)) as p:
        endpoint = p.episode("m/task/seed1")
        via = _failure(lambda: call(client(endpoint.openai_url, endpoint.api_key)))
    return direct, via


def _complete(c: openai.OpenAI) -> object:
    return c.chat.completions.create(**ASK)


@pytest.mark.parametrize("status", [500, 502, 503])
def test_an_upstream_5xx_comes_back_as_the_same_5xx(status: int) -> None:
    script = ReplayScript(
        responses=[ScriptedResponse(status=status, error="engine dead")], when_exhausted="repeat_last"
    )
    with ReplayServer(script) as replay:
        for call in (_complete, _stream):
            direct, via = _both(replay.base_url, call)
            assert isinstance(via, openai.APIStatusError) and isinstance(direct, openai.APIStatusError)
            assert (
                (via.status_code, via.body)
                == (direct.status_code, direct.body)
                == (
                    status,
                    {"message": "engine dead", "type": "InternalServerError", "param": None, "code": status},
                )
            )
            assert is_infra_fault(via) and is_infra_fault(direct)


def test_a_4xx_of_the_models_making_stays_one() -> None:
    script = ReplayScript(
        responses=[ScriptedResponse(status=400, error="This model's maximum context length is 8192 tokens.")],
        when_exhausted="repeat_last",
    )
    with ReplayServer(script) as replay:
        direct, via = _both(replay.base_url, _complete)
    assert type(via) is type(direct) is openai.BadRequestError
    assert not is_infra_fault(via) and "maximum context length" in str(via)


def test_an_upstream_that_refuses_connections_is_a_502_naming_why() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for call in (_complete, _stream):
        direct, via = _both(f"http://127.0.0.1:{port}/v1", call)
        assert isinstance(direct, openai.APIConnectionError)
        assert isinstance(via, openai.InternalServerError) and via.status_code == 502
        assert "cannot be reached" in str(via) and f"127.0.0.1:{port}" in str(via)
        assert is_infra_fault(via) and is_infra_fault(direct)


def test_an_upstream_that_resets_the_connection_is_a_502() -> None:
    with RawUpstream("reset") as upstream:
        direct, via = _both(upstream.base_url, _complete)
    assert isinstance(direct, openai.APIConnectionError)
    assert isinstance(via, openai.InternalServerError) and via.status_code == 502 and "broke" in str(via)
    assert is_infra_fault(via) and is_infra_fault(direct)


def test_an_upstream_that_resets_mid_stream_cuts_the_agents_stream_too(tmp_path: Path) -> None:
    with RawUpstream("reset_mid_stream") as upstream:
        direct = _failure(lambda: _stream(client(upstream.base_url, "EMPTY")))
        with serve_proxy(Upstream(upstream.base_url)) as p:
            endpoint = p.episode("m/task/seed1", record=tmp_path / "calls.jsonl")
            c = client(endpoint.openai_url, endpoint.api_key)
            got: list[Any] = []

            def read() -> None:
                got.extend(c.chat.completions.create(**ASK, stream=True))

            via = _failure(read)
            assert len(got) == 1  # the chunk sent before the reset reached the agent
            endpoint.release()
    assert isinstance(via, httpx.RemoteProtocolError | httpx.ReadError)
    assert is_infra_fault(via) and is_infra_fault(direct)
    exchange = next(r for r in read_records(tmp_path / "calls.jsonl") if isinstance(r, Exchange))
    assert exchange.error is not None and "stream broke" in exchange.error and exchange.turn is None


@pytest.mark.slow
def test_an_upstream_slower_than_the_timeout_is_a_504() -> None:
    script = ReplayScript(
        responses=[ScriptedResponse(content="late", delay=30)], when_exhausted="repeat_last"
    )
    with ReplayServer(script) as replay:
        direct = _failure(
            lambda: openai.OpenAI(
                base_url=replay.base_url, api_key="k", max_retries=0, timeout=0.5
            ).chat.completions.create(**ASK)
        )
        with serve_proxy(Upstream(replay.base_url), ProxyConfig(read_timeout_s=0.5)) as p:
            endpoint = p.episode("m/task/seed1")
            c = client(endpoint.openai_url, endpoint.api_key)
            t0 = time.monotonic()
            via = _failure(lambda: _complete(c))
            waited = time.monotonic() - t0
    assert isinstance(direct, openai.APITimeoutError)
    assert (
        isinstance(via, openai.InternalServerError)
        and via.status_code == 504
        and "nothing for 0.5 s" in str(via)
    )
    assert waited < 15  # the proxy's 0.5 s timeout, not the upstream's 30 s delay
    assert is_infra_fault(via) and is_infra_fault(direct)


def test_a_stream_that_stalls_past_the_timeout_is_cut() -> None:
    with (
        RawUpstream("stall_mid_stream", stall=5) as upstream,
        serve_proxy(Upstream(upstream.base_url), ProxyConfig(read_timeout_s=0.5)) as p,
    ):
        endpoint = p.episode("m/task/seed1")
        via = _failure(lambda: _stream(client(endpoint.openai_url, endpoint.api_key)))
        assert upstream.hung_up.wait(5)  # the stalled upstream request was given up
    assert isinstance(via, httpx.RemoteProtocolError | httpx.ReadError) and is_infra_fault(via)


@pytest.mark.slow
def test_a_slow_stream_passes_chunk_by_chunk_and_is_reassembled(tmp_path: Path) -> None:
    with (
        RawUpstream("slow_stream", chunks=5, gap=0.4) as upstream,
        serve_proxy(Upstream(upstream.base_url)) as p,
    ):
        endpoint = p.episode("m/task/seed1", record=tmp_path / "calls.jsonl")
        arrived: list[float] = []
        for chunk in client(endpoint.openai_url, endpoint.api_key).chat.completions.create(
            **ASK, stream=True
        ):
            arrived.append(time.monotonic())
            assert chunk.choices
        turns = endpoint.watch.finish()
        assert len(arrived) == 6
        # each chunk reached the agent before the upstream sent the next one
        assert all(a < s for a, s in zip(arrived[:4], upstream.sent_at[1:], strict=True))
    assert turns[0].text == "xxxxx" and turns[0].finish_reason == "stop"
    exchange = next(r for r in read_records(tmp_path / "calls.jsonl") if isinstance(r, Exchange))
    assert exchange.stream and exchange.response is not None
    assert exchange.response["choices"][0]["message"]["content"] == "xxxxx"


def test_an_agent_that_hangs_up_cancels_the_upstream_request(tmp_path: Path) -> None:
    with (
        RawUpstream("slow_stream", chunks=200, gap=0.1) as upstream,
        serve_proxy(Upstream(upstream.base_url)) as p,
    ):
        endpoint = p.episode("m/task/seed1", record=tmp_path / "calls.jsonl")
        c = client(endpoint.openai_url, endpoint.api_key)
        stream = c.chat.completions.create(**ASK, stream=True)
        next(iter(stream))
        stream.close()  # mid-stream
        assert upstream.hung_up.wait(5)
        sent = len(upstream.sent_at)
    with (
        RawUpstream("slow_stream", chunks=200, gap=0.1) as upstream,
        serve_proxy(Upstream(upstream.base_url)) as p,
    ):
        endpoint = p.episode("m/task/seed1")
        c = openai.OpenAI(base_url=endpoint.openai_url, api_key=endpoint.api_key, max_retries=0, timeout=0.5)
        assert isinstance(_failure(lambda: _complete(c)), openai.APITimeoutError)  # the agent gave up waiting
        assert upstream.hung_up.wait(5)
    assert sent < 100
    exchange = next(r for r in read_records(tmp_path / "calls.jsonl") if isinstance(r, Exchange))
    assert exchange.error is not None and "disconnected" in exchange.error


@pytest.mark.parametrize(("mode", "why"), [("not_json", "not JSON"), ("no_choices", "no choices")])
def test_a_body_that_is_no_completion_passes_as_sent_and_is_a_format_finding(
    tmp_path: Path, mode: str, why: str
) -> None:
    with RawUpstream(mode) as upstream:  # type: ignore[arg-type]
        direct = httpx.post(f"{upstream.base_url}/chat/completions", json=ASK)
        with serve_proxy(Upstream(upstream.base_url)) as p:
            endpoint = p.episode("m/task/seed1", record=tmp_path / "calls.jsonl")
            headers = {"authorization": f"Bearer {endpoint.api_key}"}
            for _ in range(3):  # and the proxy still serves
                via = httpx.post(f"{endpoint.openai_url}/chat/completions", json=ASK, headers=headers)
                assert (via.status_code, via.content) == (direct.status_code, direct.content)
            turns, formats = endpoint.watch.finish(), endpoint.watch.formats
    assert len(turns) == 3 and turns[0].text == "" and not turns[0].tool_calls
    assert [e.category.value for e in formats[0].errors] == ["empty_response"] and why in formats[0].errors[
        0
    ].detail
    assert endpoint.watch.loop is None  # a broken server is not a looping model
    records = read_records(tmp_path / "calls.jsonl")
    exchange = next(r for r in records if isinstance(r, Exchange))
    assert exchange.status == 200 and exchange.turn == 0
    if mode == "not_json":
        assert exchange.body == direct.text and exchange.response is None
    assert any(isinstance(r, TurnRecord) and r.format.errors for r in records)


def test_an_upstream_not_up_is_a_502_and_a_restart_elsewhere_is_followed(tmp_path: Path) -> None:
    from harness.replay.endpoint import ReplayEndpoint

    script = tmp_path / "script.json"
    script.write_text(
        '{"model": "scripted", "responses": [{"content": "hello"}], "when_exhausted": "repeat_last"}'
    )
    upstream = ReplayEndpoint(f"replay:{script}", idle_timeout=0)
    with serve_proxy(upstream) as p:  # type: ignore[arg-type]
        endpoint = p.episode("m/task/seed1")
        c = client(endpoint.openai_url, endpoint.api_key)
        down = _failure(lambda: _complete(c))
        assert isinstance(down, openai.InternalServerError) and down.status_code == 502
        assert "not up" in str(down) and is_infra_fault(down)
        for _ in range(2):  # up, down, up again on another port: each request goes where it is now
            endpoint.ensure_up()
            assert c.chat.completions.create(**ASK).choices[0].message.content == "hello"
            upstream.release()
