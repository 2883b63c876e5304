"""The sink contract, run against the local directory and GCS (real client, fake-gcs-server)."""

from __future__ import annotations

import pytest

from iris.base.errors import ConfigError, InvalidRequestError, NotFoundError
from iris.logstore.config import LogStoreConfig, open_sink
from iris.logstore.errors import ChunkExistsError
from iris.logstore.sinks import LocalDirSink, compose_rounds


def test_sink_duplicate_chunk_with_other_bytes_is_refused_and_original_kept(sink):
    sink.put_chunk("a/chunks/0000000000", b"first writer")
    with pytest.raises(ChunkExistsError) as info:
        sink.put_chunk("a/chunks/0000000000", b"zombie writer")
    assert info.value.key == "a/chunks/0000000000"
    assert sink.get("a/chunks/0000000000") == b"first writer"


def test_sink_retried_chunk_with_same_bytes_succeeds(sink):
    sink.put_chunk("a/chunks/0000000000", b"same")
    sink.put_chunk("a/chunks/0000000000", b"same")
    assert sink.get("a/chunks/0000000000") == b"same"


def test_sink_list_returns_keys_after_cursor_in_order(sink):
    for i in (2, 0, 1):
        sink.put_chunk(f"j/t/chunks/{i:010d}", b"x")
    sink.put_chunk("j/u/chunks/0000000000", b"x")
    assert sink.list("j/t/") == [f"j/t/chunks/{i:010d}" for i in range(3)]
    assert sink.list("j/t/", start_after="j/t/chunks/0000000000") == \
        ["j/t/chunks/0000000001", "j/t/chunks/0000000002"]
    assert sink.list_dirs("j/") == ["j/t/", "j/u/"]
    assert sink.list("nothing/") == [] and sink.list_dirs("nothing/") == []


def test_sink_missing_key_raises_not_found(sink):
    with pytest.raises(NotFoundError):
        sink.get("no/such/key")


@pytest.mark.parametrize("key", ["/abs", "a//b", "a/../b", ""])
def test_sink_bad_key_raises_invalid_request(sink, key):
    with pytest.raises(InvalidRequestError):
        sink.put_chunk(key, b"x")


def test_sink_compose_of_more_than_32_chunks_concatenates_in_order(sink):
    keys = [f"att/chunks/{i:010d}" for i in range(70)]
    for i, key in enumerate(keys):
        sink.put_chunk(key, f"{i}\n".encode())
    sink.compose("att/log", keys)
    assert sink.get("att/log") == "".join(f"{i}\n" for i in range(70)).encode()
    assert sink.list("att/") == [*keys, "att/log"]  # no compose temporaries left behind
    sink.delete([*keys, "att/never-existed"])
    assert sink.list("att/") == ["att/log"]


def test_compose_rounds_every_call_within_limit_and_dest_last():
    sources = [f"c{i}" for i in range(1000)]
    steps = compose_rounds("log", sources)
    assert all(len(srcs) <= 32 for _, srcs in steps)
    assert steps[-1][0] == "log"
    assert [s for _, srcs in steps if _.startswith("log.compose/0/") for s in srcs] == sources


def test_compose_rounds_no_sources_raises_invalid_request():
    with pytest.raises(InvalidRequestError):
        compose_rounds("log", [])


def test_config_local_opens_directory_under_prefix(tmp_path):
    sink = open_sink(LogStoreConfig.from_dict({"kind": "local", "root": str(tmp_path)}))
    assert isinstance(sink, LocalDirSink) and sink.root == tmp_path / "iris"


def test_config_gcs_uses_given_client(fake_gcs):
    bucket = fake_gcs.new_bucket()
    config = LogStoreConfig(kind="gcs", bucket=bucket, prefix="team/iris")
    sink = open_sink(config, gcs_client=fake_gcs.client())
    sink.put_chunk("k", b"v")
    blob = fake_gcs.client().bucket(bucket).blob("team/iris/k")
    assert blob.download_as_bytes() == b"v"


@pytest.mark.parametrize("data,word", [
    ({"kind": "s3", "bucket": "b"}, "kind"),
    ({"kind": "gcs", "bucket": "x"}, "bucket"),
    ({"kind": "gcs", "bucket": "Bad_Bucket"}, "bucket"),
    ({"kind": "local"}, "root"),
    ({"kind": "local", "root": "/tmp/x", "prefix": "/lead"}, "prefix"),
    ({"kind": "gcs", "bucket": "good-bucket", "region": "us"}, "region"),
    ({"kind": "gcs", "bucket": 7}, "bucket"),
])
def test_config_bad_values_raise_config_error_naming_the_key(data, word):
    with pytest.raises(ConfigError, match=word):
        LogStoreConfig.from_dict(data)
