"""Checkpoints of a container's working directory, taken inside the container.

Started once per episode as root by the host (daemon_files.py), with the Python the image has, it
walks the working directory at start (the baseline: the sandbox as its task made it) and then
answers the host over a unix socket in the directory the host shares with the container, one JSON
object per line each way:

    -> {"op": "snapshot", "name": "gen-7", "max_bytes": N, "max_files": N, "full": false}
    <- {"tar": "gen-7.tar" | null, "paths": "gen-7.paths" | null}    (files in the shared directory)
       {"over": "why"}    the tree is over the export caps: nothing written, nothing forgotten
       {"error": "..."}
    -> {"op": "close"}

A checkpoint so costs the host a request and a file read instead of an exec and a copy out (~200 ms
a turn with podman). "full" (after the host lost a generation, or the daemon was restarted) saves
every path and the listing, whatever was saved before.

The files it writes and its socket are the host's user's and nobody else's (0600): the agent's
user cannot read them or talk to it. Standard library only, Python 3.6 syntax (the image's Python
may be old); harness_tree.py (harness/resume/tree.py) lies beside it.
"""

import argparse
import json
import os
import socket
import sys
import tarfile
import traceback
import typing

if __name__ == "__main__":  # in the container, isolated (-I): its own directory last on the path
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
try:
    import harness_tree as tree  # in the container: beside this file
except ImportError:  # imported on the host (its names)
    from harness.resume import tree  # type: ignore[no-redef]

FAILED_NOTE = "checkpointd.failed"


class Watch:
    def __init__(self, root: "str", out: "str") -> "None":
        self.root, self.out = root, out
        st = os.stat(out)
        self.owner = (st.st_uid, st.st_gid)  # the host's user, who made the shared directory
        self.seen = tree.walk(root)

    def _open(self, name: "str") -> "tuple[str, typing.BinaryIO]":
        tmp = os.path.join(self.out, "." + name + ".tmp")
        if os.path.lexists(tmp):
            os.unlink(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        os.fchown(fd, self.owner[0], self.owner[1])
        return tmp, os.fdopen(fd, "wb")

    def _done(self, tmp: "str", name: "str") -> "str":
        os.rename(tmp, os.path.join(self.out, name))  # whole before the host is told its name
        return name

    def snapshot(self, req: "dict[str, typing.Any]") -> "dict[str, typing.Any]":
        now = tree.walk(self.root)
        why = tree.over_caps(now, int(req["max_bytes"]), int(req["max_files"]))
        if why is not None:
            return {"over": why}  # seen kept: the next snapshot still holds every change since
        full = bool(req.get("full"))
        changed = tree.changed({} if full else self.seen, now)
        name = str(req["name"])
        reply: dict[str, typing.Any] = {"tar": None, "paths": None}
        if changed:
            tmp, f = self._open(name + ".tar")
            with f, tarfile.open(fileobj=f, mode="w") as tar:
                left_out = tree.add_changed(tar, self.root, changed, now)
            reply["tar"] = self._done(tmp, name + ".tar")
            for path in left_out:  # not in this checkpoint; new again to the next one
                del now[path]
        if full or now.keys() != self.seen.keys():
            tmp, f = self._open(name + ".paths")
            with f:
                f.write(tree.listing(now))
            reply["paths"] = self._done(tmp, name + ".paths")
        self.seen = now
        return reply


def serve(sock_path: "str", watch: "Watch") -> "None":
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = sock_path + ".tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    server.bind(tmp)
    os.chmod(tmp, 0o600)
    os.chown(tmp, watch.owner[0], watch.owner[1])
    os.rename(tmp, sock_path)  # appears once the baseline is taken and it accepts: the host waits for it
    server.listen(1)
    while True:
        conn, _ = server.accept()
        with conn:
            stream = conn.makefile("rwb")
            for raw in stream:
                try:
                    req = json.loads(raw.decode("utf-8"))
                    if req.get("op") == "close":
                        return
                    if req.get("op") != "snapshot":
                        raise ValueError("unknown request {!r}".format(req.get("op")))
                    reply = watch.snapshot(req)
                except Exception:
                    reply = {"error": traceback.format_exc(limit=3)[-1500:]}
                stream.write(json.dumps(reply).encode("utf-8") + b"\n")
                stream.flush()


def main() -> "int":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--socket", required=True)
    parser.add_argument(
        "--root", required=True, help="the directory watched (the sandbox's working directory)"
    )
    args = parser.parse_args()
    os.umask(0o077)
    out = os.path.dirname(args.socket)
    try:
        serve(args.socket, Watch(args.root, out))
    except BaseException:
        try:  # the host reads why, instead of waiting out its deadline
            with open(os.path.join(out, FAILED_NOTE), "w") as f:
                f.write(traceback.format_exc(limit=5)[-4000:])
        except OSError:
            pass
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
