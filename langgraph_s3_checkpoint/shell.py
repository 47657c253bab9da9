"""The I/O shell: performs the requests that plans ask for, with boto3, and drives plans to the end.

One :class:`BucketIO` serves both savers. ``execute`` turns one request into one boto3 call and maps the
reply (and the handful of S3 errors that carry meaning, such as 412) onto :mod:`requests` replies.
Independent requests of one batch run in parallel on a bounded thread pool: the sync driver waits for
them, the async driver awaits them, and that is the only difference between the two.

boto3 clients are thread-safe, so one client and one connection pool serve every thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from .errors import S3RequestError, error_for_code
from .requests import (
    PRECONDITION_FAILED,
    BucketExists,
    Copy,
    CreateBucket,
    Delete,
    DeleteIfMatch,
    Emit,
    EnsureExpiryRule,
    Get,
    ListKeys,
    Obj,
    Page,
    Plan,
    Put,
    Request,
    Stored,
)
from .transport import DirectTransport, list_arguments, put_arguments

T = TypeVar("T")


def same_etag(a: str, b: str) -> bool:
    """Listings and reads may quote ETags differently."""
    return a.strip('"') == b.strip('"')


class BodyCache:
    """Least-recently-used bodies of objects, valid only for the ETag they were read with.

    A plan offers an ETag only when a listing has just shown it, so a hit is an object that has not
    changed since (a rewritten object has a new ETag, a deleted one is not listed). Bounded in bytes.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, Obj] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: str, etag: str) -> Obj | None:
        with self._lock:
            obj = self._entries.get(key)
            if obj is None or not same_etag(obj.etag, etag):
                return None
            self._entries.move_to_end(key)
            return obj

    def offer(self, key: str, listed_etag: str, obj: Obj) -> None:
        """Keep ``obj`` if it is still the version the listing showed."""
        if same_etag(obj.etag, listed_etag):
            self.put(key, obj)

    def put(self, key: str, obj: Obj) -> None:
        size = len(obj.body)
        if size > self.max_bytes // 8:
            return  # one large object must not flush the cache
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= len(old.body)
            self._entries[key] = obj
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= len(evicted.body)


_MISSING_CODES = {"NoSuchKey", "404", "NotFound"}
_PRECONDITION_CODES = {"PreconditionFailed", "412", "ConditionalRequestConflict"}


def _served(reply: Mapping[str, Any]) -> datetime | None:
    """The server's clock at the time of a reply (its ``Date`` header)."""
    date = reply.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    return parsedate_to_datetime(date) if date else None


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


@dataclass
class BucketIO:
    """Executes requests against one bucket."""

    client: Any
    bucket: str
    max_concurrency: int = 32
    put_args: dict[str, Any] = field(default_factory=dict, repr=False)
    """Extra PutObject/CopyObject arguments, e.g. server-side encryption settings."""
    get_args: dict[str, Any] = field(default_factory=dict, repr=False)
    """Extra GetObject arguments (SSE-C needs the customer key on reads too)."""
    copy_args: dict[str, Any] = field(default_factory=dict, repr=False)
    """Extra CopyObject arguments (SSE-C needs the key for the source as well as the target)."""
    expiry_tag: str | None = None
    """``key=value`` object tag that the bucket's expiry rule matches (only with a TTL)."""
    direct: DirectTransport | None = field(default=None, repr=False)
    """Sends GET, PUT and LIST itself instead of through boto3 (``transport="direct"``)."""
    cache: BodyCache | None = field(default=None, repr=False)
    """Bodies of listed objects by key and ETag, so re-reading history costs its LIST only."""
    backend: Any = field(default=None, repr=False)
    """An in-process bucket (``memory.MemoryBucket``) that answers every request instead of boto3."""
    _pool: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)

    @property
    def pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.max_concurrency, thread_name_prefix="lgs3")
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self.direct is not None:
            self.direct.close()

    # -- one request ----------------------------------------------------------------------------
    def execute(self, request: Request) -> Any:
        cached = self._cached(request)
        return self._fetch(request) if cached is _MISS else cached

    def _cached(self, request: Request) -> Any:
        """The cached reply to a listed :class:`Get`, or ``_MISS``."""
        if isinstance(request, Get) and request.etag and self.cache is not None:
            obj = self.cache.get(request.key, request.etag)
            if obj is not None:
                return obj
        return _MISS

    def _fetch(self, request: Request) -> Any:
        reply = self._send(request)
        if self.cache is not None and isinstance(request, Get) and request.etag and reply is not None:
            self.cache.offer(request.key, request.etag, reply)
        return reply

    def _send(self, request: Request) -> Any:
        if self.backend is not None:
            return self.backend.execute(request)
        if self.direct is not None and isinstance(request, (Get, Put, ListKeys)):
            return self.direct.execute(request)
        try:
            return self._execute(request)
        except ClientError as exc:
            code = _code(exc)
            where = getattr(request, "key", None) or getattr(request, "prefix", None) or self.bucket
            error = error_for_code(code, self.bucket, f"{type(request).__name__} {where!r}", code or str(exc))
            raise error from (exc if isinstance(error, S3RequestError) else None)
        except (BotoConnectionError, HTTPClientError) as exc:
            # Connection refused, reset, closed or timed out on every retry.
            raise S3RequestError(f"Cannot reach the S3 endpoint: {exc}") from exc

    def _execute(self, request: Request) -> Any:
        c = self.client
        if isinstance(request, Get):
            try:
                reply = c.get_object(Bucket=self.bucket, Key=request.key, **self.get_args)
            except ClientError as exc:
                if _code(exc) in _MISSING_CODES:
                    return None
                raise
            return Obj(reply["Body"].read(), reply["ETag"], reply.get("LastModified"))
        if isinstance(request, Put):
            kwargs = put_arguments(request, self.put_args, self.expiry_tag)
            try:
                reply = c.put_object(Bucket=self.bucket, Key=request.key, Body=request.body, **kwargs)
            except ClientError as exc:
                code = _code(exc)
                # A missing key under If-Match is 404 on AWS and moto, 412 on SeaweedFS.
                if code in _PRECONDITION_CODES or (request.if_match is not None and code in _MISSING_CODES):
                    return PRECONDITION_FAILED
                raise
            return Stored(reply["ETag"])
        if isinstance(request, ListKeys):
            reply = c.list_objects_v2(Bucket=self.bucket, **list_arguments(request))
            contents = reply.get("Contents", ())
            return Page(
                keys=[o["Key"] for o in contents],
                prefixes=[p["Prefix"] for p in reply.get("CommonPrefixes", ())],
                token=reply.get("NextContinuationToken") if reply.get("IsTruncated") else None,
                modified=[o["LastModified"] for o in contents],
                etags=[o.get("ETag", "") for o in contents],
                sizes=[int(o.get("Size", 0)) for o in contents],
                served=_served(reply),
            )
        if isinstance(request, Delete):
            if not request.keys:
                return None
            reply = c.delete_objects(
                Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in request.keys], "Quiet": True}
            )
            errors = [e for e in reply.get("Errors", ()) if e.get("Code") not in _MISSING_CODES]
            if errors:
                first = errors[0]
                raise S3RequestError(
                    f"DeleteObjects failed for {len(errors)} key(s), e.g. {first.get('Key')!r}: {first.get('Code')}"
                )
            return None
        if isinstance(request, DeleteIfMatch):
            try:
                c.delete_object(Bucket=self.bucket, Key=request.key, IfMatch=request.etag)
            except ClientError as exc:
                if _code(exc) in _PRECONDITION_CODES:
                    return PRECONDITION_FAILED
                if _code(exc) in _MISSING_CODES:
                    return None
                raise
            return None
        if isinstance(request, Copy):
            try:
                c.copy_object(
                    Bucket=self.bucket,
                    Key=request.target,
                    CopySource={"Bucket": self.bucket, "Key": request.source},
                    **self.put_args,
                    **self.copy_args,
                )
            except ClientError as exc:
                if _code(exc) in _MISSING_CODES:
                    return None  # deleted since it was listed
                raise
            return None
        if isinstance(request, BucketExists):
            try:
                c.head_bucket(Bucket=self.bucket)
            except ClientError as exc:
                if _code(exc) in _MISSING_CODES | {"NoSuchBucket"}:
                    return False
                raise
            return True
        if isinstance(request, CreateBucket):
            c.create_bucket(Bucket=self.bucket)
            return None
        if isinstance(request, EnsureExpiryRule):
            return self._ensure_expiry_rule(request)
        raise TypeError(f"unknown request {request!r}")

    def _ensure_expiry_rule(self, request: EnsureExpiryRule) -> None:
        """Add or replace our rule, keeping every other lifecycle rule of the bucket."""
        try:
            rules = self.client.get_bucket_lifecycle_configuration(Bucket=self.bucket).get("Rules", [])
        except ClientError as exc:
            if _code(exc) != "NoSuchLifecycleConfiguration":
                raise
            rules = []
        tag_key, _, tag_value = (self.expiry_tag or "").partition("=")
        ours = {
            "ID": request.rule_id,
            "Status": "Enabled",
            "Filter": {"And": {"Prefix": request.prefix, "Tags": [{"Key": tag_key, "Value": tag_value}]}},
            "Expiration": {"Days": request.days},
        }
        rules = [r for r in rules if r.get("ID") != request.rule_id] + [ours]
        self.client.put_bucket_lifecycle_configuration(Bucket=self.bucket, LifecycleConfiguration={"Rules": rules})

    # -- drivers --------------------------------------------------------------------------------
    def _batch(self, requests: list[Request]) -> list[Any]:
        replies, missing = self._split(requests)
        if len(missing) == 1:
            return _fill(replies, [self._fetch(missing[0])])
        return _fill(replies, list(self.pool.map(self._fetch, missing)))

    async def _abatch(self, requests: list[Request]) -> list[Any]:
        replies, missing = self._split(requests)
        loop = asyncio.get_running_loop()
        fetched = await asyncio.gather(*(loop.run_in_executor(self.pool, self._fetch, r) for r in missing))
        return _fill(replies, fetched)

    def _split(self, requests: list[Request]) -> tuple[list[Any], list[Request]]:
        """Replies answered from the cache (``_MISS`` elsewhere), and the requests still to send."""
        replies = [self._cached(r) for r in requests]
        return replies, [r for r, reply in zip(requests, replies, strict=True) if reply is _MISS]

    def iterate(self, plan: Plan[Any]) -> Iterator[Any]:
        """Run a streaming plan, yielding what it emits."""
        reply: Any = None
        while (step := _advance(plan, reply)) is not _DONE:
            if isinstance(step, Emit):
                reply = None
                yield step.value
            else:
                reply = self._batch(step)

    async def aiterate(self, plan: Plan[Any]) -> AsyncIterator[Any]:
        """The same, awaiting each batch instead of blocking on it."""
        reply: Any = None
        while (step := _advance(plan, reply)) is not _DONE:
            if isinstance(step, Emit):
                reply = None
                yield step.value
            else:
                reply = await self._abatch(step)

    def run(self, plan: Plan[T]) -> T:
        """Run a plan to its result."""
        return _only_result(list(self.iterate(_result_of(plan))))

    async def arun(self, plan: Plan[T]) -> T:
        return _only_result([item async for item in self.aiterate(_result_of(plan))])


_DONE = object()
_MISS = object()


def _fill(replies: list[Any], fetched: list[Any]) -> list[Any]:
    """Put the fetched replies, in order, where the cache had none."""
    answers = iter(fetched)
    return [next(answers) if reply is _MISS else reply for reply in replies]


def _advance(plan: Plan[Any], reply: Any) -> Any:
    """The plan's next step, or ``_DONE``."""
    try:
        return plan.send(reply)
    except StopIteration:
        return _DONE


@dataclass(frozen=True)
class _Result:
    value: Any


def _result_of(plan: Plan[T]) -> Plan[None]:
    """Turn a plan's return value into its last emitted item, so one driver loop serves both uses."""
    value = yield from plan
    yield Emit(_Result(value))


def _only_result(items: list[Any]) -> Any:
    return items[-1].value
