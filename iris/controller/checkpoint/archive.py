"""A checkpoint as a local file: a consistent copy of the job store, compressed. No network.

`pack` (pack.py, run by a niced child process: `pack_in_child`) copies the live database with SQLite's online backup API (one step, inside one read
transaction, so the copy is exactly one committed state; in WAL mode the controller keeps
committing meanwhile), then writes a gzip'd tar of the copy and the role secrets: a new
controller must accept the cluster token the workers already hold, or none of them could
join again, and keep its `controller.secret` (the token on its calls to its own Regions,
and the key of the proofs running attempts show the registry: holders.py);
the ids an operator revoked stay barred, and which credential owns which worker id (only
hashes: credential_log.py) is kept, so a stranger with the cluster token cannot take a
live worker's id on the new controller either. `unpack` checks an archive fully (size, sha256, members, SQLite integrity,
schema version) in a scratch directory before anything is put where a controller reads it.

The manifest (a small dict) travels with the archive as object metadata: name, when, which
store change it covers (`seq`), schema version, job counts by state, sizes and digest.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

from iris.actors import tokens
from iris.base.errors import StorageError
from iris.controller.checkpoint import pack
from iris.controller.checkpoint.pack import CHUNK, FORMAT, sha256
from iris.controller.jobs.store import SCHEMA_VERSION
from iris.wire.states import DB_NAME

MEMBERS = (DB_NAME, tokens.CLUSTER_TOKEN_FILE, tokens.ADMIN_TOKEN_FILE,
           tokens.CONTROLLER_SECRET_FILE, tokens.REVOKED_WORKERS_FILE,
           tokens.WORKER_CREDENTIALS_FILE)
_CHILD_TIMEOUT_S = 1800.0  # 100,000 jobs packed in seconds; an hour-long pack is a hang


def pack_in_child(db_path: Path, state_dir: Path, out: Path, name: str,
                  taken_at: float) -> dict:
    """pack.pack, run by a niced child process; its manifest. StorageError if it fails."""
    argv = [sys.executable, "-m", pack.__name__, str(db_path), str(state_dir), str(out), name,
            repr(taken_at), *MEMBERS]
    try:
        # No preexec_fn: that forces a fork() under the GIL of a process holding every job
        # in memory; the child renices itself instead (pack.py's __main__).
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_CHILD_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StorageError(f"packing checkpoint {name}: {exc}") from exc
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        raise StorageError(f"packing checkpoint {name}: {tail[0]}")
    return json.loads(done.stdout)


def encode_manifest(manifest: dict) -> str:
    return json.dumps(manifest, sort_keys=True, separators=(",", ":"))


def decode_manifest(text: str | None, where: str) -> dict:
    try:
        manifest = json.loads(text or "")
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise ValueError(f"format {manifest.get('format')!r}, this controller reads {FORMAT}"
                             if isinstance(manifest, dict) else "not a mapping")
        for key in ("name", "taken_at", "schema_version", "seq", "jobs", "bytes", "sha256"):
            if key not in manifest:
                raise ValueError(f"no {key!r}")
    except ValueError as exc:
        raise StorageError(f"{where}: not an Iris checkpoint manifest ({exc})") from exc
    return manifest


def unpack(archive: Path, manifest: dict, into: Path) -> Path:
    """Check `archive` against `manifest` and extract it into the empty scratch dir `into`;
    the path of the checked database there. StorageError says what is wrong."""
    name = manifest["name"]
    size = archive.stat().st_size
    if size != manifest["bytes"]:
        raise StorageError(f"checkpoint {name} is truncated or damaged: {size} bytes, its "
                           f"manifest says {manifest['bytes']}")
    if sha256(archive) != manifest["sha256"]:
        raise StorageError(f"checkpoint {name} is corrupt: its sha256 does not match its "
                           "manifest")
    if manifest["schema_version"] > SCHEMA_VERSION:
        raise StorageError(f"checkpoint {name} has schema version {manifest['schema_version']}"
                           f"; this controller reads up to {SCHEMA_VERSION}: restore it with "
                           "a newer Iris")
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            names = [m.name for m in members]
            if DB_NAME not in names or any(n not in MEMBERS or not m.isfile()
                                           for n, m in zip(names, members, strict=True)):
                raise StorageError(f"checkpoint {name} holds {names}, expected {list(MEMBERS)}")
            for member in members:
                _extract(tar, member, into / member.name)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise StorageError(f"checkpoint {name} cannot be read: {exc}") from exc
    db = into / DB_NAME
    check_database(db, name)
    return db


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path) -> None:
    src = tar.extractfile(member)
    if src is None:
        raise StorageError(f"{member.name}: not a file")
    with src, open(dest, "wb") as out:
        while block := src.read(CHUNK):
            out.write(block)
    if member.name != DB_NAME:
        os.chmod(dest, 0o600)  # tokens are secrets


def check_database(db: Path, name: str) -> int:
    """Its schema version, after SQLite's own integrity check; StorageError if unusable."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            verdict = conn.execute("PRAGMA quick_check").fetchone()[0]
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StorageError(f"checkpoint {name}: its database cannot be read: {exc}") from exc
    if verdict != "ok":
        raise StorageError(f"checkpoint {name}: its database fails SQLite's check: {verdict}")
    if row is None:
        raise StorageError(f"checkpoint {name}: its database has no schema version")
    version = int(row[0])
    if version > SCHEMA_VERSION:
        raise StorageError(f"checkpoint {name} has schema version {version}; this controller "
                           f"reads up to {SCHEMA_VERSION}: restore it with a newer Iris")
    return version


def summary(manifest: dict) -> dict:
    """What a listing shows of a checkpoint."""
    return {k: manifest.get(k) for k in ("name", "taken_at", "bytes", "db_bytes", "jobs",
                                         "jobs_by_state", "schema_version", "seq")}
