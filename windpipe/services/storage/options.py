"""``StorageOptions``: how the services reach S3-compatible storage and which roots they
may open.

Built from a service's :class:`~services.settings.Settings` (``WINDPIPE_S3_*``, allowed
roots, object-store timeouts); :class:`windpipe.services.storage.store.Storage` turns it into
obstore's S3 options. S3 credentials come from configuration only: the configured keys,
the operator's ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``, or unsigned requests
(never the instance metadata endpoint unless ``s3_instance_credentials``).
:mod:`windpipe.services.storage.store` re-exports it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from windpipe.services.settings import Settings
from windpipe.services.storage.roots import AllowedRoots

__all__ = ["StorageOptions"]


@dataclass(frozen=True)
class StorageOptions:
    """How to reach S3-compatible storage (``Settings.s3_*``) and which roots a service
    may open (``allowed``: None means any, as for a library caller; services pass the
    operator's list). ``readahead_bytes`` bounds the bytes a read-ahead holds fetched or
    in flight (:mod:`windpipe.services.storage.readahead`); ranges closer than ``coalesce_bytes``
    are fetched in one request."""

    s3_endpoint: str | None = None
    s3_region: str = "us-east-1"
    s3_allow_http: bool = False
    s3_access_key_id: str | None = field(default=None, repr=False)
    s3_secret_access_key: str | None = field(default=None, repr=False)
    s3_instance_credentials: bool = False
    allowed: AllowedRoots | None = None
    connect_timeout_s: float = 5.0
    timeout_s: float = 30.0
    max_retries: int = 2
    readahead_bytes: int = 64 << 20
    coalesce_bytes: int = 1 << 20

    @classmethod
    def from_settings(cls, settings: Settings) -> StorageOptions:
        """The storage options of a service's settings (``WINDPIPE_S3_*``, allowed roots,
        object-store timeouts)."""
        secret = settings.s3_secret_access_key
        return cls(
            s3_endpoint=settings.s3_endpoint, s3_region=settings.s3_region,
            s3_allow_http=settings.s3_allow_http, s3_access_key_id=settings.s3_access_key_id,
            s3_secret_access_key=secret.get_secret_value() if secret else None,
            s3_instance_credentials=settings.s3_instance_credentials,
            allowed=AllowedRoots.parse(settings.resolved_allowed_roots()),
            connect_timeout_s=settings.s3_connect_timeout_s,
            timeout_s=settings.s3_timeout_s, max_retries=settings.s3_max_retries,
            readahead_bytes=settings.s3_readahead_bytes,
            coalesce_bytes=settings.s3_coalesce_bytes,
        )

    def s3_credentials(self) -> dict[str, Any]:
        """S3Store options for credentials: configured keys, the operator's ``AWS_*`` keys
        (obstore reads them), or unsigned requests (never instance metadata unless
        ``s3_instance_credentials``)."""
        if self.s3_access_key_id and self.s3_secret_access_key:
            return {"access_key_id": self.s3_access_key_id,
                    "secret_access_key": self.s3_secret_access_key}
        if (os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY")) \
                or self.s3_instance_credentials:
            return {}
        return {"skip_signature": True}

    def client_options(self) -> dict[str, Any]:
        """obstore ``ClientConfig``: connect and whole-request timeouts, plain HTTP."""
        opts: dict[str, Any] = {
            "connect_timeout": timedelta(seconds=self.connect_timeout_s),
            "timeout": timedelta(seconds=self.timeout_s),
        }
        if self.s3_allow_http:
            opts["allow_http"] = True
        return opts

    def retry_config(self) -> dict[str, Any]:
        """obstore ``RetryConfig``: a few retries, all of them within one request timeout."""
        return {
            "max_retries": self.max_retries,
            "retry_timeout": timedelta(seconds=self.timeout_s),
            "backoff": {"init_backoff": timedelta(milliseconds=100),
                        "max_backoff": timedelta(seconds=2), "base": 2},
        }
