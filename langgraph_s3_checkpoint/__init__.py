"""Crash-resumable LangGraph agents, checkpointed to S3-compatible object storage.

``S3Saver`` and ``AsyncS3Saver`` implement LangGraph's ``BaseCheckpointSaver`` on plain objects with
conditional writes; see README.md and docs/design.md.
"""

from .errors import (
    BucketNotFoundError,
    CheckpointConflictError,
    ConditionalWritesUnsupportedError,
    CorruptObjectError,
    InvalidConfigError,
    S3AccessError,
    S3CheckpointError,
    S3RequestError,
    SaverMisuseError,
    SerializationError,
    TargetThreadExistsError,
)
from .saver import AsyncS3Saver, BaseS3Saver, S3Saver, make_client

__all__ = [
    "AsyncS3Saver",
    "BaseS3Saver",
    "BucketNotFoundError",
    "CheckpointConflictError",
    "ConditionalWritesUnsupportedError",
    "CorruptObjectError",
    "InvalidConfigError",
    "S3AccessError",
    "S3CheckpointError",
    "S3RequestError",
    "S3Saver",
    "SaverMisuseError",
    "SerializationError",
    "TargetThreadExistsError",
    "make_client",
]
