"""The S3 requests a plan can ask for, and the replies it gets back.

Plans (see :mod:`langgraph_s3_checkpoint.core`) are generators. Each ``yield`` hands the I/O shell a
list of requests that may run in parallel; the shell sends back the list of replies in the same order.
A plan may also yield :class:`Emit` to hand one result to the caller (used by ``list``, which streams).
Nothing here performs I/O.

Each request type states the type of its reply: :class:`Get` is a ``Request[StoredObject | None]``, a
:class:`Put` a ``Request[Written | PreconditionFailed]``, and so on. The parameter exists only for the
type checker; :func:`.plans.one`, :func:`.plans.both`, :func:`.plans.three` and :func:`.plans.all_of` carry it
to the replies. A bare ``Request`` (a shell's view) is one whose reply type is not known.
"""

from __future__ import annotations

import enum
from collections.abc import Generator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Generic, TypeVar

from typing_extensions import TypeVar as DefaultedTypeVar

T = TypeVar("T")
R_co = DefaultedTypeVar("R_co", covariant=True, default=Any)


class Request(Generic[R_co]):
    """A request whose reply is an ``R_co`` (a type parameter only: the shells dispatch on the subclass)."""


@dataclass(frozen=True)
class Get(Request["StoredObject | None"]):
    key: str
    etag: str | None = None
    """The ETag a listing just showed for ``key``: the store may answer from its cache of bodies
    when it holds ``key`` with exactly this ETag (the object has not changed since it was read)."""


@dataclass(frozen=True)
class Put(Request["Written | PreconditionFailed"]):
    key: str
    body: bytes = field(repr=False)
    if_none_match: bool = False
    """Create only: the reply is :data:`PRECONDITION_FAILED` if the key exists."""
    if_match: str | None = None
    """Replace only the object with this ETag; :data:`PRECONDITION_FAILED` otherwise (or if missing)."""
    expires: bool = True
    """Whether the retention tag applies (when a TTL is configured); ``name`` objects never expire."""


@dataclass(frozen=True)
class ListKeys(Request["Page"]):
    prefix: str
    start_after: str | None = None
    max_keys: int = 1000
    delimiter: str | None = None
    token: str | None = None


@dataclass(frozen=True)
class Delete(Request[None]):
    keys: tuple[str, ...]
    """At most 1000 keys (one DeleteObjects request); missing keys are not an error."""


@dataclass(frozen=True)
class DeleteIfMatch(Request["PreconditionFailed | None"]):
    """Delete one object only if its ETag is still ``etag``; :data:`PRECONDITION_FAILED` otherwise.

    A missing object replies ``None`` like a deleted one (a retry after a lost answer finds it gone)."""

    key: str
    etag: str


@dataclass(frozen=True)
class Copy(Request[bool]):
    """Server-side copy; the reply says whether the source existed (``False``: deleted since it was listed)."""

    source: str
    target: str


@dataclass(frozen=True)
class BucketExists(Request[bool]):
    pass


@dataclass(frozen=True)
class CreateBucket(Request[None]):
    pass


@dataclass(frozen=True)
class EnsureExpiryRule(Request[None]):
    """Install (or update) a bucket lifecycle rule expiring tagged objects under ``prefix`` after ``days``."""

    rule_id: str
    prefix: str
    days: int


S3_OPERATION: dict[type[Request[Any]], str] = {
    Get: "GetObject",
    Put: "PutObject",
    ListKeys: "ListObjectsV2",
    Delete: "DeleteObjects",
    DeleteIfMatch: "DeleteObject",
    Copy: "CopyObject",
    BucketExists: "HeadBucket",
    CreateBucket: "CreateBucket",
    EnsureExpiryRule: "PutBucketLifecycleConfiguration",
}
"""The S3 call each request is: what errors name, whichever transport sent it, and what the default transport asks
the client's watch about."""


def named_in_errors(request: Request[Any], bucket: str) -> str:
    """A request as both transports' errors name it: its S3 call and its key (or prefix, or else the bucket)."""
    where = getattr(request, "key", None) or getattr(request, "prefix", None) or bucket
    return f"{S3_OPERATION[type(request)]} {where!r}"


@dataclass(frozen=True)
class StoredObject:
    """Reply to :class:`Get` when the object exists (a missing object replies ``None``)."""

    body: bytes = field(repr=False)
    etag: str
    modified: datetime | None = None
    served: datetime | None = None
    """The server's clock when it answered (``Date``): with ``modified``, the object's age on one clock."""


def same_etag(a: str, b: str) -> bool:
    """Listings and reads may quote ETags differently."""
    return a.strip('"') == b.strip('"')


@dataclass(frozen=True)
class Written:
    """Reply to a successful :class:`Put`."""

    etag: str


class PreconditionFailed(enum.Enum):
    """The type of :data:`PRECONDITION_FAILED`, its only value (compare with ``is``)."""

    PRECONDITION_FAILED = "PRECONDITION_FAILED"

    def __repr__(self) -> str:
        return "PRECONDITION_FAILED"

    __str__ = __repr__


PRECONDITION_FAILED: Final = PreconditionFailed.PRECONDITION_FAILED
"""Reply to a conditional :class:`Put` (or :class:`DeleteIfMatch`) whose condition did not hold."""


def condition_failed(request: Put, *, refused: bool, missing: bool) -> bool:
    """Whether a failed PUT means :data:`PRECONDITION_FAILED`, for every transport.

    ``refused``: the server answered 412 Precondition Failed (or 409 ConditionalRequestConflict, a
    concurrent conditional write). ``missing``: it answered 404. A missing key under ``If-Match`` is
    404 on AWS and moto and 412 on SeaweedFS; both mean the object is not the one expected.
    """
    return refused or (missing and request.if_match is not None)


@dataclass(frozen=True)
class Page:
    """Reply to :class:`ListKeys`."""

    keys: list[str]
    prefixes: list[str]
    token: str | None
    """Continuation token, ``None`` on the last page."""
    modified: list[datetime] = field(default_factory=list)
    """LastModified of each key, in the order of ``keys``."""
    etags: list[str] = field(default_factory=list)
    """ETag of each key, in the order of ``keys``."""
    sizes: list[int] = field(default_factory=list)
    """Size in bytes of each key, in the order of ``keys``."""
    served: datetime | None = None
    """The server's clock when it answered (its ``Date`` header): ages are judged by it, never by
    the local clock, so a machine whose clock is off cannot mistake a put in flight for garbage."""

    def reads(self, with_etags: bool = True) -> list[Get]:
        """A :class:`Get` for each listed key, carrying the ETag it was listed with if asked (and known)."""
        if not with_etags or len(self.etags) != len(self.keys):
            return [Get(key) for key in self.keys]
        return [Get(key, etag) for key, etag in zip(self.keys, self.etags, strict=True)]


@dataclass(frozen=True)
class Emit:
    """Not a request: one result that a streaming plan hands to its caller."""

    value: Any


Step = list[Request] | Emit
Plan = Generator[Step, Any, T]
