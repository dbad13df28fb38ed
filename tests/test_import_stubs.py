"""The tool server's stand-ins for the SDK's unused model clients (harness/episodes/openhands/import_stubs.py):
the tools import over them and behave as over the real packages, anything from them used after
the import raises, and an import the stand-ins cannot satisfy falls back to the real packages."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.episodes.openhands.container_tools import TOOL_SERVER_FILES as FILES


def _run(code: str, cwd: Path, **env: str) -> dict:  # type: ignore[type-arg]
    """``code`` in a fresh interpreter laid out as the container's tool server is (its three files
    copied beside it, no harness package), printing one JSON object last."""
    lib = cwd / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    for f in FILES:
        shutil.copy(f, lib / f.name)
    prelude = f"import sys; sys.path.insert(0, {str(lib)!r})\n"
    done = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


_ACTIONS = """
def observe(tools, workdir):
    out = []
    for tool, action in [
        ("file_editor", {"command": "create", "path": workdir + "/a.py", "file_text": "x = 1\\n"}),
        ("file_editor", {"command": "str_replace", "path": workdir + "/a.py", "old_str": "x = 1", "new_str": "x = 2"}),
        ("file_editor", {"command": "view", "path": workdir + "/a.py"}),
        ("file_editor", {"command": "view", "path": workdir + "/missing.py"}),
        ("terminal", {"command": "cat a.py && echo done"}),
        ("terminal", {"command": "bash -c 'exit 3'"}),
    ]:
        reply = tools.call(tool, action)
        obs = reply.get("observation") or reply
        obs.pop("limits", None)
        if isinstance(obs.get("metadata"), dict):
            obs["metadata"].pop("pid", None)
        out.append(obs)
    tools.close()
    return out
"""


@pytest.mark.slow
def test_tools_over_the_stand_ins_answer_as_over_the_real_packages(tmp_path: Path) -> None:
    code = (
        _ACTIONS
        + """
import json, os, sys
import toolserver
if os.environ.get("REAL"):
    import litellm, openai  # imported for real first: the stand-ins leave them alone
workdir = os.path.abspath("ws")
os.makedirs(workdir)
tools = toolserver.Tools(workdir, "subprocess")
stubbed = type(sys.modules["litellm"]).__name__ == "_StubModule"
print(json.dumps({"stubbed": stubbed, "obs": observe(tools, workdir)}))
"""
    )
    over_stubs = _run(code, tmp_path / "a")
    over_real = _run(code, tmp_path / "b", REAL="1")
    assert over_stubs["stubbed"] and not over_real["stubbed"]

    def masked(obs: object) -> str:
        return json.dumps(obs).replace(str(tmp_path / "a"), "T").replace(str(tmp_path / "b"), "T")

    assert masked(over_stubs["obs"]) == masked(over_real["obs"])
    assert over_stubs["obs"][4]["exit_code"] == 0 and "x = 2" in json.dumps(over_stubs["obs"][4])
    assert over_stubs["obs"][5]["exit_code"] == 3


def test_a_stand_in_used_after_the_import_raises(tmp_path: Path) -> None:
    got = _run(
        """
        import json
        import import_stubs
        with import_stubs.stubbed(("litellm",)):
            import litellm
            from litellm.types.utils import ModelResponse
            class Mine(ModelResponse):  # subclassing and instantiating during the import is fine
                pass
            Mine()
            models = list(litellm.model_cost.keys())
        try:
            litellm.completion(model="x")
            used = "no error"
        except import_stubs.StubUsed as exc:
            used = str(exc)
        try:
            Mine()
            sub = "no error"
        except import_stubs.StubUsed as exc:
            sub = str(exc)
        print(json.dumps({"models": models, "used": used, "sub": sub}))
        """,
        tmp_path,
    )
    assert got["models"] == []
    assert "litellm.completion is a stand-in" in got["used"]
    assert "stand-in" in got["sub"]


@pytest.mark.slow
def test_an_import_the_stand_ins_cannot_satisfy_falls_back_to_the_real_packages(tmp_path: Path) -> None:
    # A module that does arithmetic on a litellm constant: a stand-in cannot pass for a number.
    (tmp_path / "needs_real.py").write_text("import litellm\nLIMIT = litellm.request_timeout * 2 + 1\n")
    got = _run(
        f"""
        import json, sys
        sys.path.insert(0, {str(tmp_path)!r})
        import import_stubs
        try:
            with import_stubs.stubbed(("litellm",)):
                import needs_real
            first = "imported"
        except TypeError:
            import_stubs.forget_stubbed(owners=("needs_real",), roots=("litellm",))
            import needs_real
            first = "fell back"
        print(json.dumps({{"first": first, "limit": needs_real.LIMIT > 1,
                          "real": type(sys.modules["litellm"]).__name__ == "module"}}))
        """,
        tmp_path,
    )
    assert got == {"first": "fell back", "limit": True, "real": True}
