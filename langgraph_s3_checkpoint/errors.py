"""The exceptions this package raises.

Every error derives from :class:`S3CheckpointError`, so callers can catch the package's failures in one
place: the saver, the ``langgraph-s3`` command and the Agent Server integration never let a botocore,
urllib3 or built-in exception escape (a few are kept as ``__cause__``). Each message names the object at
fault (thread, namespace, key or channel) and says what to do. Credentials never appear in messages.

Where LangGraph's built-in savers (``InMemorySaver``, the SQL savers) raise a built-in exception for the
same mistake, ours subclasses that built-in as well, so code written for them keeps catching it:

===================================  ====================  =================================================
our error                            also a                because
===================================  ====================  =================================================
:class:`InvalidConfigError`          ``ValueError``        bad config/URL/argument values (``ValueError``
                                                           is what the built-in savers raise for them)
:class:`InvalidArgumentTypeError`    ``TypeError``         an argument of the wrong type (also an
                                                           ``InvalidConfigError``, so a ``ValueError``)
:class:`SerializationError`          ``TypeError``         ``InMemorySaver`` raises the serializer's
                                                           ``TypeError`` for an unserializable value
:class:`SaverMisuseError`            ``RuntimeError``      a call made where it cannot work (a blocking call
                                                           on the event loop's thread, a closed saver), as
                                                           asyncio's own "cannot be called from a running
                                                           event loop"
===================================  ====================  =================================================

docs/behaviour.md, "Errors", lists every class with what it means and the one action to take.
"""

from __future__ import annotations


class S3CheckpointError(Exception):
    """Base class of every error raised by langgraph-s3-checkpoint."""


class InvalidConfigError(S3CheckpointError, ValueError):
    """A config, URL or argument passed to the saver is malformed (also a ``ValueError``)."""


class InvalidArgumentTypeError(InvalidConfigError, TypeError):
    """An argument of the wrong type (e.g. one string where a sequence of ids is expected): a ``TypeError``,
    as Python raises for the same mistake, and an :class:`InvalidConfigError`."""


class CheckpointConflictError(S3CheckpointError):
    """The thread moved on under a write that must not commit on top of whatever it is now.

    Raised by ``put`` when the head of ``(thread_id, checkpoint_ns)`` no longer holds the checkpoint the put's run
    read as the latest or committed last (a second worker, or a straggler that woke up late, is writing the same
    thread), when two runs that both found the namespace empty create it, or when the put's run was rolled back while
    it ran; and by maintenance calls whose objects kept changing under them. The message says which. What committed
    meanwhile is intact; the refused checkpoint was not committed. docs/safety.md has the whole fencing table.
    """

    def __init__(self, thread_id: str, checkpoint_ns: str, detail: str = "") -> None:
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        super().__init__(
            f"The {_where(thread_id, checkpoint_ns)} changed{detail}. "
            "Reload the thread (invoke with only thread_id in the config to continue from the latest checkpoint) and "
            "retry, or give up this run."
        )


class ParentNotCommittedError(CheckpointConflictError):
    """A put continues a checkpoint that is not part of the thread: it was never written, was rolled back
    (``delete_for_runs``) or deleted, and the caller did not ask for it by id (which would make the put a fork).

    A subclass of :class:`CheckpointConflictError` (the remedy is the same: reload the thread), but no other
    writer is blamed. Nothing was committed.
    """

    def __init__(self, thread_id: str, checkpoint_ns: str, parent_id: str) -> None:
        S3CheckpointError.__init__(
            self,
            f"The parent of this checkpoint, {parent_id!r}, is not a committed checkpoint of "
            f"{_where(thread_id, checkpoint_ns)}: it was never written, or was rolled back or deleted. This "
            "checkpoint was not committed. Reload the thread to continue from its latest checkpoint; to branch from "
            "a checkpoint id on purpose, read it by id first (get_tuple / get_state with its checkpoint_id, as "
            "update_state and replays do).",
        )
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.parent_id = parent_id


def _where(thread_id: str, checkpoint_ns: str) -> str:
    return f"thread {thread_id!r}" + (f", namespace {checkpoint_ns!r}" if checkpoint_ns else "")


class ClockSkewError(S3CheckpointError):
    """A checkpoint has an id older than its parent's or than the head it continues: the writers' clocks
    disagree.

    LangGraph's checkpoint ids are uuid6 values that carry the time of the machine that made them, and
    "latest" means "newest id" for every LangGraph saver. A child that sorts before its parent would be
    committed where no reader looks for the latest checkpoint, so it is refused. Nothing was committed.
    """

    def __init__(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, newer_id: str, newer: str) -> None:
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        where = f"thread {thread_id!r}" + (f", namespace {checkpoint_ns!r}" if checkpoint_ns else "")
        super().__init__(
            f"Checkpoint {checkpoint_id!r} continues {where}, but its id is older than {newer} {newer_id!r}: "
            f"the clock of the machine making this checkpoint is behind the clock of the machine that made "
            f"{newer}, or that one's was ahead (checkpoint ids carry the time). Nothing was committed. "
            "Synchronize the clocks (NTP) and retry."
        )


class ConditionalWritesUnsupportedError(S3CheckpointError):
    """The S3 server does not enforce If-None-Match / If-Match as S3 does (it ignores them, refuses them with
    501, or answers them otherwise), so single-writer guarantees cannot hold.

    Raised at a saver's or store's first write (or ``setup()``) by the conditional-write probe, naming the
    check that failed (``check``) and what the server answered (``answer``); also when a conditional request
    is answered 501 Not Implemented."""

    def __init__(self, message: str, *, check: str = "", answer: str = "") -> None:
        self.check = check
        self.answer = answer
        super().__init__(message)


class BucketNotFoundError(S3CheckpointError):
    """The configured bucket does not exist."""


class S3AccessError(S3CheckpointError):
    """The server refused the credentials or the request (403, bad signature, unknown key id), or no
    credentials were found at all."""


class S3RequestError(S3CheckpointError):
    """An S3 request failed after retries (unreachable endpoint, timeouts, the operation's deadline) for
    a reason other than the cases above.

    The outcome of a write that failed this way is unknown: the server may have applied it and only the
    answer been lost. A ``put`` that raised it may have committed; reading the thread (``get_tuple``)
    shows which, and resuming the graph continues from whatever is committed."""


def unreachable(where: str, reason: object) -> S3RequestError:
    """The error for a request no attempt of which got an answer (both transports raise it)."""
    return S3RequestError(
        f"Cannot reach the S3 endpoint {where}: {reason}. If this was a write, it may still have been applied "
        "(only the answer lost): a put that raised this may have committed; get_tuple shows the thread as it is."
    )


class WrongRegionError(S3RequestError):
    """S3 redirected a request to another region (the bucket is not where the client sends and signs). The
    boto3 transport follows such redirects; the direct transport, which sends where botocore resolved the
    bucket once, raises this, and the default transport then sends through boto3 from that request on."""


class ConditionalRequestConflictError(S3RequestError):
    """The server answered ``409 ConditionalRequestConflict`` (AWS: "a concurrent write raced you, retry") to every
    attempt of a conditional write within the retry budget. Nothing about the thread is decided by it: the write
    was not applied, and no other writer is known to have won. Many writers on one key, or a server that answers
    409 to every conditional write."""


class NotS3EndpointError(S3RequestError):
    """The endpoint answered, but not like an S3 server (a wrong port, a web server, a proxy page)."""


DEFAULT_CORRUPT_ADVICE = (
    "Other checkpoints are unaffected. Run `langgraph-s3 verify` to see every damaged object; restore this "
    "one from a backup or an export if you have one (deleting it loses what it holds)."
)


class CorruptObjectError(S3CheckpointError):
    """An object in the bucket could not be decoded (truncated, foreign, or written by a newer format)."""

    def __init__(self, key: str, reason: str, advice: str = DEFAULT_CORRUPT_ADVICE) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"Object {key!r} is corrupt or unreadable: {reason}. {advice}")


class DecryptionError(CorruptObjectError):
    """An encrypted value could not be decrypted: the serializer has no key or a different key.

    The object itself is intact; nothing should be deleted. A subclass of :class:`CorruptObjectError`
    so that tools that skip unreadable objects skip it too.
    """

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        S3CheckpointError.__init__(
            self,
            f"Object {key!r} is encrypted and could not be decrypted: {reason}. The data is intact; do not "
            "delete it. Configure the serializer that wrote it with the same key (serde=EncryptedSerializer..., "
            "`langgraph-s3 --serde`, LANGGRAPH_AES_KEY).",
        )


class DamagedHeadError(CorruptObjectError):
    """A namespace's head (its commit pointer) is unreadable; its history records may all be intact."""

    def __init__(self, key: str, reason: str, thread_id: str) -> None:
        self.thread_id = thread_id
        super().__init__(
            key,
            reason,
            "The thread's history records are probably intact: do not delete the head (that would hide the "
            f"whole history). Rebuild it with saver.repair_thread({thread_id!r}) or "
            f"`langgraph-s3 repair {thread_id}` (add --dry-run to see what it would do).",
        )


class NewerFormatError(S3CheckpointError):
    """An object was written by a newer release of langgraph-s3-checkpoint, in a format this one cannot read.

    Not a :class:`CorruptObjectError`: the object is sound, and nothing here may treat it as damage or
    garbage. ``repair_thread`` and ``gc`` stop at it instead of moving a head back past the newer release's
    commits or deleting them."""

    def __init__(self, key: str, version: int, supported: int) -> None:
        self.key = key
        super().__init__(
            f"{key!r} was written by a newer release of langgraph-s3-checkpoint (object format {version}; this "
            f"release reads format {supported}). Upgrade this process's langgraph-s3-checkpoint; do not repair or "
            "gc this bucket with an older release."
        )


class SerializationError(S3CheckpointError, TypeError):
    """The serializer could not encode a channel value or write; nothing was committed (also a ``TypeError``,
    as InMemorySaver raises for an unserializable value)."""


class TargetThreadExistsError(S3CheckpointError):
    """``copy_thread`` was asked to copy onto a thread that already has checkpoints."""


class ThreadChangedError(S3CheckpointError):
    """A read that must see one state of a thread saw it change under it: an export during which a prune or a
    rollback deleted a large value the archive's checkpoints reference. Nothing was produced; run it again
    (``langgraph-s3 export`` does, twice, before it gives up)."""


class MigrationError(S3CheckpointError):
    """Copying threads or store items to or from another checkpointer or store failed on that side: its own
    error (a database gone away, a factory's saver failing) is the ``__cause__``. What was committed before it
    stays; running the same migration again resumes it (docs/migration.md)."""


class SaverMisuseError(S3CheckpointError, RuntimeError):
    """A method was called in a context where it cannot work (a blocking call on the event loop, a saver or
    store used after ``close()`` or its ``with`` block)."""


CREATE_BUCKET_ADVICE = (
    "Create it with the saver: S3Saver(..., create_bucket=True) or the URL option ?create_bucket=true, "
    "then call setup() once."
)
"""The one way to create a missing bucket that every message, the README and the notebooks name."""


ACCESS_DENIED_CODES = frozenset(
    {"AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}
)


def error_for_code(code: str, bucket: str, request: str, detail: str) -> S3CheckpointError:
    """The error for an S3 error ``code`` that retries did not cure; ``request`` names what was asked."""
    if code == "NoSuchBucket":
        return BucketNotFoundError(f"Bucket {bucket!r} does not exist. {CREATE_BUCKET_ADVICE}")
    if code == "RequestTimeTooSkewed":
        return S3AccessError(
            f"The S3 server refused {request} on bucket {bucket!r} because this machine's clock differs from the "
            "server's by more than it allows (RequestTimeTooSkewed; AWS allows 15 minutes): requests are signed "
            "with the current time. Synchronize this machine's clock (NTP)."
        )
    if code in ACCESS_DENIED_CODES:
        return S3AccessError(
            f"The S3 server refused {request} on bucket {bucket!r} ({code}). "
            "Check the credentials and that they allow this action (see docs/operations.md, IAM)."
        )
    return S3RequestError(f"{request} failed: {detail}")


class StoreConflictError(S3CheckpointError):
    """A store object kept changing under a conditional update (many writers on one vector shard)."""
