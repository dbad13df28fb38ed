"""SWE-bench instances (JSONL rows) as container tasks, set up and graded as the official
``swebench`` package (4.1.0, the ``swebench`` extra) sets them up and grades them.

By default each instance runs in its official prebuilt image, as the official harness and its
peers run it: ``NAMESPACE/sweb.eval.<arch>.<instance id>:latest`` as swebench's
``TestSpec.instance_image_key`` names it (NAMESPACE ``swebench``, Docker Hub; ``__`` in the id
written ``_1776_``), pulled when the engine lacks it (``--swebench-images REGISTRY/NAMESPACE`` for
a mirror). It already holds the repository at ``base_commit`` in ``/testbed`` and the spec's conda
environment ``testbed``: the generated task names the image as its ``docker_image`` and carries
swebench's eval script unchanged (conda activation included). No repository is cloned here.

With ``--swebench-images local`` (air-gapped machines, no mirror) each instance is built here
instead, from a generated task directory (cached under the harness cache, by the file's content
and this recipe), with the limits the README states (the sandbox image's Python instead of the
spec's, pip instead of conda, a local clone of each repository):

- ``environment/Dockerfile`` + ``environment/repo``: the repository at ``base_commit`` (a
  one-commit shallow fetch from a local checkout at ``$HARNESS_SWEBENCH_REPOS/<owner>__<name>`` or
  ``<jsonl dir>/repos/<owner>__<name>``: no future history) at ``/testbed``, and its environment as
  ``MAP_REPO_VERSION_TO_SPECS[repo][version]`` says: the spec's conda environment ``testbed``
  stands as a venv of the image's Python at /opt/swebench-env (first on PATH), with what conda puts
  in every environment (pip, setuptools, wheel), the spec's ``packages`` and ``pip_packages`` from
  PyPI, then ``pre_install`` and ``install`` in the repository, as SWE-bench's instance image does.
  The environment's lines come first and are the same for every instance of a (repo, version), so
  the engine's layer cache builds each environment once;
- ``tests/eval.sh``: SWE-bench's own eval script for the instance (swebench's
  ``make_eval_script_list_py``: reset the test files, apply ``test_patch``, the spec's test command
  on the test files, between its output markers) without its conda activation lines;
  ``tests/test.sh`` runs it into ``/logs/verifier/test_output.txt``; the harness then grades that log
  on this machine with swebench's parser and ``get_eval_report`` (swebench_grading.py);
- ``solution/solve.sh``: applies the gold ``patch``; ``instruction.md``: the problem statement.

Predictions for the official harness: `harness export-preds`.
"""

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.paths import cache_dir
from harness.tasks.identifiers import check_commit, check_github_repo

SWEBENCH_PIN = (
    "swebench==4.1.0"  # the last release with per-repository specs (5.x moved them into task repos)
)
REPO_DIR = "/testbed"
ENV_DIR = "/opt/swebench-env"
SPEC_FILE = "swebench.json"  # tests/: what grading needs (repo, version, FAIL_TO_PASS, PASS_TO_PASS)
_RECIPE = "5"  # bump when the generated files change
LOCAL = "local"  # --swebench-images local: build each instance here from the sandbox image
DEFAULT_NAMESPACE = "swebench"  # Docker Hub's, as the official harness pulls them
_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}
_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")  # it names a directory and an image
_REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement", "version")
_CONDA_LINES = ("source /opt/miniconda3/bin/activate", "conda activate ")
# A PyPI mirror for the build (air-gapped machines), taken from this environment when generating.
_PIP_INDEX_ENV = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST")
_PATH = f"{ENV_DIR}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def swebench_specs() -> dict[str, dict[str, dict[str, Any]]]:
    """``MAP_REPO_VERSION_TO_SPECS`` of the installed swebench; one line saying how to get it else."""
    try:
        from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS
    except ImportError:
        raise HarnessError(
            f"SWE-bench instances need the swebench package: pip install 'harness[swebench]' ({SWEBENCH_PIN})"
        ) from None
    return MAP_REPO_VERSION_TO_SPECS  # type: ignore[no-any-return]


def tests_list(value: Any) -> list[str]:
    """FAIL_TO_PASS / PASS_TO_PASS as the dataset stores them: a JSON string or a list."""
    if isinstance(value, str):
        value = json.loads(value) if value.strip().startswith("[") else [value]
    return [str(v) for v in value or []]


def _spec(inst: dict[str, Any], where: str, *, conda: bool = False) -> dict[str, Any]:
    specs = swebench_specs()
    repo, version = inst["repo"], str(inst["version"])
    if repo not in specs:
        raise HarnessError(f"{where}: swebench has no specs for {repo} (it knows {len(specs)} repositories)")
    if version not in specs[repo]:
        raise HarnessError(
            f"{where}: swebench has no spec for {repo} version {version} (known: {', '.join(sorted(specs[repo]))})"
        )
    spec = dict(specs[repo][version])
    if spec.get("packages") == "environment.yml" and not conda:  # an official image has it set up
        raise HarnessError(
            f"{where}: {repo} {version} is set up from a conda environment.yml, which needs conda; "
            "only pip-installable specs are built here (the official images have it: drop --swebench-images local)"
        )
    return spec


def _repo_checkout(jsonl: Path, repo: str) -> Path:
    name = repo.replace("/", "__")
    roots = [Path(p) for p in (os.environ.get("HARNESS_SWEBENCH_REPOS"),) if p] + [jsonl.parent / "repos"]
    for root in roots:
        for candidate in (root / name, root / repo.split("/")[-1]):
            if (candidate / ".git").exists():
                return candidate
    raise HarnessError(
        f"{jsonl}: no local checkout of {repo}; clone it to {roots[-1] / name} (or set HARNESS_SWEBENCH_REPOS)"
    )


def _git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise HarnessError(f"git {' '.join(args[:3])} in {cwd} failed: {done.stderr.strip()[:200]}")
    return done.stdout


def _snapshot(checkout: Path, commit: str, dest: Path) -> None:
    """``dest``: a git repository holding only ``commit`` (shallow), checked out, no remote."""
    dest.mkdir(parents=True)
    _git("init", "-q", cwd=dest)
    _git("fetch", "-q", "--depth", "1", "--end-of-options", f"file://{checkout.resolve()}", commit, cwd=dest)
    _git("checkout", "-q", "FETCH_HEAD", cwd=dest)


def _requirements(checkout: Path, inst: dict[str, Any]) -> str:
    """A ``packages: requirements.txt`` spec's requirements, read from the local checkout at the
    instance's environment commit as swebench reads them from GitHub (``-r`` includes inlined)."""
    from swebench.harness.constants import MAP_REPO_TO_REQS_PATHS
    from swebench.harness.test_spec.python import clean_requirements

    commit = inst.get("environment_setup_commit") or inst["base_commit"]
    for path in MAP_REPO_TO_REQS_PATHS[inst["repo"]]:
        show = subprocess.run(
            ["git", "show", "--end-of-options", f"{commit}:{path}"],
            cwd=checkout,
            capture_output=True,
            text=True,
        )
        if show.returncode != 0:
            continue
        lines: list[str] = []
        for line in show.stdout.splitlines():
            if line.strip().startswith("-r"):
                inc = str(Path(path).parent / line.strip()[2:].strip())
                sub = subprocess.run(
                    ["git", "show", "--end-of-options", f"{commit}:{inc}"],
                    cwd=checkout,
                    capture_output=True,
                    text=True,
                )
                lines = sub.stdout.splitlines() + lines
            elif not line.strip().startswith(("-e .", "#", ".[test")):
                lines.append(line)
        return str(clean_requirements("\n".join(lines)))
    raise HarnessError(f"{checkout}: none of {MAP_REPO_TO_REQS_PATHS[inst['repo']]} at {commit}")


def _dockerfile(inst: dict[str, Any], spec: dict[str, Any], base_image: str, has_reqs: bool) -> str:
    from swebench.harness.constants import MAP_REPO_TO_INSTALL

    pip = f"{ENV_DIR}/bin/python -m pip install"
    env_steps = [f"python3 -m venv {ENV_DIR}", f"{pip} setuptools wheel"]
    if has_reqs:
        env_steps.append(f"{pip} -r /root/requirements.txt")
    elif spec.get("packages"):
        env_steps.append(f"{pip} {spec['packages']}")
    if spec.get("pip_packages"):
        env_steps.append(f"{pip} {' '.join(json.dumps(p) for p in spec['pip_packages'])}")
    repo_steps = [MAP_REPO_TO_INSTALL[inst["repo"]]] if inst["repo"] in MAP_REPO_TO_INSTALL else []
    repo_steps += list(spec.get("pre_install") or [])
    repo_steps += [spec["install"]] if spec.get("install") else []
    repo_steps += [
        # What the set-up left untracked (build output such as *.egg-info) is not the agent's:
        # `git add -A` (export-preds) leaves it out, whatever the repository's .gitignore says.
        "git ls-files --others --exclude-standard >> .git/info/exclude",
        "git config --global user.email setup@swebench.config",
        "git config --global user.name SWE-bench",
        "git commit --allow-empty -qam SWE-bench",
    ]
    lines = [
        f"FROM {base_image}",
        "# Build-time only: this machine's CA bundle (a proxy's CA may be in it) for pip.",
        "ARG PIP_CERT=/usr/local/share/harness-build-ca.pem",
        "ARG PIP_DISABLE_PIP_VERSION_CHECK=1",
        "ARG DEBIAN_FRONTEND=noninteractive",
        *(f"ARG {k}={json.dumps(v)}" for k in _PIP_INDEX_ENV if (v := os.environ.get(k))),
        "COPY build-ca.pem /usr/local/share/harness-build-ca.pem",
        f"# The environment of {inst['repo']} {inst['version']} (swebench's spec; conda's testbed as a venv).",
    ]
    if has_reqs:
        lines.append("COPY requirements.txt /root/requirements.txt")
    lines += [
        f"RUN {' && '.join(env_steps)}",
        f"ENV PATH={_PATH} VIRTUAL_ENV={ENV_DIR}",
        "# The instance: the repository at base_commit, installed as swebench's repo script does.",
        f"COPY repo {REPO_DIR}",
        f"WORKDIR {REPO_DIR}",
        "RUN bash -euo pipefail -c " + json.dumps(" && ".join(repo_steps)),
    ]
    return "\n".join(lines) + "\n"


def _eval_script(inst: dict[str, Any], spec: dict[str, Any]) -> str:
    from swebench.harness.test_spec.python import make_eval_script_list_py

    steps = make_eval_script_list_py(
        inst, spec, "testbed", REPO_DIR, inst["base_commit"], inst.get("test_patch") or ""
    )
    kept = [s for s in steps if not s.startswith(_CONDA_LINES)]
    # As TestSpec.eval_script writes it. No network at verification time: pip must not reach out.
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", "export PIP_NO_INDEX=1", *kept]) + "\n"


_TEST_SH = """#!/bin/bash
# SWE-bench's eval script for this instance; the harness grades its log with swebench's parser.
bash "$TESTS_DIR/eval.sh" > /logs/verifier/test_output.txt 2>&1
echo "eval.sh exited $?; the end of /logs/verifier/test_output.txt:"
tail -n 25 /logs/verifier/test_output.txt
"""


def _build_ca() -> bytes:
    from harness.runtime.images import host_ca_bundle

    found = host_ca_bundle()
    return found.read_bytes() if found else b""


def official_image(inst: dict[str, Any], namespace: str) -> str:
    """The instance's official image as swebench names it (``TestSpec.instance_image_key``)."""
    from swebench.harness.test_spec.test_spec import TestSpec

    spec = TestSpec(
        instance_id=inst["instance_id"],
        repo=inst["repo"],
        version=str(inst["version"]),
        repo_script_list=[],
        eval_script_list=[],
        env_script_list=[],
        arch=_ARCH.get(platform.machine(), "x86_64"),
        FAIL_TO_PASS=[],
        PASS_TO_PASS=[],
        language="py",
        docker_specs={},
        namespace=namespace,
    )
    return str(spec.instance_image_key)


def _official_eval_script(inst: dict[str, Any], spec: dict[str, Any]) -> str:
    from swebench.harness.test_spec.python import make_eval_script_list_py

    steps = make_eval_script_list_py(
        inst, spec, "testbed", REPO_DIR, inst["base_commit"], inst.get("test_patch") or ""
    )
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", *steps]) + "\n"  # TestSpec.eval_script


def _write_task(
    inst: dict[str, Any], jsonl: Path, dest: Path, base_image: str, where: str, namespace: str = LOCAL
) -> None:
    spec = _spec(inst, where, conda=namespace != LOCAL)
    work = dest.with_name(dest.name + ".tmp")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    image = ""
    if namespace == LOCAL:
        checkout = _repo_checkout(jsonl, inst["repo"])
        env = work / "environment"
        _snapshot(checkout, inst["base_commit"], env / "repo")
        has_reqs = spec.get("packages") == "requirements.txt"
        if has_reqs:
            (env / "requirements.txt").write_text(_requirements(checkout, inst))
        (env / "build-ca.pem").write_bytes(_build_ca())
        (env / "Dockerfile").write_text(_dockerfile(inst, spec, base_image, has_reqs))
    else:
        image = official_image(inst, namespace)
    (work / "instruction.md").write_text(inst["problem_statement"])
    tests = work / "tests"
    tests.mkdir()
    (tests / "eval.sh").write_text(
        _eval_script(inst, spec) if not image else _official_eval_script(inst, spec)
    )
    (tests / "test.sh").write_text(_TEST_SH)
    grading = {
        "instance_id": inst["instance_id"],
        "repo": inst["repo"],
        "version": str(inst["version"]),
        "FAIL_TO_PASS": tests_list(inst.get("FAIL_TO_PASS")),
        "PASS_TO_PASS": tests_list(inst.get("PASS_TO_PASS")),
    }
    (tests / SPEC_FILE).write_text(json.dumps(grading, indent=1) + "\n")
    (work / "solution").mkdir()
    (work / "solution" / "gold.patch").write_text(inst.get("patch") or "")
    (work / "solution" / "solve.sh").write_text(
        '#!/usr/bin/env bash\nset -euo pipefail\ngit apply -v "$(dirname "$0")/gold.patch"\n'
    )
    (work / "task.toml").write_text(
        "[task]\n"
        'category = "swe-bench"\n'
        f"instance_id = {json.dumps(inst['instance_id'])}\n"
        f"base_commit = {json.dumps(inst['base_commit'])}\n\n"
        "[agent]\ntimeout_sec = 1800.0\n\n"
        "[verifier]\ntimeout_sec = 1800.0\n\n"  # SWE-bench's own per-instance limit
        "[environment]\nmemory_mb = 4096\n" + (f"docker_image = {json.dumps(image)}\n" if image else "")
    )
    if dest.exists():
        shutil.rmtree(dest)
    work.rename(dest)


def _instance(line: str, where: str) -> dict[str, Any]:
    """One row, its identifiers checked before any reaches git, a path or a generated script."""
    try:
        inst = json.loads(line)
    except json.JSONDecodeError as exc:
        raise HarnessError(f"{where}: not JSON ({exc.msg})") from None
    except RecursionError:
        raise HarnessError(f"{where}: nested too deeply to be a SWE-bench instance") from None
    if not isinstance(inst, dict):
        raise HarnessError(f"{where}: not a JSON object; not a SWE-bench instance")
    missing = [k for k in _REQUIRED if not inst.get(k)]
    if missing:
        raise HarnessError(f"{where}: missing {', '.join(missing)}; not a SWE-bench instance")
    if not isinstance(inst["instance_id"], str) or not _ID.fullmatch(inst["instance_id"]):
        raise HarnessError(
            f"{where}: instance_id {str(inst['instance_id'])[:60]!r}: letters, digits, '.', '_' and '-' only"
        )
    # git fetch / git show / the eval script's `git checkout` take them: an option (--upload-pack=CMD
    # runs CMD) or shell text there is the task's content running on this machine.
    check_commit(inst["base_commit"], f"{where}: base_commit")
    if inst.get("environment_setup_commit"):
        check_commit(inst["environment_setup_commit"], f"{where}: environment_setup_commit")
    check_github_repo(inst["repo"], f"{where}: repo")  # it names a checkout directory
    return inst


def _read(jsonl: Path) -> tuple[list[tuple[str, dict[str, Any]]], list[tuple[str, str]]]:
    """The rows as (where, instance), and the rows that are not instances as (label, reason)."""
    lines = [ln for ln in jsonl.read_text().splitlines() if ln.strip()]
    if not lines:
        raise HarnessError(f"{jsonl}: empty file; expected SWE-bench instances, one JSON object per line")
    rows, bad = [], []
    for number, line in enumerate(lines, 1):
        try:
            rows.append((f"{jsonl}:{number}", _instance(line, f"{jsonl}:{number}")))
        except HarnessError as exc:
            bad.append((f"line {number}", str(exc)))
    return rows, bad


def load_swebench(jsonl: Path, images: str = DEFAULT_NAMESPACE) -> tuple[Path, list[tuple[str, str]]]:
    """Generate the task directories for an instance file; return their parent (one link per
    instance) and the rows that could not be made, as (row label, reason): a bad row is that
    instance's error, never the file's. Each instance's directory is cached by its row's content
    (and this recipe, the image namespace and the sandbox image), whatever file it came in: the
    same instance in another file reuses its directory, and so its built image. ``images``: the
    namespace of the official instance images, or LOCAL to build them here."""
    from harness.runtime.images import sandbox_image_ref

    instances, failed = _read(jsonl)
    swebench_specs()
    base_image = sandbox_image_ref()  # the agent's tools come with it
    cache = cache_dir() / "swebench"
    digest = hashlib.sha256(jsonl.read_bytes() + images.encode()).hexdigest()[:12]
    root = cache / "suites" / f"{jsonl.stem}-{digest}"
    root.mkdir(parents=True, exist_ok=True)
    for where, inst in instances:
        mirror = "".join(f"{k}={v}" for k in _PIP_INDEX_ENV if (v := os.environ.get(k)))
        row = (
            json.dumps(inst, sort_keys=True)
            + _RECIPE
            + images
            + (base_image + mirror if images == LOCAL else "")
        )
        dest = cache / "instances" / f"{inst['instance_id']}-{hashlib.sha256(row.encode()).hexdigest()[:12]}"
        link = root / str(inst["instance_id"])
        if not (dest / "instruction.md").is_file():
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                _write_task(inst, jsonl, dest, base_image, where, images)
            except HarnessError as exc:  # no spec, no checkout, no such commit: this row's error
                failed.append((str(inst["instance_id"]), str(exc)))
                link.unlink(missing_ok=True)
                continue
        if not link.is_symlink() or link.resolve() != dest.resolve():
            link.unlink(missing_ok=True)
            link.symlink_to(dest)
    return root, failed
