"""The walk behind every file checkpoint reads what it saw and no more: a file grown since the walk
is cut at the walk's size (the caps checked on the walk hold for the tar), a path swapped for
another file or a link since the walk is left out, never read through."""

import io
import os
import tarfile
from pathlib import Path

from harness.resume import tree
from harness.runtime.export_caps import ExportLimits


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


def test_a_workspace_replaced_by_a_link_is_walked_as_empty_not_followed(tmp_path: Path) -> None:
    """An agent that swaps its workspace for a link to / (tests/test_faults.py's wrecks): the
    checkpoint after that turn walked the whole machine through it (6.6 s here, and its files)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "f").write_text("not the workspace's\n")
    (tmp_path / "ws").symlink_to(elsewhere)
    assert tree.walk(str(tmp_path / "ws")) == {}
    assert tree.walk(str(tmp_path / "gone")) == {}
    assert set(tree.walk(str(elsewhere))) == {"f"}


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


def _restore(tmp_path: Path, tar_name: str, limits: ExportLimits | None = None) -> Path:
    from harness.resume.files import LocalFiles

    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    LocalFiles(ws, limits).restore(tmp_path / "ckpt", [tar_name], None)
    return ws


def _used_bytes(root: Path) -> int:
    return sum(os.lstat(os.path.join(p, f)).st_blocks * 512 for p, _, fs in os.walk(root) for f in fs)


def test_a_restore_refuses_a_sparse_member_instead_of_writing_its_declared_size(tmp_path: Path) -> None:
    """A 10 KB generation whose member is a GNU sparse file of 4 GiB was written out at 4 GiB."""
    import subprocess

    import pytest

    from harness.resume.files import CheckpointUnusable

    src, ckpt = tmp_path / "src", tmp_path / "ckpt"
    src.mkdir()
    ckpt.mkdir()
    with (src / "big").open("wb") as f:
        f.truncate(4 << 30)
    subprocess.run(["tar", "-cSf", str(ckpt / "gen.tar"), "-C", str(src), "big"], check=True)
    assert (ckpt / "gen.tar").stat().st_size < 100_000
    with pytest.raises(CheckpointUnusable, match="'big' is a sparse file"):
        _restore(tmp_path, "gen.tar")
    assert _used_bytes(tmp_path / "ws") < 1 << 20


def test_a_restore_refuses_special_members_names_outside_the_checkpoint_and_sizes_past_the_caps(
    tmp_path: Path,
) -> None:
    import pytest

    from harness.resume.files import CheckpointUnusable
    from harness.runtime.export_caps import ExportLimits

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    with tarfile.open(ckpt / "fifo.tar", "w") as tar:
        fifo = tarfile.TarInfo("pipe")
        fifo.type = tarfile.FIFOTYPE
        tar.addfile(fifo)
    with pytest.raises(CheckpointUnusable, match="'pipe' is a device, pipe or other special file"):
        _restore(tmp_path, "fifo.tar")
    (tmp_path / "outside.tar").write_bytes((ckpt / "fifo.tar").read_bytes())
    for name in ("../outside.tar", str(tmp_path / "outside.tar"), ".."):
        with pytest.raises(CheckpointUnusable, match="not a file of the checkpoint"):
            _restore(tmp_path, name)
    with tarfile.open(ckpt / "big.tar", "w") as tar:
        for i in range(3):
            info = tarfile.TarInfo(f"f{i}")
            info.size = 600
            tar.addfile(info, io.BytesIO(b"x" * 600))
    with pytest.raises(CheckpointUnusable, match="declare more than the export caps"):
        _restore(tmp_path, "big.tar", ExportLimits(max_bytes=1000))
    assert not (tmp_path / "ws" / "f2").exists()
    assert (_restore(tmp_path, "big.tar", ExportLimits(max_bytes=1800)) / "f2").read_bytes() == b"x" * 600
