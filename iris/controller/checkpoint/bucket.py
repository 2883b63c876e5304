"""Checkpoints in GCS, through the real google-cloud-storage client. Not when or what to take.

Layout: `gs://BUCKET/PREFIX/controller-state/NAME/state.tar.gz`, one object per checkpoint,
and `.../controller-state/bundles/DIGEST.tar.gz`, the workspace bundles jobs refer to (each
uploaded once: content-addressed, shared by every checkpoint). One object per checkpoint,
its manifest in the object's metadata. One object means a checkpoint is there whole or not
at all (an upload that dies half way leaves nothing), and a listing returns every manifest
without a read per checkpoint. Uploads use `if_generation_match=0` (create only): two
controllers pointed at one prefix by mistake can never overwrite each other's checkpoints;
the second gets a clear error instead. Deletes name the generation they listed.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core.retry import Retry

from iris.base.errors import NotFoundError, StorageError
from iris.controller.checkpoint import policy
from iris.controller.checkpoint.archive import decode_manifest, encode_manifest
from iris.controller.checkpoint.ownership import OWNER_OBJECT as OWNER
from iris.controller.checkpoint.ownership import FencedError

OBJECT = "state.tar.gz"
# Big states upload in 8 MiB resumable chunks (the client's default is 100 MiB in memory).
_CHUNK_BYTES = 8 << 20
# 60 s per request, 120 s of retries in all: a checkpoint is worth waiting for, but a GCS
# outage must show up as a failed checkpoint (and a retry later), not as a hung thread.
_TIMEOUT_S = 60.0
_RETRY_S = 120.0
# An unreachable GCS ends in RetryError (not a GoogleAPICallError) once retries run out.
_FAILED = (gexc.GoogleAPIError, OSError)


class CheckpointBucket:
    """The checkpoints under one prefix. `client` defaults to `storage.Client()`, which reads
    project and credentials (or STORAGE_EMULATOR_HOST) from the environment."""

    def __init__(self, bucket: str, prefix: str, client: Any = None,
                 retry_s: float = _RETRY_S):
        if client is None:
            from google.cloud import storage

            client = storage.Client()
        self._client = client
        self._retry = Retry(deadline=retry_s)
        self._timeout = min(_TIMEOUT_S, retry_s)
        self._bucket = client.bucket(bucket)
        self.root = f"{prefix.strip('/')}/controller-state/" if prefix.strip("/") \
            else "controller-state/"
        self.where = f"gs://{bucket}/{self.root}"

    def hurried(self, retry_s: float) -> CheckpointBucket:
        """The same prefix with a shorter patience: the last checkpoint of a controller
        that is stopping must not hold its exit for minutes while GCS is down."""
        quick = copy.copy(self)
        quick._retry, quick._timeout = Retry(deadline=retry_s), min(_TIMEOUT_S, retry_s)
        return quick

    def put(self, archive: Path, manifest: dict) -> None:
        name = manifest["name"]
        blob = self._bucket.blob(f"{self.root}{name}/{OBJECT}", chunk_size=_CHUNK_BYTES)
        blob.metadata = {"manifest": encode_manifest(manifest)}
        try:
            blob.upload_from_filename(str(archive), content_type="application/gzip",
                                      if_generation_match=0, timeout=self._timeout, retry=self._retry)
        except gexc.PreconditionFailed as exc:
            raise StorageError(f"checkpoint {name} already exists in {self.where}: is another "
                               "controller writing to the same prefix?") from exc
        except _FAILED as exc:
            raise StorageError(f"uploading checkpoint {name} to {self.where}: {exc}") from exc

    # ------------------------------------------------------------ the owner (ownership.py)

    def read_owner(self) -> tuple[bytes | None, int]:
        """The owner record and its generation; (None, 0) when the prefix has none."""
        blob = self._bucket.blob(f"{self.root}{OWNER}")
        try:
            return blob.download_as_bytes(timeout=self._timeout, retry=self._retry), \
                blob.generation
        except gexc.NotFound:
            return None, 0
        except _FAILED as exc:
            raise StorageError(f"reading the owner of {self.where}: {exc}") from exc

    def write_owner(self, data: bytes, generation: int) -> int:
        """Replace the owner record if it is still at `generation` (0: there is none);
        its new generation. FencedError if someone else wrote it meanwhile."""
        blob = self._bucket.blob(f"{self.root}{OWNER}")
        try:
            blob.upload_from_string(data, content_type="application/json",
                                    if_generation_match=generation, timeout=self._timeout,
                                    retry=self._retry)
        except gexc.PreconditionFailed as exc:
            raise FencedError(f"the owner of {self.where} changed") from exc
        except _FAILED as exc:
            raise StorageError(f"writing the owner of {self.where}: {exc}") from exc
        return blob.generation

    def list(self) -> list[dict]:
        """Manifests of the checkpoints here, oldest first (each with its `generation`)."""
        out = []
        try:
            for blob in self._client.list_blobs(self._bucket, prefix=self.root,
                                                timeout=self._timeout, retry=self._retry):
                name = blob.name[len(self.root):].split("/")[0]
                if blob.name != f"{self.root}{name}/{OBJECT}" or not policy.NAME.match(name):
                    continue  # not ours; leave it alone
                try:
                    manifest = decode_manifest((blob.metadata or {}).get("manifest"),
                                               f"{self.where}{name}")
                except StorageError as exc:
                    manifest = {"name": name, "error": str(exc)}
                out.append({**manifest, "name": name, "generation": blob.generation})
        except _FAILED as exc:
            raise StorageError(f"listing checkpoints in {self.where}: {exc}") from exc
        return sorted(out, key=lambda m: m["name"])

    def get(self, name: str, dest: Path) -> dict:
        """Download checkpoint `name` to `dest`; its manifest."""
        policy.time_of(name)  # ValueError for something that is not a name
        blob = self._bucket.blob(f"{self.root}{name}/{OBJECT}", chunk_size=_CHUNK_BYTES)
        try:
            blob.reload(timeout=self._timeout, retry=self._retry)
            manifest = decode_manifest((blob.metadata or {}).get("manifest"),
                                       f"{self.where}{name}")
            blob.download_to_filename(str(dest), if_generation_match=blob.generation,
                                      timeout=self._timeout, retry=self._retry)
        except gexc.NotFound as exc:
            raise NotFoundError(f"no checkpoint {name} in {self.where}") from exc
        except _FAILED as exc:
            raise StorageError(f"downloading checkpoint {name} from {self.where}: {exc}") \
                from exc
        return manifest

    def bundle_digests(self) -> set[str]:
        try:
            return {b.name[len(self.root) + 8:].split(".")[0] for b in self._client.list_blobs(
                self._bucket, prefix=f"{self.root}bundles/", timeout=self._timeout, retry=self._retry)}
        except _FAILED as exc:
            raise StorageError(f"listing bundles in {self.where}: {exc}") from exc

    def put_bundle(self, path: Path) -> None:
        """Upload a bundle file (named DIGEST.tar.gz) unless it is there already."""
        blob = self._bucket.blob(f"{self.root}bundles/{path.name}", chunk_size=_CHUNK_BYTES)
        try:
            blob.upload_from_filename(str(path), if_generation_match=0, timeout=self._timeout,
                                      retry=self._retry)
        except gexc.PreconditionFailed:
            pass  # content-addressed: the one there is the same
        except _FAILED as exc:
            raise StorageError(f"uploading bundle {path.name} to {self.where}: {exc}") from exc

    def get_bundle(self, digest: str, dest: Path) -> None:
        blob = self._bucket.blob(f"{self.root}bundles/{digest}.tar.gz", chunk_size=_CHUNK_BYTES)
        try:
            blob.download_to_filename(str(dest), timeout=self._timeout, retry=self._retry)
        except _FAILED as exc:
            raise StorageError(f"downloading bundle {digest[:12]} from {self.where}: {exc}") \
                from exc

    def delete(self, name: str, generation: int) -> None:
        blob = self._bucket.blob(f"{self.root}{name}/{OBJECT}")
        try:
            blob.delete(if_generation_match=generation, timeout=self._timeout, retry=self._retry)
        except gexc.NotFound:
            pass  # pruned by someone else already
        except _FAILED as exc:
            raise StorageError(f"pruning checkpoint {name} in {self.where}: {exc}") from exc
