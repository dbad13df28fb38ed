"""The code checks a reviewer would run: ruff, mypy, and the import boundaries of DESIGN.md."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

BIN = Path(sys.executable).parent


def test_ruff_clean() -> None:
    done = subprocess.run(
        [str(BIN / "ruff"), "check", "harness", "tests", "bench"], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-3000:]


@pytest.mark.slow
def test_mypy_clean() -> None:
    # The cache outside the checkout: a fresh clone (CI's) checks only what changed since the last run.
    from harness.paths import cache_dir

    cache = cache_dir() / "mypy"
    done = subprocess.run(
        [str(BIN / "mypy"), "--cache-dir", str(cache), "harness"], cwd=REPO, capture_output=True, text=True
    )
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


def _module(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _every_import(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import statement in a harness module: module-level, deferred into a
    function, or type-only under ``if TYPE_CHECKING:``. A deferred import still couples the two
    modules: a circle through one only waits for its first call."""
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, [a.name for a in node.names]))
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module(p): p for p in (REPO / "harness").rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for target, names in _every_import(path):
            for candidate in [f"{target}.{n}" for n in names] + [target]:
                if candidate in modules and candidate != name:
                    graph[name].add(candidate)
                    break
    return graph


@pytest.mark.slow
def test_no_import_cycle_among_harness_modules() -> None:
    """Imports form no circle, counting deferred and type-only ones: each layer of the seam depends
    only on lower ones (a package's ``__init__`` re-exporting its modules is no circle: ``from
    harness.x import y`` names the module ``harness.x.y``)."""
    graph = _graph()
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(node) :], node]))
        if node in done:
            return
        for nxt in sorted(graph[node]):
            visit(nxt, [*path, node])
        done.add(node)

    for start in sorted(graph):
        visit(start, [])


@pytest.mark.slow
def test_no_private_name_imported_across_packages() -> None:
    """``from harness.x.y import _private`` only within the package ``harness.x`` itself."""
    offenders = []
    for path in (REPO / "harness").rglob("*.py"):
        here = _module(path)
        package = here.rsplit(".", 1)[0] if path.name != "__init__.py" else here
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("harness")):
                continue
            source_package = node.module.rsplit(".", 1)[0]
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and source_package != package and node.module != package:
                    offenders.append(f"{here}: from {node.module} import {alias.name}")
    assert not offenders, offenders


def test_evaluate_stays_a_short_driver() -> None:
    """The phases of `harness eval` in one short file: backends plug in by name (registry.py)."""
    lines = len((REPO / "harness" / "evaluate.py").read_text().splitlines())
    assert lines < 450, lines
