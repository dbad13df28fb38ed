"""An SWE-bench instance image laid out as the official ones are, built here from a real instance.

The official ``sweb.eval.x86_64.<instance>`` images (SWE-bench's base -> env -> instance Dockerfiles)
hold Miniconda at ``/opt/miniconda3``, the spec's environment ``testbed``, and the repository at
``base_commit`` in ``/testbed`` (WORKDIR ``/testbed/``), installed with the spec's ``install``
command. No registry, conda channel or GitHub is reachable here, so this one is built FROM the
harness's sandbox image with the same layout: ``/opt/miniconda3/envs/testbed`` is a venv of the
image's Python with the spec's packages from PyPI, ``/opt/miniconda3/bin/activate`` defines the
``conda activate NAME`` that swebench's eval script calls, and the repository comes from the
instance's reconstructed commit (swebench_repos.py). The eval script runs in it unchanged.
"""

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import docker

ACTIVATE = """# A stand-in for Miniconda's activate: `conda activate NAME` enters /opt/miniconda3/envs/NAME.
conda() {
  if [ "$1" = activate ]; then . "/opt/miniconda3/envs/${2:-base}/bin/activate"; fi
}
"""


def build_official_like(client: "docker.DockerClient", row: dict[str, Any], repos: Path, tag: str) -> str:
    """Build ``tag``: the instance ``row`` as its official image lays it out; its id."""
    from harness.runtime.images import host_ca_bundle, sandbox_image_ref
    from harness.runtime.task_images import build_retrying
    from harness.tasks.swebench import _snapshot, swebench_specs

    spec = swebench_specs()[row["repo"]][str(row["version"])]
    env = "/opt/miniconda3/envs/testbed"
    packages = " ".join(
        [spec.get("packages") or "", *(json.dumps(p) for p in spec.get("pip_packages") or [])]
    )
    with tempfile.TemporaryDirectory(prefix="sweb-eval-") as tmp:
        context = Path(tmp)
        _snapshot(repos / row["repo"].replace("/", "__"), row["base_commit"], context / "repo")
        (context / "activate").write_text(ACTIVATE)
        ca = host_ca_bundle()  # a proxy's CA may be in it: pip reaches PyPI through it
        (context / "build-ca.pem").write_bytes(ca.read_bytes() if ca else b"")
        (context / "Dockerfile").write_text(
            f"FROM {sandbox_image_ref()}\n"
            "USER root\n"
            "ARG PIP_CERT=/tmp/build-ca.pem\n"
            "COPY build-ca.pem /tmp/build-ca.pem\n"
            # What conda puts in every environment (pip, setuptools, wheel), then the spec's packages.
            f"RUN python3 -m venv {env} && {env}/bin/pip install -q --disable-pip-version-check setuptools wheel "
            f"{packages}\n"
            "COPY activate /opt/miniconda3/bin/activate\n"
            "COPY repo /testbed\n"
            "WORKDIR /testbed/\n"
            # The instance's install step, in its environment, as swebench's repo script runs it.
            f"RUN bash -c '. /opt/miniconda3/bin/activate && conda activate testbed && {spec['install']}' "
            "&& git config --global --add safe.directory /testbed\n"
        )
        log, error = build_retrying(client, context, "Dockerfile", tag)
        if error:
            raise RuntimeError(f"building {tag}: {error}: {' | '.join(log[-5:])}")
    return str(client.images.get(tag).id)
