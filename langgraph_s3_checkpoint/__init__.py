"""Crash-resumable LangGraph agents, checkpointed to S3-compatible object storage.

``S3Saver`` and ``AsyncS3Saver`` implement LangGraph's ``BaseCheckpointSaver`` on plain objects with
conditional writes; ``S3Store`` and ``AsyncS3Store`` implement ``BaseStore`` (long-term memory) and ``S3Cache``
implements ``BaseCache`` (the node cache) on the same bucket; ``copy_threads`` and ``copy_store`` move threads and
memories from another checkpointer or store into the bucket and back (docs/migration.md). See README.md and
docs/design.md.
"""

from ._transport.connect import make_client, without_expect_continue
from .cache import S3Cache
from .errors import (
    BucketNotFoundError,
    CheckpointConflictError,
    ClockSkewError,
    ConditionalRequestConflictError,
    ConditionalWritesUnsupportedError,
    CorruptObjectError,
    DamagedHeadError,
    DecryptionError,
    InvalidArgumentTypeError,
    InvalidConfigError,
    MigrationError,
    NewerFormatError,
    NotS3EndpointError,
    ParentNotCommittedError,
    S3AccessError,
    S3CheckpointError,
    S3RequestError,
    SaverMisuseError,
    SerializationError,
    StoreConflictError,
    TargetThreadExistsError,
    ThreadChangedError,
    WrongRegionError,
)
from .migrate import copy_store, copy_threads
from .saver import AsyncS3Saver, BaseS3Saver, S3Saver
from .store import AsyncS3Store, BaseS3Store, S3Store

__all__ = [
    "AsyncS3Saver",
    "AsyncS3Store",
    "BaseS3Saver",
    "BaseS3Store",
    "BucketNotFoundError",
    "CheckpointConflictError",
    "ClockSkewError",
    "ConditionalRequestConflictError",
    "ConditionalWritesUnsupportedError",
    "CorruptObjectError",
    "DamagedHeadError",
    "DecryptionError",
    "InvalidArgumentTypeError",
    "InvalidConfigError",
    "MigrationError",
    "NewerFormatError",
    "NotS3EndpointError",
    "ParentNotCommittedError",
    "S3AccessError",
    "S3Cache",
    "S3CheckpointError",
    "S3RequestError",
    "S3Saver",
    "S3Store",
    "SaverMisuseError",
    "SerializationError",
    "StoreConflictError",
    "TargetThreadExistsError",
    "ThreadChangedError",
    "WrongRegionError",
    "copy_store",
    "copy_threads",
    "make_client",
    "without_expect_continue",
]
