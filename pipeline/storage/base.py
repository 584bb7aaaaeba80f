"""The object store interface, and the deterministic keys synth writes under."""

from __future__ import annotations

import abc
import re
from datetime import datetime
from pathlib import Path

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(name: str, max_chars: int = 150) -> str:
    """A client id made safe as one path segment ("line 7/a" -> "line_7_a"). Many ids map to one
    name ("a/b", "a_b" and "a b"), so a safe name is for reading, never for telling items apart."""
    cleaned = _SAFE.sub("_", name).strip("._") or "_"
    return cleaned[:max_chars]


def audio_key(batch_id: str, job_id: str, client_id: str, extension: str) -> str:
    """One key per job: unique by its job id (the client id's safe name in front is only for reading),
    so two items never share an object, and a retried job overwrites its own, never duplicates it."""
    return f"batches/{batch_id}/audio/{safe_name(client_id, 100)}.{job_id}.{extension}"


def manifest_key(batch_id: str) -> str:
    return f"batches/{batch_id}/manifest.jsonl"


class ObjectStore(abc.ABC):
    @abc.abstractmethod
    def put(self, key: str, data: bytes, content_type: str) -> None: ...

    @abc.abstractmethod
    def get(self, key: str) -> bytes: ...

    @abc.abstractmethod
    def put_file(self, key: str, path: Path, content_type: str) -> None:
        """``put`` of a file's contents, streamed: a document's files run to hundreds of MB (a
        ten-hour book), not to be held in memory."""

    @abc.abstractmethod
    def get_file(self, key: str, path: Path) -> None:
        """``get`` into the file ``path`` (replaced), streamed."""

    @abc.abstractmethod
    def exists(self, key: str) -> bool: ...

    @abc.abstractmethod
    def delete(self, key: str) -> None: ...

    @abc.abstractmethod
    def list(self, prefix: str) -> list[str]: ...

    @abc.abstractmethod
    def list_modified(self, prefix: str) -> dict[str, datetime]:
        """Every key under ``prefix`` with the time it was last written (UTC)."""

    @abc.abstractmethod
    def url(self, key: str) -> str | None:
        """Where a user elsewhere can fetch the object (an s3:// URL), or None for a local folder,
        whose paths mean nothing off this machine and are never given out in manifests."""

    def check(self) -> None:
        """Raise StorageError if the store cannot be reached."""

    def presigned_url(self, key: str, expires_s: int) -> str | None:
        """An HTTP URL that serves the object for ``expires_s`` seconds, or None (a local folder)."""
        return None
