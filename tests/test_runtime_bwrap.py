"""--runtime bwrap: episodes in local directories with every process confined by bubblewrap. A
scripted agent that reaches for what is not its own (a secret file outside its workspace, a token
server on this machine's loopback, a path outside its workspace, a process of the host) gets none
of it and still solves its task; the forging canary scores 0 there as elsewhere; with no container
engine, auto picks it and says nothing of running unconfined."""

import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from harness.evaluate import EvalConfig, run_eval
from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
from harness.results.store import RunStore
from harness.runtime.bwrap import usable

pytestmark = [
    pytest.mark.skipif(usable() is not None, reason=f"bwrap cannot confine here: {usable()}"),
    pytest.mark.timeout(600),
]
SECRET = "token-5f1e2d-not-for-agents"


def sh(command: str) -> ScriptedResponse:
    return ScriptedResponse(tool_calls=[ScriptedCall(name="terminal", arguments={"command": command})])


class _Token(BaseHTTPRequestHandler):
    asked: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).asked.append(self.path)
        body = SECRET.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.mark.slow
def test_a_confined_agent_reaches_nothing_of_the_host_and_still_solves_its_task(tmp_path: Path) -> None:
    secret = tmp_path / "home" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text(SECRET)
    outside = tmp_path / "outside.txt"
    token = ThreadingHTTPServer(("127.0.0.1", 0), _Token)
    threading.Thread(target=token.serve_forever, daemon=True).start()
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    port = token.server_address[1]
    fetch = f"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{port}/t', timeout=3).read())"
    script = [
        sh(f"cat {secret} > leak.txt; cat ~/secret.txt >> leak.txt; ls {tmp_path} >> leak.txt"),
        sh(f'python3 -c "{fetch}" >> leak.txt 2>&1'),
        sh(f"echo pwned > {outside}; echo pwned > /usr/local/pwned"),
        sh(f"kill -9 {victim.pid}; kill -9 -1"),
        ScriptedResponse(
            tool_calls=[ScriptedCall(name="file_editor", arguments={"command": "view", "path": str(secret)})]
        ),
        ScriptedResponse(
            tool_calls=[
                ScriptedCall(
                    name="file_editor",
                    arguments={"command": "create", "path": str(outside), "file_text": "x"},
                )
            ]
        ),
        sh("sed -i 's/a - b/a + b/' calc.py"),
        ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "done"})]),
    ]
    run = tmp_path / "run"
    try:
        with ReplayServer(ReplayScript(model="scripted", responses=script)) as server:
            run_eval(
                EvalConfig(
                    runtime="bwrap",
                    models=("scripted",),
                    tasks="smoke",
                    task=("fix-add",),
                    base_url=server.base_url,
                    run_dir=run,
                    concurrency=1,
                )
            )
        assert victim.poll() is None, "the agent killed a process of the host"
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        token.shutdown()
    (rec,) = RunStore(run).records().values()
    assert (rec.status, rec.reward) == ("resolved", 1.0), rec
    assert _Token.asked == [], "the agent reached the host's loopback"
    assert not outside.exists() and not Path("/usr/local/pwned").exists()
    leaked = [p for p in run.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaked == [], leaked
    turns = [json.loads(x) for x in (run / rec.trajectory).read_text().splitlines()]
    editor = [
        t["observation"] for t in turns if t["tool_calls"] and t["tool_calls"][0]["name"] == "file_editor"
    ]
    assert len(editor) == 2 and all("outside the workspace" in o for o in editor), editor


@pytest.mark.slow
def test_the_forging_canary_scores_zero_confined_and_an_honest_fix_one(tmp_path: Path) -> None:
    """tests/test_verify_forging.py's canary under bwrap: what the agent plants outside its workspace
    (its home, the temporary directory, a directory on PATH) never lands, and every forgery scores 0."""
    from tests.test_verify_forging import canary, check, evaluate

    for name in ("home", "tmp", "bin"):
        (tmp_path / name).mkdir()
    env = {
        "HOME": str(tmp_path / "home"),
        "FORGE_BIN": str(tmp_path / "bin"),
        "FORGE_PY": sys.executable,
        "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        suite, names, script = canary(tmp_path)
        run = tmp_path / "run"
        recs = evaluate(script, suite, run, "bwrap")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert not (tmp_path / "bin" / "python3").exists()  # the plant outside its workspace failed
    check(recs, run, names)


def test_auto_picks_bwrap_without_an_engine_and_says_nothing_of_running_unconfined(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.runtime import engine, select

    monkeypatch.setattr(engine, "engine_answers", lambda: False)
    runtime = select.make_runtime("auto")
    said = " ".join(capsys.readouterr().err.split())  # a narrow console wraps the line
    assert runtime.name == "bwrap", said
    assert "confined by bubblewrap" in said and "unconfined" not in said
