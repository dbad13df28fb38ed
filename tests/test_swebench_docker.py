"""SWE-bench in containers, graded by the official swebench package (4.1.0).

Grading units (no engine): logs in each parser's format, with the instances' real test names
(sympy's ``test_foo``, pytest node ids of psf__requests-3362, a Django ``name (module.Class)``),
resolved only when every FAIL_TO_PASS test passes and every PASS_TO_PASS test still passes.

On the real engine: two real SWE-bench Verified instances of sympy 1.7 (tests/data/swebench; the
repository is rebuilt from sympy's PyPI sdist, see its README): both images share the environment
layers of (sympy, 1.7); one verified with `harness tasks verify --runtime docker` finds its image
without building, and the gold patch resolves it and the untouched repository does not, as
swebench's sympy parser reads bin/test's log. Then `harness eval` with the replay
server: the scripted agent fixes one instance inside its container, and `export-preds` gives
the fix as a patch for the official harness.

Cost here (podman on a shared 2-core machine): the first run builds the sympy 1.7 environment
and both instance images in about 30 s (pip from PyPI) and verifies 20154 in about 15 s (20212's
test_power.py alone takes ~40 s a run: it is built, not verified); images stay cached in the engine
for later runs.
"""

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness.runtime.base import SandboxConfig
from harness.tasks.swebench_grading import eval_report, grade_logs
from tests.helpers.swebench_repos import DATA

pytestmark = pytest.mark.timeout(1200)

# These instances are built here from the sandbox image (the opt-in for air-gapped machines); the
# official images' path is tests/test_swebench_official.py.
LOCAL_BUILD = SandboxConfig(swebench_images="local")

START, END = ">>>>> Start Test Output", ">>>>> End Test Output"


def rows() -> dict[str, dict]:
    lines = (DATA / "instances.jsonl").read_text().splitlines()
    return {r["instance_id"]: r for r in map(json.loads, filter(None, lines))}


def spec_of(row: dict) -> dict:
    return {
        "instance_id": row["instance_id"],
        "repo": row["repo"],
        "version": row["version"],
        "FAIL_TO_PASS": json.loads(row["FAIL_TO_PASS"]),
        "PASS_TO_PASS": json.loads(row["PASS_TO_PASS"]),
    }


def sympy_log(spec: dict, outcome: dict[str, str]) -> str:
    """bin/test --verbose output: one `name ok|F|E` line per test, between SWE-bench's markers."""
    names = spec["FAIL_TO_PASS"] + spec["PASS_TO_PASS"]
    body = "\n".join(f"{n} {outcome.get(n, 'ok')}" for n in names)
    return f"+ git apply -v -\nApplied patch\n+ : '{START}'\n{body}\n+ : '{END}'\n"


def grade(tmp_path: Path, spec: dict, log: str) -> tuple[str, str, dict]:
    tests, logs = tmp_path / "tests", tmp_path / "logs"
    tests.mkdir(exist_ok=True)
    logs.mkdir(exist_ok=True)
    (tests / "swebench.json").write_text(json.dumps(spec))
    (logs / "test_output.txt").write_text(log)
    line = grade_logs(tests, logs)
    assert line is not None
    return line, (logs / "reward.txt").read_text().strip(), json.loads((logs / "report.json").read_text())


def test_sympy_names_resolved_as_swebench_resolves_them(tmp_path: Path) -> None:
    spec = spec_of(rows()["sympy__sympy-20154"])
    line, reward, report = grade(tmp_path, spec, sympy_log(spec, {}))
    assert reward == "1" and report["resolved"]
    assert line == "swebench: FAIL_TO_PASS 2/2, PASS_TO_PASS 40/40 passed: resolved"
    # One FAIL_TO_PASS test still failing: unresolved, whatever the others do.
    line, reward, _ = grade(tmp_path, spec, sympy_log(spec, {"test_uniq": "F"}))
    assert reward == "0" and "FAIL_TO_PASS 1/2" in line and "failing: test_uniq" in line
    # A PASS_TO_PASS test broken (an error): unresolved too.
    line, reward, _ = grade(tmp_path, spec, sympy_log(spec, {"test_flatten": "E"}))
    assert reward == "0" and "PASS_TO_PASS 39/40" in line
    # A test missing from the log counts as failed, as in swebench.
    log = sympy_log(spec, {}).replace("test_partitions ok\n", "")
    assert grade(tmp_path, spec, log)[1] == "0"
    # The test patch did not apply: no results at all.
    line, reward, report = grade(tmp_path, spec, ">>>>> Patch Apply Failed\n" + sympy_log(spec, {}))
    assert reward == "0" and not report["patch_successfully_applied"] and "no test results" in line


def test_pytest_node_ids_and_django_names(tmp_path: Path) -> None:
    # psf__requests-3362's real FAIL_TO_PASS and the first of its PASS_TO_PASS node ids.
    spec = {
        "instance_id": "psf__requests-3362",
        "repo": "psf/requests",
        "version": "2.10",
        "FAIL_TO_PASS": ["tests/test_requests.py::TestRequests::test_response_decode_unicode"],
        "PASS_TO_PASS": [
            "tests/test_requests.py::TestRequests::test_entry_points",
            "tests/test_requests.py::TestRequests::test_invalid_url[MissingSchema-hiwpefhipowhefopw]",
            "tests/test_requests.py::TestRequests::test_invalid_url[InvalidURL-http://]",
        ],
    }
    passed = "\n".join(f"PASSED {t}" for t in spec["FAIL_TO_PASS"] + spec["PASS_TO_PASS"])
    log = f"+ : '{START}'\n===== short test summary info =====\n{passed}\n+ : '{END}'\n"
    assert grade(tmp_path, spec, log)[1] == "1"
    failed = log.replace(f"PASSED {spec['FAIL_TO_PASS'][0]}", f"FAILED {spec['FAIL_TO_PASS'][0]} - assert")
    assert grade(tmp_path, spec, failed)[1] == "0"
    # Django's runner names tests "name (module.Class)": a name with a space, not a node id (names
    # in that form; not a real instance).
    django = {
        "instance_id": "django__django-example",
        "repo": "django/django",
        "version": "3.0",
        "FAIL_TO_PASS": ["test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)"],
        "PASS_TO_PASS": ["test_help_text (auth_tests.test_validators.UserAttributeSimilarityValidatorTest)"],
    }
    body = "\n".join(f"{t} ... ok" for t in django["FAIL_TO_PASS"] + django["PASS_TO_PASS"])
    log = f"+ : '{START}'\n{body}\n+ : '{END}'\n"
    report = eval_report(django, _write(tmp_path / "django.txt", log))
    assert report["resolved"]
    report = eval_report(
        django, _write(tmp_path / "django.txt", log.replace("Tests) ... ok", "Tests) ... FAIL", 1))
    )
    assert not report["resolved"]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_not_a_swebench_task(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    assert grade_logs(tmp_path / "tests", tmp_path) is None


# On the real engine -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def instances(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.helpers.swebench_repos import build_instances

    return build_instances(tmp_path_factory.mktemp("swebench"))


@pytest.mark.slow
def test_verify_gold_resolves_untouched_does_not(
    instances: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both instances' images built on one environment ((sympy, 1.7)'s layers shared); then
    sympy__sympy-20154 verified: found without building, the gold patch resolves it and the
    untouched repository does not. (sympy__sympy-20212's tests take ~40 s a run for the same parser:
    its grading is the unit above; the official images' path verifies 20154 too:
    tests/test_swebench_official.py.)"""
    from harness.runtime import task_images
    from harness.runtime.engine import docker_client
    from harness.runtime.images import ensure_sandbox_image, sandbox_image_ref
    from harness.runtime.task_images import build_task_image
    from harness.tasks.loader import load_suite
    from harness.tasks.oracle import verify_suite

    client = docker_client()
    ensure_sandbox_image(client)
    tasks = load_suite(str(instances), images=True, swebench_images="local").tasks
    assert {t.id for t in tasks} == {"sympy__sympy-20154", "sympy__sympy-20212"}
    tags = [build_task_image(client, t) for t in tasks]
    layers = [client.images.get(tag).attrs["RootFS"]["Layers"] for tag in tags]
    base = len(client.images.get(sandbox_image_ref()).attrs["RootFS"]["Layers"])
    shared = next(i for i, (a, b) in enumerate(zip(*layers, strict=False)) if a != b)
    assert shared >= base + 2, f"the environment layers are not shared: {shared} of {len(layers[0])}"

    one = instances.parent / "verify-one.jsonl"  # beside repos/, where the checkout is found
    one.write_text(
        next(line for line in instances.read_text().splitlines() if "sympy__sympy-20154" in line) + "\n"
    )
    # Found, not built again: counted at the harness's one build call. (The engine's image list is
    # no witness: the other worker's tests build images of their own meanwhile; fresh11 saw one.)
    built: list[str] = []
    build = task_images._build

    def counted(client: Any, context: Path, dockerfile: str, tag: str, timeout: float | None = None) -> Any:
        built.append(tag)
        return build(client, context, dockerfile, tag, timeout)

    monkeypatch.setattr(task_images, "_build", counted)
    report = verify_suite(str(one), runtime="docker", concurrency=2, sandbox=LOCAL_BUILD)
    assert built == []
    assert report.runtime == "docker" and not report.skipped
    (check,) = report.checks
    assert check.task_id == "sympy__sympy-20154"
    assert check.status == "valid", check.detail
    assert check.reference is not None and check.untouched is not None
    assert "swebench: FAIL_TO_PASS 2/2, PASS_TO_PASS 40/40 passed: resolved" in check.reference.output_tail
    assert "FAIL_TO_PASS 0/" in check.untouched.output_tail
    assert "unresolved" in check.untouched.output_tail


@pytest.mark.slow
def test_eval_agent_fixes_it_in_the_container_and_export_preds(instances: Path, tmp_path: Path) -> None:
    from harness.evaluate import EvalConfig, run_eval
    from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
    from harness.results.preds import export_preds
    from harness.results.store import RunStore

    one = instances.parent / "one.jsonl"  # beside repos/, where the checkout is found
    one.write_text(
        next(line for line in instances.read_text().splitlines() if "sympy__sympy-20154" in line) + "\n"
    )
    fix = (
        "sed -i 's/yield sum(ms.values()), ms$/yield sum(ms.values()), ms.copy()/; "
        "s/yield ms$/yield ms.copy()/' sympy/utilities/iterables.py && pwd && git diff --stat"
    )
    script = [
        ScriptedResponse(
            content="Copy the dicts.", tool_calls=[ScriptedCall(name="terminal", arguments={"command": fix})]
        ),
        ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "done"})]),
    ]
    run = tmp_path / "run"
    with ReplayServer(ReplayScript(model="m", responses=script)) as server:
        run_eval(
            EvalConfig(
                runtime="docker",
                models=("m",),
                tasks=str(one),
                base_url=server.base_url,
                run_dir=run,
                sandbox=LOCAL_BUILD,
            )
        )
    (rec,) = RunStore(run).records().values()
    assert rec.status == "resolved" and rec.reward == 1.0, rec
    episode = RunStore(run).episode_dir(rec.model, rec.task_id, rec.seed)
    report = json.loads((episode / "swebench_report.json").read_text())
    assert report["tests_status"]["FAIL_TO_PASS"]["success"] == ["test_partitions", "test_uniq"]

    assert export_preds(run, tmp_path / "preds.jsonl") == 1
    pred = json.loads((tmp_path / "preds.jsonl").read_text())
    assert pred["instance_id"] == "sympy__sympy-20154"
    patch = pred["model_patch"]
    assert (
        patch.startswith("diff --git a/sympy/utilities/iterables.py")
        and "+            yield ms.copy()" in patch
    )
    assert "egg-info" not in patch and patch.count("diff --git") == 1
    # The patch applies to the instance's base commit, as the official harness applies it.
    repo = instances.parent / "repos" / "sympy__sympy"
    subprocess.run(["git", "checkout", "-q", "sympy__sympy-20154"], cwd=repo, check=True)
    done = subprocess.run(
        ["git", "apply", "--check", "-"], cwd=repo, input=patch, text=True, capture_output=True
    )
    assert done.returncode == 0, done.stderr
