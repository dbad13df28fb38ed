"""The docs: the site builds with --strict (no broken link, no page outside the nav), the README
stays a README, and every command of the quick start runs as written."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

QUICK_START = re.compile(r"<!-- quick-start -->\s*```bash\n(.*?)```\s*<!-- /quick-start -->", re.S)


def test_the_site_builds_strict_and_the_cli_reference_is_the_parser_s_help(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    for command in ("harness eval", "harness analyze", "harness tasks audit", "--concurrency"):
        assert command in cli, command


def test_the_readme_is_short_and_holds_the_two_set_up_commands() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.encode()) <= 15 * 1024, len(readme.encode())
    assert (
        "scripts/bootstrap && .venv/bin/harness eval --model smollm2-135m --seeds 1 --tasks smoke" in readme
    )
    assert "scripts/bootstrap --tests && .venv/bin/python -m pytest -n 2" in readme
    ci = (REPO / ".ci" / "run").read_text()
    assert "scripts/bootstrap --tests && .venv/bin/python -m pytest -n 2" in ci


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_command_of_the_quick_start_runs(tmp_path: Path, no_vllm_left: None) -> None:
    """docs/index.md's quick start, command by command, with its run directory in tmp_path: the
    bundled model on the smoke suite on its own vLLM server (~2 minutes on two cores)."""
    block = QUICK_START.search((REPO / "docs" / "index.md").read_text())
    assert block is not None, "docs/index.md has no quick-start block"
    commands = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(commands) >= 3
    run = tmp_path / "quickstart"
    for command in commands:
        argv = [str(run) if a == "results/quickstart" else a for a in shlex.split(command)]
        done = subprocess.run(
            argv,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert done.returncode == 0, (command, done.stderr[-3000:])
    assert (run / "report.html").is_file()
