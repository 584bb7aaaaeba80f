import pytest

from pipeline.errors import StorageError
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
    key = audio_key("b1", "line 7/a", "wav")
    assert key == "batches/b1/audio/line_7_a.wav"
    assert not store.exists(key)
    store.put(key, b"one", "audio/wav")
    store.put(key, b"two", "audio/wav")  # a retried job overwrites, never duplicates
    assert store.get(key) == b"two"
    assert store.list("batches/b1/") == [key]
    store.delete(key)
    assert not store.exists(key) and store.list("batches/b1/") == []


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
