"""SWE-bench instance files: what a generated task holds, and bad input, without a container engine
(the instances run and are graded in containers: tests/test_swebench_docker.py)."""

import json
import subprocess
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.tasks import load_suite, load_tasks
from tests.helpers.swebench_repos import DATA, git


@pytest.fixture
def instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """sympy__sympy-20212's real row, on a tiny stand-in repository with the file its test patch touches."""
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    row = next(
        json.loads(line) for line in (DATA / "instances.jsonl").read_text().splitlines() if "20212" in line
    )
    repo = tmp_path / "repos" / "sympy__sympy"
    (repo / "sympy/core/tests").mkdir(parents=True)
    (repo / "sympy/core/tests/test_power.py").write_text("def test_zero():\n    pass\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A", ".")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "commit", "-q", "--allow-empty", "-m", "a later commit the agent must not see")
    row["base_commit"] = git(repo, "rev-parse", "HEAD~1")
    return row


def write(tmp_path: Path, *rows: dict) -> Path:
    path = tmp_path / "instances.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_generated_task_in_its_official_image_needs_no_clone(instance: dict, tmp_path: Path) -> None:
    (tmp_path / "repos").rename(tmp_path / "elsewhere")  # the image holds the repository
    (task,) = load_suite(str(write(tmp_path, instance)), images=True).tasks
    assert task.image is not None and task.image.dockerfile is None
    # swebench's own naming (TestSpec.instance_image_key) in Docker Hub's namespace, "__" as _1776_.
    assert task.image.ref == "swebench/sweb.eval.x86_64.sympy_1776_sympy-20212:latest"
    eval_sh = (task.tests_dir / "eval.sh").read_text()
    # swebench's eval script unchanged: the image has the spec's conda environment.
    assert "source /opt/miniconda3/bin/activate" in eval_sh and "conda activate testbed" in eval_sh
    assert "bin/test -C --verbose sympy/core/tests/test_power.py" in eval_sh
    (mirrored,) = load_suite(
        str(write(tmp_path, instance)), images=True, swebench_images="127.0.0.1:5123/mirror"
    ).tasks
    assert mirrored.image is not None
    assert mirrored.image.ref == "127.0.0.1:5123/mirror/sweb.eval.x86_64.sympy_1776_sympy-20212:latest"


def test_generated_task(instance: dict, tmp_path: Path) -> None:
    path = write(tmp_path, instance)
    suite = load_suite(str(path), images=True, swebench_images="local")
    (task,) = suite.tasks
    assert task.id == "sympy__sympy-20212" and task.image is not None and task.image.dockerfile is not None
    assert task.instruction.startswith("0**-oo produces 0")
    assert task.metadata["base_commit"] == instance["base_commit"]
    dockerfile = task.image.dockerfile.read_text()
    # swebench's spec for sympy 1.7: its packages, pip_packages and install, in the image's Python.
    assert (
        "pip install mpmath flake8" in dockerfile and '"mpmath==1.3.0" "flake8-comprehensions"' in dockerfile
    )
    assert "python -m pip install -e ." in dockerfile and "COPY repo /testbed" in dockerfile
    assert dockerfile.index("RUN python3 -m venv") < dockerfile.index("COPY repo")  # environment layers first
    # The repository holds the base commit alone: no later history.
    repo = task.path / "environment" / "repo"
    log = subprocess.run(
        ["git", "log", "--format=%H"], cwd=repo, capture_output=True, text=True
    ).stdout.split()
    assert log == [instance["base_commit"]]
    # SWE-bench's eval script: the test patch, its markers, sympy's runner on the touched test file.
    eval_sh = (task.tests_dir / "eval.sh").read_text()
    assert "source /opt/miniconda3" not in eval_sh and "conda activate" not in eval_sh
    assert f"git checkout {instance['base_commit']} sympy/core/tests/test_power.py" in eval_sh
    assert "bin/test -C --verbose sympy/core/tests/test_power.py" in eval_sh
    assert (
        eval_sh.index(">>>>> Start Test Output") < eval_sh.index("bin/test") < eval_sh.index(">>>>> End Test")
    )
    spec = json.loads((task.tests_dir / "swebench.json").read_text())
    assert spec["FAIL_TO_PASS"] == ["test_zero"] and len(spec["PASS_TO_PASS"]) == 32
    assert (task.solution.parent / "gold.patch").read_text() == instance["patch"]
    # The same row in another file reuses the generated directory (and so its image).
    other = tmp_path / "other"
    other.mkdir()
    (other / "repos").symlink_to(tmp_path / "repos")
    (again,) = load_suite(str(write(other, instance)), images=True, swebench_images="local").tasks
    assert again.path == task.path


def test_local_runtime_says_it_needs_docker(instance: dict, tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match=r"need a Docker image.*--runtime docker runs them"):
        load_tasks(str(write(tmp_path, instance)))


def test_bad_instances(instance: dict, tmp_path: Path) -> None:
    cases = [
        ({**instance, "repo": "acme/nowhere"}, "swebench has no specs for acme/nowhere"),
        ({**instance, "version": "0.0"}, "no spec for sympy/sympy version 0.0"),
        ({**instance, "repo": "astropy/astropy", "version": "4.3"}, "no local checkout of astropy/astropy"),
        ({**instance, "instance_id": "../escape"}, "instance_id '../escape'"),
        ({"instance_id": "x-1"}, "missing repo, base_commit, problem_statement, version"),
    ]
    for row, message in cases:
        with pytest.raises(HarnessError, match=message):
            load_tasks(str(write(tmp_path, row)), swebench_images="local")
    (tmp_path / "instances.jsonl").write_text("{not json\n")
    with pytest.raises(HarnessError, match=":1: not JSON"):
        load_tasks(str(tmp_path / "instances.jsonl"))


def test_rows_from_a_parquet_file_load_through_datasets_and_an_unreachable_hub_is_one_line(
    instance: dict, tmp_path: Path
) -> None:
    import pandas as pd

    pd.DataFrame([instance]).to_parquet(tmp_path / "verified-sample.parquet")
    (task,) = load_suite(str(tmp_path / "verified-sample.parquet"), images=True).tasks
    assert task.id == "sympy__sympy-20212" and task.suite == "verified-sample"
    assert (
        task.image is not None and task.image.ref == "swebench/sweb.eval.x86_64.sympy_1776_sympy-20212:latest"
    )
    # No hub here (HF_HUB_OFFLINE=1, nothing cached): the dataset's name and what to do instead.
    with pytest.raises(HarnessError) as err:
        load_suite("swe-bench-verified", images=True)
    message = str(err.value)
    assert message.startswith("--tasks swe-bench-verified: the datasets library could not load it (")
    assert "\n" not in message and message.endswith("a local .jsonl or .parquet of its rows works too")
