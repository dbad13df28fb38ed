"""The code checks a reviewer would run: ruff, mypy, and the import boundaries of DESIGN.md."""

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

BIN = Path(sys.executable).parent


def test_ruff_clean() -> None:
    done = subprocess.run(
        [str(BIN / "ruff"), "check", "harness", "tests", "bench"], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-3000:]


def test_mypy_clean() -> None:
    done = subprocess.run([str(BIN / "mypy"), "harness"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_harness_process_never_imports_vllm_or_torch() -> None:
    # _gguf_to_hf.py runs inside the server environment as a script, never imported.
    offenders = {
        str(p.relative_to(REPO)): bad
        for p in (REPO / "harness").rglob("*.py")
        if p.name != "_gguf_to_hf.py" and (bad := _imports(p) & {"vllm", "torch", "transformers"})
    }
    assert not offenders
