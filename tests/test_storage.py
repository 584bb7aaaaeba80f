import os

import pytest

from pipeline.errors import StorageError
from pipeline.manifest import file_names
from pipeline.storage.base import audio_key
from pipeline.storage.local import LocalStore
from pipeline.storage.s3 import S3Store


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        return LocalStore(tmp_path / "objects")
    endpoint = request.getfixturevalue("s3_endpoint")
    return S3Store(bucket=request.getfixturevalue("s3_bucket"), prefix="pre", endpoint_url=endpoint)


def test_roundtrip_overwrite_list_delete(store):
    store.check()
    key = audio_key("b1", "j1", "line 7/a", "wav")
    assert key == "batches/b1/audio/line_7_a.j1.wav"
    assert not store.exists(key)
    store.put(key, b"one", "audio/wav")
    store.put(key, b"two", "audio/wav")  # a retried job overwrites, never duplicates
    assert store.get(key) == b"two"
    assert store.list("batches/b1/") == [key]
    store.delete(key)
    assert not store.exists(key) and store.list("batches/b1/") == []


def test_files_go_in_and_out_whole(store, tmp_path):
    """A document's file, past the 8 MB where S3 uploads go in parts, streamed both ways."""
    data = os.urandom(9 << 20)
    source, back = tmp_path / "book.m4b", tmp_path / "back.m4b"
    source.write_bytes(data)
    key = "batches/b1/document/book.m4b"
    store.put_file(key, source, "audio/mp4")
    store.get_file(key, back)
    assert back.read_bytes() == data == store.get(key)
    assert store.list("batches/b1/") == [key]  # no temporary or part left beside it
    if isinstance(store, S3Store):
        head = store.client.head_object(Bucket=store.bucket, Key=store._key(key))
        assert head["ContentType"] == "audio/mp4"


def test_a_missing_object_is_a_storage_error_for_get_file(store, tmp_path):
    with pytest.raises(StorageError):
        store.get_file("batches/b1/none.wav", tmp_path / "none.wav")


def test_local_store_refuses_keys_that_escape(tmp_path):
    with pytest.raises(StorageError, match="escapes"):
        LocalStore(tmp_path).put("../outside", b"x", "text/plain")


def test_missing_bucket_is_a_storage_error(s3_endpoint):
    with pytest.raises(StorageError, match="unreachable"):
        S3Store(bucket="no-such-bucket", endpoint_url=s3_endpoint).check()


def test_a_failed_local_write_leaves_no_temporary_file(tmp_path):
    store = LocalStore(tmp_path)
    (tmp_path / "a" / "b.wav").mkdir(parents=True)  # the rename onto a folder fails
    with pytest.raises(StorageError):
        store.put("a/b.wav", b"RIFF", "audio/wav")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["b.wav"]


def test_client_ids_that_sanitize_alike_get_one_object_each():
    """ "a/b", "a_b" and "a b" all read as a_b, "." and "é" as _, and long ids share their first
    characters: the job id in the key keeps every job's object its own."""
    long = "x" * 300
    ids = ["a/b", "a_b", "a b", ".", "..", "é", "ü", long + "1", long + "2"]
    keys = {audio_key("b1", f"job{i}", client_id, "wav") for i, client_id in enumerate(ids)}
    assert len(keys) == len(ids)
    assert all(len(k) < 300 and k.startswith("batches/b1/audio/") for k in keys)


def test_fetched_file_names_are_unique_and_deterministic():
    ids = ["a/b", "a_b", "a b", "a_b-2", "A_B", "line-000001"]
    names = file_names(ids, ["wav"] * len(ids))
    assert names == ["a_b.wav", "a_b-2.wav", "a_b-3.wav", "a_b-2-2.wav", "A_B-4.wav", "line-000001.wav"]
    assert len({n.casefold() for n in names}) == len(ids)
    assert file_names(ids, ["wav"] * len(ids)) == names


def test_a_local_store_gives_out_no_file_paths(tmp_path):
    store = LocalStore(tmp_path)
    store.put("batches/b/audio/x.wav", b"x", "audio/wav")
    assert store.url("batches/b/audio/x.wav") is None
