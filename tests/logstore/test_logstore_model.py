"""The chunk encoding and object layout."""

from __future__ import annotations

import pytest

from iris.base.errors import InvalidRequestError
from iris.logstore.errors import LogStorageError
from iris.logstore.model import (
    ChunkHeader,
    LogLine,
    Record,
    chunk_key,
    decode_chunks,
    encode_chunk,
    format_line,
    job_prefix,
    log_key,
    parse_key,
    split_lines,
)


def test_layout_hierarchical_job_keys_are_nested_paths():
    assert chunk_key("/alice/train", 3, 1, 12) == \
        "jobs/alice/train/_tasks/3/attempts/1/chunks/0000000012"
    assert log_key("/alice/train/", 0, 2) == "jobs/alice/train/_tasks/0/attempts/2/log"


def test_layout_child_job_objects_are_not_under_parent_prefix():
    parent = job_prefix("/alice")
    child_chunk = chunk_key("/alice/tasks", 0, 0, 0)
    assert not child_chunk.startswith(parent)
    assert parse_key(parent, child_chunk) is None


def test_layout_parse_key_names_chunks_and_log_and_ignores_others():
    prefix = job_prefix("/a/b")
    assert parse_key(prefix, chunk_key("/a/b", 7, 2, 5)).seq == 5
    ref = parse_key(prefix, log_key("/a/b", 7, 2))
    assert (ref.task, ref.attempt, ref.seq) == (7, 2, None)
    assert parse_key(prefix, log_key("/a/b", 7, 2) + ".compose/0/000001") is None


@pytest.mark.parametrize("job", ["alice", "/alice/../x", "/", "/a b", ""])
def test_layout_invalid_job_raises_invalid_request(job):
    with pytest.raises(InvalidRequestError) as info:
        job_prefix(job)
    assert info.value.field == "job"


@pytest.mark.parametrize("task,attempt", [(-1, 0), (0, -2), ("1", 0), (True, 0)])
def test_layout_invalid_task_or_attempt_raises_invalid_request(task, attempt):
    with pytest.raises(InvalidRequestError):
        chunk_key("/j", task, attempt, 0)


def test_encoding_composed_chunks_decode_with_their_seq():
    recs = [Record(1.5, "stdout", b"a\nb\n"), Record(2.0, "stderr", b"\xffbad\n")]
    data = b"".join(encode_chunk(ChunkHeader("/j", 1, 0, seq), recs) for seq in range(3))
    decoded = list(decode_chunks(data))
    assert [h.seq for h, _ in decoded] == [0, 0, 1, 1, 2, 2]
    assert decoded[1][1] == recs[1]
    lines = split_lines(*decoded[0])
    assert lines == [LogLine(1.5, "stdout", 1, 0, "a"), LogLine(1.5, "stdout", 1, 0, "b")]
    assert split_lines(*decoded[1])[0].text == "\ufffdbad"
    assert format_line(lines[0]) == "[task 1/attempt 0] a"


@pytest.mark.parametrize("data", [b"\x93\x01\x02\x03", b"\x81\xa1t\x01",
                                  encode_chunk(ChunkHeader("/j", 0, 0, 0),
                                               [Record(1.0, "stdout", b"x\n")])[:-1]])
def test_encoding_malformed_chunk_raises_storage_error(data):
    with pytest.raises(LogStorageError):
        list(decode_chunks(data))


def test_encoding_log_bigger_than_msgpack_default_buffer_decodes():
    record = Record(1.0, "stdout", b"z" * 1_000_000)
    chunk = encode_chunk(ChunkHeader("/j", 0, 0, 0), [record] * 8)
    data = chunk * 14  # ~112 MB, over msgpack's 100 MiB default buffer
    assert sum(1 for _ in decode_chunks(data)) == 8 * 14
