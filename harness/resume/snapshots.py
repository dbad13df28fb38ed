"""Which way a checkpoint reads an episode's files: a local workspace directly, a container with a
shared directory through the watcher inside it, any other sandbox through the seam's verbs. Apart
from files.py and daemon_files.py, which it chooses between (daemon_files builds on files)."""

from pathlib import Path

from harness.resume.daemon_files import DaemonFiles
from harness.resume.files import FileSnapshots, LocalFiles, SandboxFiles
from harness.seam import Sandbox


def snapshots_for(sandbox: Sandbox) -> FileSnapshots:
    """A local workspace read directly; a container with a shared directory through the watcher
    inside it; any other sandbox through its verbs."""
    from harness.runtime.container import ContainerSandbox
    from harness.runtime.local import LocalSandbox

    if isinstance(sandbox, LocalSandbox):
        return LocalFiles(Path(sandbox.workdir), sandbox.exports)
    limits = getattr(getattr(sandbox, "runtime", None), "exports", None)
    if isinstance(sandbox, ContainerSandbox) and sandbox.channel is not None:
        return DaemonFiles(sandbox, limits)
    return SandboxFiles(sandbox, limits)
