"""The S3 requests a plan can ask for, and the replies it gets back.

Plans (see :mod:`.plans`) are generators. Each ``yield`` hands the I/O shell a
list of requests that may run in parallel; the shell sends back the list of replies in the same order.
A plan may also yield :class:`Emit` to hand one result to the caller (used by ``list``, which streams).
Nothing here performs I/O.

Each request type states the type of its reply: :class:`Get` is a ``Request[StoredObject | None]``, a
:class:`Put` a ``Request[Written | PreconditionFailed]``, and so on. The parameter exists only for the
type checker; :func:`.plans.one`, :func:`.plans.two`, :func:`.plans.three` and :func:`.plans.all_of` carry it
to the replies. A bare ``Request`` (a shell's view) is one whose reply type is not known.
"""

from __future__ import annotations

import enum
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Generic, TypeGuard, TypeVar

from typing_extensions import TypeVar as DefaultedTypeVar

T = TypeVar("T")
R_co = DefaultedTypeVar("R_co", covariant=True, default=Any)


class Request(Generic[R_co]):
    """A request whose reply is an ``R_co`` (a type parameter only: the shells dispatch on the subclass)."""


@dataclass(frozen=True)
class Get(Request["StoredObject | None"]):
    key: str
    etag: str | None = None
    """The ETag a listing just showed for ``key``: the I/O shell may answer from its read cache
    when it holds ``key`` with exactly this ETag (the object has not changed since it was read)."""
    settled: bool = False
    """What ``key`` holds never changes once written (a large value at its channel's version: written create-only,
    offered again only as the same value): the I/O shell may answer from its read cache by key alone, and keeps what
    it reads. A saver with a lifecycle TTL never asks it (it dates its large values by the reply)."""


@dataclass(frozen=True)
class Overwrite:
    """Write whatever the key holds (no condition)."""


@dataclass(frozen=True)
class Create:
    """Create only (``If-None-Match: *``): the reply is :data:`PRECONDITION_FAILED` if the key exists."""


@dataclass(frozen=True)
class Update:
    """Replace only the object with this ETag (``If-Match``); :data:`PRECONDITION_FAILED` otherwise (or if missing)."""

    etag: str


PutMode = Overwrite | Create | Update
"""What a :class:`Put` may replace, as object_store's ``PutMode``: one of three, never two conditions at once."""
OVERWRITE: Final = Overwrite()
CREATE: Final = Create()


@dataclass(frozen=True)
class Put(Request["Written | PreconditionFailed"]):
    key: str
    body: bytes = field(repr=False)
    mode: PutMode = OVERWRITE
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
class DeleteObjects(Request[None]):
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
class EnsureExpiryRule(Request["ExpiryRule | None"]):
    """Install (or update) a bucket lifecycle rule expiring objects under ``prefix`` tagged ``tag`` (``key=value``)
    after ``days``; the reply is the rule as the server reports it afterwards (``None``: it kept none by that id).
    Some servers store a rule other than the one sent (Garage drops tag filters): the plan compares."""

    rule_id: str
    prefix: str
    days: int
    tag: str


@dataclass(frozen=True)
class RemoveExpiryRule(Request[None]):
    """Remove the bucket lifecycle rule ``rule_id``, keeping every other rule (none of that id: nothing to do)."""

    rule_id: str


@dataclass(frozen=True)
class ProbeConditionalWrites(Request[None]):
    """Not sent: the shell answers it once the server's conditional writes are known to be enforced (probed once
    per process and endpoint, :mod:`.._transport.probe`), or raises :class:`~.errors.ConditionalWritesUnsupportedError`.
    The shell does the same before the first write of every saver and store; ``setup()`` asks for it by name, so
    that nothing (a lifecycle rule) is installed on a server it would refuse."""


@dataclass(frozen=True)
class RequestKind:
    """What the shells need to know of one request type: the catalogue entry of :data:`REQUEST_KINDS`."""

    operation: str
    """The S3 call it is: what errors name, whichever transport sent it, and what the default transport asks the
    client's watch about."""
    reads: bool
    """It changes nothing: a deadline cuts it at once, and abandoning it changes nothing either."""
    after_probe: bool
    """It must wait for the conditional-write probe's verdict (an object write, the lifecycle rule, setup's ask)."""
    direct: bool = False
    """The direct transport sends it itself (``_transport/direct.py``); every other goes through boto3."""


REQUEST_KINDS: Mapping[type[Request[Any]], RequestKind] = {
    Get: RequestKind("GetObject", reads=True, after_probe=False, direct=True),
    Put: RequestKind("PutObject", reads=False, after_probe=True, direct=True),
    ListKeys: RequestKind("ListObjectsV2", reads=True, after_probe=False, direct=True),
    DeleteObjects: RequestKind("DeleteObjects", reads=False, after_probe=True),
    DeleteIfMatch: RequestKind("DeleteObject", reads=False, after_probe=True),
    Copy: RequestKind("CopyObject", reads=False, after_probe=True),
    BucketExists: RequestKind("HeadBucket", reads=True, after_probe=False),
    CreateBucket: RequestKind("CreateBucket", reads=False, after_probe=False),
    EnsureExpiryRule: RequestKind("PutBucketLifecycleConfiguration", reads=False, after_probe=True),
    RemoveExpiryRule: RequestKind("PutBucketLifecycleConfiguration", reads=False, after_probe=False),
    ProbeConditionalWrites: RequestKind("(the conditional-write probe)", reads=False, after_probe=True),
}
"""Every request type and what it is (docs/design.md, "To add a request"). The tables that do something with each
type — the boto3 call (``_transport/bucket_io.py``), the in-memory bucket's answer (``_transport/memory_bucket.py``)
— are keyed by the same types, and ``tests/test_requests.py`` checks that each holds every type it must."""


def request_kind(request: Request[Any]) -> RequestKind:
    return REQUEST_KINDS[type(request)]


def sent_directly(request: Request[Any]) -> TypeGuard[Get | Put | ListKeys]:
    """Whether the direct transport sends this request itself (:attr:`RequestKind.direct`)."""
    return REQUEST_KINDS[type(request)].direct


def named_in_errors(request: Request[Any], bucket: str) -> str:
    """A request as both transports' errors name it: its S3 call and its key (or prefix, or else the bucket)."""
    where = getattr(request, "key", None) or getattr(request, "prefix", None) or bucket
    return f"{request_kind(request).operation} {where!r}"


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

    ``refused``: the server answered 412 Precondition Failed. ``missing``: it answered 404. A missing key
    under ``If-Match`` is 404 on AWS and moto and 412 on SeaweedFS; both mean the object is not the one
    expected. Not a 409 ConditionalRequestConflict: AWS documents it as "a concurrent write raced you, retry",
    so both transports send the same request again (:mod:`.._transport.retries`); it says nothing about the object.
    """
    return refused or (missing and isinstance(request.mode, Update))


def is_conditional(request: Request[Any]) -> bool:
    """Whether a request carries ``If-None-Match`` or ``If-Match``."""
    if isinstance(request, Put):
        return not isinstance(request.mode, Overwrite)
    return isinstance(request, DeleteIfMatch)


def describe_condition(request: Request[Any]) -> str:
    """A conditional request's condition as errors name it (``If-None-Match: *``, ``If-Match: "etag"``)."""
    if isinstance(request, Put) and isinstance(request.mode, Create):
        return "If-None-Match: *"
    if isinstance(request, Put) and isinstance(request.mode, Update):
        return f"If-Match: {request.mode.etag}"
    if isinstance(request, DeleteIfMatch):
        return f"If-Match: {request.etag}"
    return "no condition"


@dataclass(frozen=True)
class ExpiryRule:
    """Reply to :class:`EnsureExpiryRule`: the lifecycle rule as the server reports it."""

    prefix: str | None
    tags: tuple[tuple[str, str], ...]
    days: int | None
    answer: str
    """The rule as the server reported it, in a few words, for the error that refuses it."""

    def matches(self, request: EnsureExpiryRule) -> bool:
        """Whether the server kept the rule as it was sent: prefix, tag filter and days."""
        key, _, value = request.tag.partition("=")
        return self.prefix == request.prefix and (key, value) in self.tags and self.days == request.days


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
