"""The exceptions this package raises.

Every error derives from :class:`S3CheckpointError`, so callers can catch the package's failures in one
place. Each message names the object at fault (thread, namespace, key or channel) and says what to do.
Credentials never appear in messages.
"""

from __future__ import annotations


class S3CheckpointError(Exception):
    """Base class of every error raised by langgraph-s3-checkpoint."""


class InvalidConfigError(S3CheckpointError, ValueError):
    """A config, URL or argument passed to the saver is malformed."""


class CheckpointConflictError(S3CheckpointError):
    """Another writer moved the thread's head since this saver last saw it.

    Raised by ``put`` when the head object of ``(thread_id, checkpoint_ns)`` no longer has the ETag this
    saver read or wrote last: a second worker (or a straggler that woke up late) is writing the same
    thread. The winner's checkpoint is intact; this writer's checkpoint was not committed.
    """

    def __init__(self, thread_id: str, checkpoint_ns: str, detail: str = "") -> None:
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        where = f"thread {thread_id!r}" + (f", namespace {checkpoint_ns!r}" if checkpoint_ns else "")
        super().__init__(
            f"Another writer committed to {where} since this saver last read it{detail}. "
            "This checkpoint was not committed. Reload the thread (invoke with only thread_id in the "
            "config to continue from the latest checkpoint) and retry, or give up this run."
        )


class ClockSkewError(S3CheckpointError):
    """A checkpoint continuing the head has an id older than the head's: the writers' clocks disagree.

    LangGraph's checkpoint ids are uuid6 values that carry the time of the machine that made them, and
    "latest" means "newest id" for every LangGraph saver. A worker whose clock is behind the one that
    wrote the head would create a child that sorts before its parent, so it is refused instead of
    being committed where no reader would look for it. Nothing was committed.
    """

    def __init__(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, head_id: str) -> None:
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        where = f"thread {thread_id!r}" + (f", namespace {checkpoint_ns!r}" if checkpoint_ns else "")
        super().__init__(
            f"Checkpoint {checkpoint_id!r} continues {where}, but its id is older than the head "
            f"{head_id!r}: the clock of this machine is behind the clock of the machine that wrote the "
            "head (checkpoint ids carry the time). Nothing was committed. Synchronize the clocks (NTP) "
            "and retry."
        )


class ConditionalWritesUnsupportedError(S3CheckpointError):
    """The S3 server ignores If-None-Match / If-Match, so single-writer guarantees cannot hold."""


class BucketNotFoundError(S3CheckpointError):
    """The configured bucket does not exist."""


class S3AccessError(S3CheckpointError):
    """The server refused the credentials or the request (403, bad signature, unknown key id)."""


class S3RequestError(S3CheckpointError):
    """An S3 request failed after retries for a reason other than the cases above."""


class CorruptObjectError(S3CheckpointError):
    """An object in the bucket could not be decoded (truncated, foreign, or written by a newer format)."""

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        super().__init__(
            f"Object {key!r} is corrupt or unreadable: {reason}. Other checkpoints are unaffected; "
            "delete or restore this object (see `langgraph-s3 verify`)."
        )


class SerializationError(S3CheckpointError):
    """The serializer could not encode a channel value or write; nothing was committed."""


class TargetThreadExistsError(S3CheckpointError):
    """``copy_thread`` was asked to copy onto a thread that already has checkpoints."""


class SaverMisuseError(S3CheckpointError, RuntimeError):
    """A method was called in a context where it cannot work (e.g. a blocking call on the event loop)."""


ACCESS_DENIED_CODES = frozenset(
    {"AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}
)


def error_for_code(code: str, bucket: str, request: str, detail: str) -> S3CheckpointError:
    """The error for an S3 error ``code`` that retries did not cure; ``request`` names what was asked."""
    if code == "NoSuchBucket":
        return BucketNotFoundError(
            f"Bucket {bucket!r} does not exist. Create it or call setup() with create_bucket=True."
        )
    if code in ACCESS_DENIED_CODES:
        return S3AccessError(
            f"The S3 server refused {request} on bucket {bucket!r} ({code}). "
            "Check the credentials and that they allow this action (see docs/operations.md, IAM)."
        )
    return S3RequestError(f"{request} failed: {detail}")
