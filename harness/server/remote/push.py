"""`--push`: a local checkpoint or adapter copied into the GPU host's cache before it is served.

Each file goes over the SSH connection into a ``.part`` file there, appended from where an earlier
interrupted push stopped, then checked against this side's SHA-256 before it takes its name: a
second push of the same directory copies nothing, an interrupted one resumes. The host directory is
named by the content's digest (and keeps the local name, which becomes the served name).
"""

import hashlib
import subprocess
from pathlib import Path

from harness.errors import HarnessError
from harness.progress import progress_bar
from harness.server.remote.ssh import SSHHost

_CHUNK = 1 << 20


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def push_checkpoint(ssh: SSHHost, local: Path, *, cache: str) -> str:
    """Copy ``local`` (a checkpoint directory, one level of files) to the host; its path there."""
    if not local.is_dir():
        raise HarnessError(f"--push: --model {local} is not a directory on this machine")
    files = sorted(p for p in local.iterdir() if p.is_file())
    digests = {p.name: _sha256(p) for p in files}
    tree = hashlib.sha256("".join(f"{n}\0{d}\n" for n, d in digests.items()).encode()).hexdigest()[:16]
    target = f"{cache}/pushed/{tree}/{local.name}"
    have = ssh.hostside("have", target, *digests)
    todo = [p for p in files if have["files"].get(p.name, {}).get("sha256") != digests[p.name]]
    total = sum(p.stat().st_size - int(have["files"].get(p.name, {}).get("part", 0)) for p in todo)
    if not todo:
        return target
    with progress_bar(f"Pushing {local.name} to {ssh.host}", total=max(total, 1)) as bar:
        for path in todo:
            offset = int(have["files"].get(path.name, {}).get("part", 0))
            if offset > path.stat().st_size:
                offset = 0
            part = f"{target}/{path.name}.part"
            with path.open("rb") as fh:
                fh.seek(offset)
                proc = ssh.popen(
                    [
                        "sh",
                        "-c",
                        'mkdir -p "$(dirname "$1")" && { [ "$2" = 0 ] && : > "$1"; cat >> "$1"; }',
                        "sh",
                        part,
                        str(offset),
                    ],
                    stdin=subprocess.PIPE,
                )
                assert proc.stdin is not None
                while chunk := fh.read(_CHUNK):
                    proc.stdin.write(chunk)
                    bar.advance(len(chunk))
                proc.stdin.close()
                if proc.wait() != 0:
                    raise HarnessError(
                        f"--push: copying {path.name} to {ssh.host} failed; run again to resume"
                    )
            done = ssh.hostside("seal", part, digests[path.name])
            if not done.get("ok"):
                raise HarnessError(
                    f"--push: {path.name} arrived on {ssh.host} with another SHA-256; run again (it starts that file over)"
                )
    return target
