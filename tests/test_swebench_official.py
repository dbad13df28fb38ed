"""SWE-bench in its official environment: an instance image named as swebench names the official
ones (NAMESPACE/sweb.eval.x86_64.<instance>:latest), only in a registry (the tests' Debian
docker-registry on 127.0.0.1), pulled by `harness tasks verify --swebench-images NAMESPACE` and
graded with swebench's unchanged eval script (conda activation included): resolved with the gold
patch, unresolved untouched; no clone of the repository on this machine.

The image is built in the test from the real instance sympy__sympy-20154 (tests/data/swebench)
with the official images' layout (tests/helpers/swebench_images.py: no conda channel, GitHub or
Docker Hub is reachable here), pushed, and removed from the engine before the harness runs.
"""

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers.registry import forget, has_manifest, push, registry_address

pytestmark = pytest.mark.timeout(1800)

INSTANCE = "sympy__sympy-20154"


@pytest.fixture(scope="module")
def official(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """(a one-row instance file, the mirror's namespace, the instance's image there)."""
    from harness.runtime.engine import docker_client
    from harness.runtime.images import ensure_sandbox_image
    from harness.tasks.swebench import official_image
    from tests.helpers.swebench_images import build_official_like
    from tests.helpers.swebench_repos import build_instances

    client = docker_client()
    ensure_sandbox_image(client)
    registry = registry_address()
    root = tmp_path_factory.mktemp("swebench-official")
    rows = [json.loads(line) for line in build_instances(root).read_text().splitlines() if line.strip()]
    row = next(r for r in rows if r["instance_id"] == INSTANCE)
    namespace = f"{registry}/swebench"
    ref = official_image(row, namespace)
    repository, tag = ref.rsplit(":", 1)
    if not has_manifest(registry, repository.split("/", 1)[1], tag):  # pushed by an earlier run: kept
        build_official_like(client, row, root / "repos", ref)
        push(client, ref)
    forget(client, ref)  # only the registry has it now
    shutil.rmtree(root / "repos")  # the image holds the repository: no clone is needed
    one = root / "one.jsonl"
    one.write_text(json.dumps(row) + "\n")
    return one, namespace, ref


@pytest.mark.slow
def test_the_official_name_is_swebench_s(official: tuple[Path, str, str]) -> None:
    _, namespace, ref = official
    assert ref == f"{namespace}/sweb.eval.x86_64.sympy_1776_sympy-20154:latest"


@pytest.mark.slow
def test_pulled_from_the_registry_and_graded_resolved_with_gold_unresolved_untouched(
    official: tuple[Path, str, str], capfd: pytest.CaptureFixture[str]
) -> None:
    from harness.runtime.base import SandboxConfig
    from harness.tasks.oracle import verify_suite

    one, namespace, ref = official
    report = verify_suite(str(one), runtime="docker", sandbox=SandboxConfig(swebench_images=namespace))
    (check,) = report.checks
    assert check.status == "valid", check.detail
    assert check.reference is not None and check.untouched is not None
    assert "swebench: FAIL_TO_PASS 2/2, PASS_TO_PASS 40/40 passed: resolved" in check.reference.output_tail
    assert "FAIL_TO_PASS 0/2" in check.untouched.output_tail and "unresolved" in check.untouched.output_tail
    assert f"pulled {ref}" in capfd.readouterr().err


@pytest.mark.slow
def test_the_instance_holds_against_the_forging_cheats_in_its_official_image(
    official: tuple[Path, str, str],
) -> None:
    """`tasks audit` on the real instance, graded by swebench's own eval script in the pulled image:
    the fix compiled to bytecode with the buggy source put back, a pytest plugin in workspace
    metadata and always-equal return values each leave it unresolved (FAIL_TO_PASS fails; sympy's
    own runner, bin/test, is the one the eval script calls). The other cheats: the local sample
    in tests/test_tasks_audit.py."""
    from harness.runtime.base import SandboxConfig
    from harness.tasks.audit import audit_suite

    one, namespace, _ = official
    report = audit_suite(
        str(one),
        runtime="docker",
        sandbox=SandboxConfig(swebench_images=namespace),
        cheat=("stale-bytecode", "pytest-plugin", "always-equal"),
    )
    (audit,) = report.audits
    outcomes = {r.cheat: (r.outcome, r.detail) for r in audit.results}
    assert {c: o for c, (o, _) in outcomes.items()} == {
        "stale-bytecode": "held",
        "pytest-plugin": "held",
        "always-equal": "held",
    }, outcomes
