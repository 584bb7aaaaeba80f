"""Object storage: a local folder by default, S3-compatible over HTTP when configured."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.storage.base import ObjectStore

if TYPE_CHECKING:
    from pipeline.settings import Settings


def make_store(settings: Settings) -> ObjectStore:
    if settings.s3_bucket:
        from pipeline.storage.s3 import S3Store

        return S3Store(
            bucket=settings.s3_bucket,
            prefix=settings.s3_prefix,
            endpoint_url=settings.s3_endpoint_url,
            region=settings.s3_region,
        )
    from pipeline.storage.local import LocalStore

    return LocalStore(settings.object_dir)


__all__ = ["ObjectStore", "make_store"]
