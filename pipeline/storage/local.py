"""A folder with the same interface as S3. Writes are atomic (temp file + rename)."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from pipeline.errors import StorageError, StorageFullError
from pipeline.storage.base import ObjectStore

# A write refused for these reasons is the disk's state, not the object's: every write fails
# until an operator frees space or fixes the mount, so the store is down, not the job bad.
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
_UNWRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
COPY_CHUNK = 1 << 20


def write_error(message: str, e: OSError) -> StorageError:
    """The StorageError for a failed write: StorageFullError where the disk refuses all writes."""
    if e.errno in _FULL:
        return StorageFullError(message)
    if e.errno in _UNWRITABLE:
        return StorageFullError(message, state="storage unwritable")
    return StorageError(message)


class LocalStore(ObjectStore):
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root.resolve() not in path.parents:
            raise StorageError(f"object key {key!r} escapes the store")
        return path

    def put(self, key: str, data: bytes, content_type: str) -> None:
        self._write(key, lambda f: f.write(data))

    def put_file(self, key: str, path: Path, content_type: str) -> None:
        with open(path, "rb") as source:
            self._write(key, lambda f: shutil.copyfileobj(source, f, COPY_CHUNK))

    def _write(self, key: str, write: Callable[[BinaryIO], object]) -> None:
        path = self._path(key)
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                write(f)
            os.replace(tmp, path)
        except OSError as e:
            if tmp is not None:  # a failed write or rename leaves no partial file behind
                Path(tmp).unlink(missing_ok=True)
            raise write_error(f"cannot write {path} (local object folder): {e}", e) from e

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except OSError as e:
            raise StorageError(f"cannot read {key}: {e}") from e

    def get_file(self, key: str, path: Path) -> None:
        try:
            shutil.copyfile(self._path(key), path)
        except OSError as e:
            raise StorageError(f"cannot read {key}: {e}") from e

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def list(self, prefix: str) -> list[str]:
        base = self.root / prefix
        if not base.exists():
            return []
        return sorted(
            str(p.relative_to(self.root)) for p in base.rglob("*") if p.is_file() and not p.name.startswith(".tmp-")
        )

    def list_modified(self, prefix: str) -> dict[str, datetime]:
        out = {}
        for key in self.list(prefix):
            try:
                out[key] = datetime.fromtimestamp(self._path(key).stat().st_mtime, UTC)
            except FileNotFoundError:  # removed since it was listed
                continue
        return out

    def url(self, key: str) -> str | None:
        return None

    def check(self) -> None:
        # A folder that exists read-only passes mkdir, and a full disk still makes empty files:
        # only a byte written and flushed shows that the store takes writes.
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=self.root, prefix=".tmp-") as probe:
                probe.write(b"\0")
                probe.flush()
        except OSError as e:
            raise write_error(f"object folder {self.root} is not writable: {e}", e) from e
