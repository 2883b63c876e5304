"""Workspace bundles: deterministic content address, round trip, unsafe archives refused."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile

import pytest

from iris.wire.bundles import BundleError, pack
from iris.worker.bundle_cache import BundleCache


def _workspace(root):
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("X = 1\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    (root / "requirements.txt").write_text("six==1.16.0\n")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "junk.pyc").write_bytes(b"junk")
    os.symlink("pkg/mod.py", root / "link.py")
    return root


def _archive(members):
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb") as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def test_bundle_same_tree_same_address(tmp_path):
    a = _workspace(tmp_path / "a")
    digest1, data1 = pack(a)
    os.utime(a / "run.sh", (0, 12345))  # a touched file changes nothing
    digest2, data2 = pack(a)
    b = _workspace(tmp_path / "b")
    assert digest1 == digest2 == pack(b)[0]
    assert data1 == data2


def test_bundle_changed_content_changes_address(tmp_path):
    a = _workspace(tmp_path / "a")
    before = pack(a)[0]
    (a / "pkg" / "mod.py").write_text("X = 2\n")
    assert pack(a)[0] != before


def test_bundle_round_trip_keeps_files_modes_links_and_skips_caches(tmp_path):
    digest, data = pack(_workspace(tmp_path / "src"))
    cache = BundleCache(tmp_path / "cache")
    unpacked = cache.unpack(digest, data)
    assert cache.unpack(digest, data) == unpacked == cache.path_for(digest)
    work = cache.materialize(digest, tmp_path / "attempt-cwd")
    assert (work / "pkg" / "mod.py").read_text() == "X = 1\n"
    assert os.access(work / "run.sh", os.X_OK)
    assert (work / "link.py").read_text() == "X = 1\n"
    assert not (work / "__pycache__").exists()


def test_bundle_wrong_digest_refused_nothing_written(tmp_path):
    digest, data = pack(_workspace(tmp_path / "src"))
    cache = BundleCache(tmp_path / "cache")
    other = "0" * 64
    with pytest.raises(BundleError, match="corrupt"):
        cache.unpack(other, data)
    assert list((tmp_path / "cache").iterdir()) == []


@pytest.mark.parametrize("name", ["../escape.txt", "/etc/evil", "a/../../escape"])
def test_bundle_path_traversal_refused(tmp_path, name):
    info = tarfile.TarInfo(name)
    info.size = 3
    data = _archive([(info, b"bad")])

    cache = BundleCache(tmp_path / "cache")
    with pytest.raises(BundleError, match="unsafe path"):
        cache.unpack(hashlib.sha256(data).hexdigest(), data)
    assert not (tmp_path / "escape.txt").exists()
    assert list((tmp_path / "cache").iterdir()) == []


def test_bundle_link_outside_refused(tmp_path):

    link = tarfile.TarInfo("evil")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    data = _archive([(link, None)])
    with pytest.raises(BundleError):
        BundleCache(tmp_path / "cache").unpack(hashlib.sha256(data).hexdigest(), data)


def test_bundle_pack_refuses_symlink_leaving_workspace(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    os.symlink("/etc/passwd", root / "passwd")
    with pytest.raises(BundleError, match="outside"):
        pack(root)


def test_bundle_bad_digest_string_refused(tmp_path):
    with pytest.raises(BundleError, match="sha256"):
        BundleCache(tmp_path).path_for("../../etc")
