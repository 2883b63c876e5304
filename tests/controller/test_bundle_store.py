"""Workspace bundles (controller/bundle_store.py): any client may upload one, so the store is
per-peer state with a bound (total bytes) and a reclaim rule (a bundle no live job names,
idle for IDLE_S, is deleted): docs/architecture.md, Per-peer state."""

from __future__ import annotations

import hashlib
import os

import pytest

from iris.base.errors import InvalidRequestError, OverloadedError
from iris.controller.bundle_store import IDLE_S, BundleStore


def _blob(n: int) -> tuple[str, bytes]:
    data = bytes([n]) * 1000
    return hashlib.sha256(data).hexdigest(), data


def test_uploads_past_the_total_bound_are_refused_for_load_and_store_nothing(tmp_path):
    store = BundleStore(tmp_path / "b", max_total_bytes=2500)
    for n in range(2):
        store.put(*_blob(n))
    digest, data = _blob(2)
    with pytest.raises(OverloadedError, match="2500"):
        store.put(digest, data)
    assert not store.has(digest)
    assert sorted(os.listdir(tmp_path / "b")) == sorted(f"{_blob(n)[0]}.tar.gz" for n in (0, 1))
    store.put(*_blob(0))  # one already held costs nothing


def test_a_bundle_no_live_job_names_is_reclaimed_once_idle_and_the_bound_frees(tmp_path):
    store = BundleStore(tmp_path / "b", max_total_bytes=2500)
    (used, d0), (unused, d1), (fresh, d2) = _blob(0), _blob(1), _blob(2)
    store.put(used, d0)
    store.put(unused, d1)
    old = os.stat(store.root / f"{unused}.tar.gz").st_mtime - IDLE_S - 10
    for digest in (used, unused):
        os.utime(store.root / f"{digest}.tar.gz", (old, old))
    assert store.reclaim(keep={used}) == [unused]
    assert held(store) == {used}
    store.put(fresh, d2)  # room again
    assert store.reclaim(keep=set()) == [used]  # fresh: uploaded just now, kept for its job
    assert held(store) == {fresh}


def test_a_client_told_a_bundle_is_held_finds_it_held_at_submit(tmp_path):
    store = BundleStore(tmp_path / "b")
    digest, data = _blob(0)
    store.put(digest, data)
    old = os.stat(store.root / f"{digest}.tar.gz").st_mtime - IDLE_S - 10
    os.utime(store.root / f"{digest}.tar.gz", (old, old))
    assert store.has(digest)  # asked for again: idle no longer
    assert store.reclaim(keep=set()) == [] and held(store) == {digest}


def held(store: BundleStore) -> set[str]:
    return {p.name.removesuffix(".tar.gz") for p in store.root.iterdir()}


def test_a_bad_digest_is_still_refused_naming_it(tmp_path):
    with pytest.raises(InvalidRequestError, match="sha256"):
        BundleStore(tmp_path / "b").put("../x", b"")
