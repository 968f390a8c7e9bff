"""The file store refuses FUSE and network mounts, judged by a (faked) mount table.

No test here can make a real FUSE or NFS mount (that needs root-only tools
CI lacks), so each builds a ``/proc/self/mountinfo`` text around ``tmp_path``
and hands it to the code under test; the paths, symbolic links and
directories are real.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from broker.errors import InvalidRequest, UnsafeStore
from broker.storage import FileStore, store_from_url
from broker.storage.mounts import check_store_dir, mount_of, parse_mountinfo, read_mounts


def _line(n: int, point: str, fstype: str, source: str = "src") -> str:
    escaped = point.replace("\\", "\\134").replace(" ", "\\040")
    return f"{n} 1 0:{n} / {escaped} rw,relatime shared:{n} - {fstype} {source} rw"


def table(*mounts: tuple[str | Path, str]) -> str:
    """A mountinfo text: ``/`` on ext4, then each (point, fstype) in order."""
    lines = [_line(1, "/", "ext4", "/dev/vda")]
    lines += [_line(i + 2, str(point), fstype) for i, (point, fstype) in enumerate(mounts)]
    return "\n".join(lines) + "\n"


def test_parse_reads_point_type_and_source_past_optional_fields() -> None:
    text = ("36 35 98:0 /mnt1 /mnt/with\\040space rw,noatime master:1 shared:2 - ext3 "
            "/dev/root rw,errors=continue\n"
            "garbage line\n"
            "40 35 0:50 / /Volumes rw - fuse dbfs-fuse rw,user_id=0\n")
    mounts = parse_mountinfo(text)
    assert [(m.point, m.fstype, m.source) for m in mounts] == [
        ("/mnt/with space", "ext3", "/dev/root"), ("/Volumes", "fuse", "dbfs-fuse")]


def test_this_machine_has_a_mount_table_that_holds_tmp(tmp_path: Path) -> None:
    mounts = read_mounts()
    assert mounts, "Linux has /proc/self/mountinfo"
    assert mount_of(tmp_path, mounts) is not None


@pytest.mark.parametrize(("fstype", "kind"), [
    ("fuse", "a FUSE mount"),
    ("fuse.gcsfuse", "a FUSE mount"),
    ("fuse.s3fs", "a FUSE mount"),
    ("fuseblk", "a FUSE mount"),
    ("nfs", "a network filesystem"),
    ("nfs4", "a network filesystem"),
    ("cifs", "a network filesystem"),
    ("smb3", "a network filesystem"),
    ("9p", "a network filesystem"),
    ("blobfuse2", "an object-storage mount"),
])
def test_fuse_and_network_mounts_are_refused_creating_nothing(
        tmp_path: Path, fstype: str, kind: str) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    root = mnt / "queues" / "q1"
    with pytest.raises(UnsafeStore) as err:
        FileStore(root, mount_table=table((mnt, fstype)))
    msg = err.value.message
    assert f"is on {kind} ({fstype} mounted at {mnt})" in msg
    assert "s3://bucket/prefix" in msg and "abfss://" in msg and "gs://" in msg
    assert not (mnt / "queues").exists()  # refused before anything was created


@pytest.mark.parametrize("fstype", ["ext4", "xfs", "tmpfs", "overlay", "btrfs"])
def test_local_filesystems_are_accepted(tmp_path: Path, fstype: str) -> None:
    store = FileStore(tmp_path / "q", mount_table=table((tmp_path, fstype)))
    store.create_if_absent("k", b"v")
    assert store.read("k").data == b"v"


def test_the_longest_mount_point_decides(tmp_path: Path) -> None:
    """A local directory beside a FUSE mount (under the mount's parent) is fine;
    one under the FUSE mount is refused; a local mount under the FUSE mount is fine."""
    fuse = tmp_path / "volumes"
    local_inside = fuse / "scratch"
    local_inside.mkdir(parents=True)
    text = table((fuse, "fuse"), (local_inside, "ext4"))
    FileStore(tmp_path / "beside", mount_table=text)
    FileStore(tmp_path / "volumes-not-a-child", mount_table=text)  # a prefix, not a parent
    FileStore(local_inside / "q", mount_table=text)
    with pytest.raises(UnsafeStore, match="fuse mounted at"):
        FileStore(fuse / "q", mount_table=text)
    with pytest.raises(UnsafeStore):
        FileStore(fuse, mount_table=text)  # the mount point itself


def test_the_last_of_stacked_mounts_decides(tmp_path: Path) -> None:
    with pytest.raises(UnsafeStore):
        FileStore(tmp_path / "q", mount_table=table((tmp_path, "ext4"), (tmp_path, "nfs4")))
    FileStore(tmp_path / "q", mount_table=table((tmp_path, "nfs4"), (tmp_path, "ext4")))


def test_a_symlink_into_a_fuse_mount_is_refused(tmp_path: Path) -> None:
    fuse = tmp_path / "fuse"
    (fuse / "data").mkdir(parents=True)
    link = tmp_path / "local-looking"
    link.symlink_to(fuse / "data")
    text = table((fuse, "fuse.blobfuse"))
    with pytest.raises(UnsafeStore, match=f"file store {fuse / 'data'} is on a FUSE mount"):
        FileStore(link, mount_table=text)
    with pytest.raises(UnsafeStore):
        FileStore(link / "sub" / "dir", mount_table=text)  # below the link, not yet made


def test_databricks_volumes_and_dbfs_name_the_cloud_url() -> None:
    text = table(("/Volumes", "fuse"), ("/dbfs", "fuse"), ("/Workspace", "fuse"))
    for path in ("/Volumes/main/default/vol/queues", "/dbfs/tmp/queues", "/Workspace/Users/q"):
        with pytest.raises(UnsafeStore) as err:
            check_store_dir(path, mounts=parse_mountinfo(text))
        msg = err.value.message
        assert "Databricks" in msg
        assert "use the cloud storage directly instead: s3://bucket/prefix, " \
               "abfss://container@account.dfs.core.windows.net/prefix or gs://bucket/prefix" in msg


def test_the_path_alone_decides_nothing() -> None:
    """``/Volumes`` on a local disk (a Mac-like layout, a test box) is fine."""
    check_store_dir("/Volumes/disk/queues", mounts=parse_mountinfo(table()))


def test_the_mount_source_is_not_shown(tmp_path: Path) -> None:
    text = _line(1, "/", "ext4") + "\n" + _line(2, str(tmp_path), "fuse.davfs",
                                                "https://user:hunter2@dav.example/x")
    with pytest.raises(UnsafeStore) as err:
        FileStore(tmp_path / "q", mount_table=text)
    assert "hunter2" not in str(err.value) and "hunter2" not in repr(err.value)


def test_trust_mount_accepts_that_type_only_and_warns(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    text = table((tmp_path, "fuse.fuse-overlayfs"))
    with caplog.at_level(logging.WARNING, logger="osqueue.storage"):
        store = FileStore(tmp_path / "q", mount_table=text, trust_mount="fuse.fuse-overlayfs")
    store.self_test()  # still proven by the self-test
    assert any("trust_mount=fuse.fuse-overlayfs" in r.getMessage() and
               r.levelno == logging.WARNING for r in caplog.records)
    with pytest.raises(UnsafeStore):
        FileStore(tmp_path / "q", mount_table=text, trust_mount="fuse.sshfs")


def test_store_urls_take_trust_mount_and_refuse_other_options(tmp_path: Path) -> None:
    store = store_from_url(f"file://{tmp_path}?trust_mount=fuse.x")
    assert isinstance(store, FileStore) and store.root == tmp_path
    for bad in ("?color=red", "?trust_mount=", "?trust_mount=a&trust_mount=b"):
        with pytest.raises(InvalidRequest, match="trust_mount=<filesystem type>"):
            store_from_url(f"file://{tmp_path}{bad}")


@pytest.mark.parametrize("how", ["mounted below the root", "linked from below the root"])
def test_a_queue_directory_on_a_fuse_mount_below_a_safe_root_is_refused(
        tmp_path: Path, how: str) -> None:
    """The root is on a local disk, but one queue's directory (the key's first
    part) is a FUSE mount point below it, or a symbolic link into one: writes
    there would lose the lock-and-rename guarantees the root was checked for."""
    root, fuse = tmp_path / "root", tmp_path / "volume"
    root.mkdir()
    fuse.mkdir()
    if how == "mounted below the root":
        (root / "q").mkdir()
        mounts = table((root / "q", "fuse"))
    else:
        (root / "q").symlink_to(fuse)
        mounts = table((fuse, "fuse.gcsfuse"))
    store = FileStore(root, fsync=False, mount_table=mounts)  # the root itself is fine
    with pytest.raises(UnsafeStore, match="FUSE mount"):
        store.create_if_absent("q/queue.json", b"{}")
    with pytest.raises(UnsafeStore, match="FUSE mount"):
        store.read("q/queue.json")
    assert list(fuse.iterdir()) == [] and list((root / "q").iterdir()) == []  # nothing written
    store.create_if_absent("other/queue.json", b"{}")  # a queue on the root's own disk still works
    assert store.read("other/queue.json").data == b"{}"
