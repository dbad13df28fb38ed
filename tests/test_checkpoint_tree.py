"""The walk behind every file checkpoint reads what it saw and no more: a file grown since the walk
is cut at the walk's size (the caps checked on the walk hold for the tar), a path swapped for
another file or a link since the walk is left out, never read through."""

import io
import os
import tarfile
from pathlib import Path

from harness.resume import tree


def test_a_file_grown_after_the_walk_is_cut_at_the_size_the_walk_saw(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 10)
    now = tree.walk(str(tmp_path))
    assert tree.over_caps(now, max_bytes=100, max_files=10) is None
    with (tmp_path / "f").open("r+b") as f:
        f.truncate(1 << 40)  # a terabyte, sparse, once the caps were checked
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        assert tree.add_changed(tar, str(tmp_path), ["f"], now) == []
    assert len(buf.getvalue()) < 100_000  # a tar record, not a terabyte
    with tarfile.open(fileobj=io.BytesIO(buf.getvalue())) as tar:
        member = tar.getmember("f")
        assert member.size == 10 and tar.extractfile(member).read() == b"x" * 10  # type: ignore[union-attr]


def test_a_path_swapped_since_the_walk_is_left_out_not_read_through(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "d").mkdir(parents=True)
    (ws / "d" / "f").write_text("mine\n")
    (ws / "g").write_text("short\n")
    secret = tmp_path / "elsewhere"
    secret.mkdir()
    (secret / "f").write_text("not the workspace's\n")
    now = tree.walk(str(ws))
    # after the walk: the directory becomes a link to elsewhere, g a file of the same name anew
    (ws / "d" / "f").unlink()
    (ws / "d").rmdir()
    (ws / "d").symlink_to(secret)
    (ws / "g").unlink()
    (ws / "g").write_text("another file\n")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        left_out = tree.add_changed(tar, str(ws), sorted(now), now)
    assert sorted(left_out) == ["d/f", "g"] or sorted(left_out) == ["d/f"]  # g: a new inode, or reused
    with tarfile.open(fileobj=io.BytesIO(buf.getvalue())) as tar:
        assert "d/f" not in tar.getnames()
        for member in tar.getmembers():
            if member.isreg():
                assert b"not the workspace" not in tar.extractfile(member).read()  # type: ignore[union-attr]
    assert os.path.islink(ws / "d")
