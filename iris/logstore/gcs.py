"""The Google Cloud Storage log sink, on the google-cloud-storage client. Not the encoding.

Chunks are uploaded with `if_generation_match=0` (create-only), so a zombie writer gets
412 and cannot overwrite what the current attempt wrote. The client's own retry handles
transient errors (429, 5xx, connection resets) within `retry_deadline_s`; past that the
sink raises LogStorageError(transient=True) and the shipper retries with its own backoff.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import requests
from google.api_core import exceptions as gexc
from google.cloud import storage
from google.cloud.storage.retry import DEFAULT_RETRY

from iris.base.errors import NotFoundError
from iris.logstore.errors import ChunkExistsError, LogStorageError
from iris.logstore.sinks import check_key, compose_rounds

_TRANSIENT = (gexc.TooManyRequests, gexc.ServerError, gexc.RetryError,
              requests.exceptions.ConnectionError, requests.exceptions.Timeout,
              ConnectionError, TimeoutError)


class GcsSink:
    """Log chunks as objects in `bucket` under `prefix`.

    `client` defaults to `storage.Client()`, which takes project and credentials from the
    environment (workload identity or GOOGLE_APPLICATION_CREDENTIALS) in production.
    """

    def __init__(self, bucket: str, prefix: str = "", client: storage.Client | None = None, *,
                 request_timeout_s: float = 10.0, retry_deadline_s: float = 10.0):
        # 10 s per request and 10 s of client retries: long enough to ride out a GCS blip,
        # short enough that the shipper sees an outage and counts it instead of hanging in
        # the client's default 120 s retry loop.
        self._client = client if client is not None else storage.Client()
        self._bucket = self._client.bucket(bucket)
        self._prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self._timeout = request_timeout_s
        self._retry = DEFAULT_RETRY.with_timeout(retry_deadline_s)

    def _name(self, key: str) -> str:
        return self._prefix + check_key(key)

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, timeout=self._timeout, retry=self._retry, **kwargs)
        except gexc.NotFound as exc:
            raise NotFoundError(f"{what}: not found in gs://{self._bucket.name}") from exc
        except _TRANSIENT as exc:
            raise LogStorageError(f"{what}: {exc}", transient=True) from exc
        except gexc.GoogleAPICallError as exc:
            raise LogStorageError(f"{what}: {exc}", transient=False) from exc

    def put_chunk(self, key: str, data: bytes) -> None:
        blob = self._bucket.blob(self._name(key))
        try:
            self._call(f"upload {key}", blob.upload_from_string, data,
                       content_type="application/x-msgpack", if_generation_match=0)
        except LogStorageError as exc:
            if not isinstance(exc.__cause__, gexc.PreconditionFailed):
                raise
            # A retry of an upload whose first try landed also gets 412: same bytes is success.
            if self.get(key) != data:
                raise ChunkExistsError(key) from None

    def list(self, prefix: str, start_after: str | None = None) -> list[str]:
        full_prefix = self._prefix + prefix
        start = self._prefix + start_after if start_after else None
        blobs = self._call(f"list {prefix}", self._list_names, full_prefix, start)
        cut = len(self._prefix)
        return [name[cut:] for name in blobs if start is None or name > start]

    def _list_names(self, prefix: str, start: str | None, *, timeout: float, retry: Any
                    ) -> list[str]:
        it = self._client.list_blobs(self._bucket, prefix=prefix, start_offset=start,
                                     timeout=timeout, retry=retry)
        return [blob.name for blob in it]

    def list_dirs(self, prefix: str) -> list[str]:
        names = self._call(f"list {prefix}", self._list_prefixes, self._prefix + prefix)
        cut = len(self._prefix)
        return sorted(name[cut:] for name in names)

    def _list_prefixes(self, prefix: str, *, timeout: float, retry: Any) -> set[str]:
        it = self._client.list_blobs(self._bucket, prefix=prefix, delimiter="/",
                                     timeout=timeout, retry=retry)
        for _page in it.pages:
            pass
        return set(it.prefixes)

    def get(self, key: str) -> bytes:
        blob = self._bucket.blob(self._name(key))
        return self._call(f"download {key}", blob.download_as_bytes)

    def compose(self, dest: str, sources: list[str]) -> None:
        steps = compose_rounds(dest, sources)
        for step_dest, step_sources in steps:
            # A fresh Blob as destination: a reloaded one would send a stale crc32c (400).
            blob = self._bucket.blob(self._name(step_dest))
            parts = [self._bucket.blob(self._name(s)) for s in step_sources]
            self._call(f"compose {step_dest}", blob.compose, parts)
        self.delete(step_dest for step_dest, _ in steps[:-1])

    def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            blob = self._bucket.blob(self._name(key))
            try:
                self._call(f"delete {key}", blob.delete)
            except NotFoundError:
                pass
