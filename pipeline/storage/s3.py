"""S3 through boto3. The endpoint URL is configurable, so MinIO and other S3-compatible stores work.
Credentials come from boto3's usual chain (AWS_ACCESS_KEY_ID, profiles, instance roles)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import boto3
from boto3.exceptions import S3UploadFailedError
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from pipeline.errors import StorageError
from pipeline.storage.base import ObjectStore


class S3Store(ObjectStore):
    def __init__(
        self, *, bucket: str, prefix: str = "", endpoint_url: str | None = None, region: str = "us-east-1"
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.client = boto3.client(
            "s3",
            endpoint_url=endpoint_url,
            region_name=region,
            config=Config(retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=5, read_timeout=60),
        )

    def _key(self, key: str) -> str:
        return self.prefix + key

    def put(self, key: str, data: bytes, content_type: str) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, ContentType=content_type)
        except (BotoCoreError, ClientError) as e:
            raise StorageError(f"cannot write s3://{self.bucket}/{self._key(key)}: {e}") from e

    def put_file(self, key: str, path: Path, content_type: str) -> None:
        # boto3's managed transfer: in parts past 8 MB, each retried alone, read from the file
        try:
            self.client.upload_file(str(path), self.bucket, self._key(key), ExtraArgs={"ContentType": content_type})
        except (BotoCoreError, ClientError, S3UploadFailedError) as e:
            raise StorageError(f"cannot write s3://{self.bucket}/{self._key(key)}: {e}") from e

    def get_file(self, key: str, path: Path) -> None:
        try:
            self.client.download_file(self.bucket, self._key(key), str(path))
        except (BotoCoreError, ClientError) as e:
            raise StorageError(f"cannot read s3://{self.bucket}/{self._key(key)}: {e}") from e

    def get(self, key: str) -> bytes:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
        except (BotoCoreError, ClientError) as e:
            raise StorageError(f"cannot read s3://{self.bucket}/{self._key(key)}: {e}") from e

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise StorageError(f"cannot stat s3://{self.bucket}/{self._key(key)}: {e}") from e

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except (BotoCoreError, ClientError) as e:
            raise StorageError(f"cannot delete s3://{self.bucket}/{self._key(key)}: {e}") from e

    def list(self, prefix: str) -> list[str]:
        keys: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self._key(prefix)):
                keys.extend(o["Key"][len(self.prefix) :] for o in page.get("Contents", []))
        except (BotoCoreError, ClientError) as e:
            raise StorageError(f"cannot list s3://{self.bucket}/{self._key(prefix)}: {e}") from e
        return sorted(keys)

    def list_modified(self, prefix: str) -> dict[str, datetime]:
        out: dict[str, datetime] = {}
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self._key(prefix)):
                out.update((o["Key"][len(self.prefix) :], o["LastModified"]) for o in page.get("Contents", []))
        except (BotoCoreError, ClientError) as e:
            raise StorageError(f"cannot list s3://{self.bucket}/{self._key(prefix)}: {e}") from e
        return out

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._key(key)}"

    def presigned_url(self, key: str, expires_s: int) -> str | None:
        try:
            return self.client.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": self._key(key)}, ExpiresIn=expires_s
            )
        except (BotoCoreError, ClientError) as e:
            raise StorageError(f"cannot presign s3://{self.bucket}/{self._key(key)}: {e}") from e

    def check(self) -> None:
        where = f"S3 bucket {self.bucket!r} at {self.client.meta.endpoint_url}"
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchBucket", "NotFound"):
                raise StorageError(f"{where} is unreachable: it does not exist") from e
            raise StorageError(f"{where} is unreachable: {e}") from e
        except BotoCoreError as e:
            raise StorageError(f"{where} is unreachable: {e}") from e
