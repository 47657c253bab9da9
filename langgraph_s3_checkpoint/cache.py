"""``S3Cache``: LangGraph's node cache (``BaseCache``) on the saver's bucket, so saver, store and cache need no
database.

A node compiled with a ``CachePolicy`` asks the cache, before each superstep, for the writes it produced the last
time it ran on the same input, and stores its writes after it ran. Workers that share only a bucket then share
those results: a node one of them computed is served to the others.

Same design as the saver and the store: every operation is a *plan* (a generator yielding batches of independent
requests, :mod:`._protocol.requests`) in :class:`CachePlans`, driven by ``BucketIO.run`` (the sync methods) or
``BucketIO.arun`` (the async ones) over the shared I/O shell. Layout under ``{prefix}/cache/`` (see
:func:`._protocol.keys.namespace_segment` and :func:`._protocol.keys.escape`)::

    cache/{N}/{K}     one entry: its namespace and key, serde(value), its TTL, the writer's clock
    cache-ttl/...     expiry markers of the entries with a TTL, and ``cache-ttl-filed`` (:mod:`._protocol.expiry`)

Neither the saver (``threads/``, ``runs/``, ``_setup/``) nor the store (``store/``) reads these, and the cache's
plans read nothing else (its optional ``setup`` is the saver's). A key under ``cache/`` that is not ``{N}/{K}`` with
both segments of the cache's making is foreign: counted by ``langgraph-s3 cache ls``, never decoded, never deleted.
See docs/design.md, "Node cache".
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from langgraph.cache.base import BaseCache, FullKey, Namespace, ValueT
from langgraph.checkpoint.serde.base import SerializerProtocol, maybe_add_typed_methods

from ._protocol import expiry
from ._protocol.checkpoint_plans import CheckpointPlans
from ._protocol.codec import Codec
from ._protocol.keys import (
    EXPIRY_TAG,
    MAX_KEY_BYTES,
    MAX_SEGMENT,
    Layout,
    escape,
    is_namespace_segment,
    is_own_segment,
    key_bytes,
    namespace_of_segment,
    namespace_segment,
)
from ._protocol.plans import all_of, deletes, one
from ._protocol.requests import Get, ListKeys, Page, Plan, Put, StoredObject
from ._transport.bucket_io import BucketIO, ClosesAtBlockEnd
from .errors import (
    CorruptObjectError,
    InvalidArgumentTypeError,
    InvalidConfigError,
    NewerFormatError,
)
from .options import (
    CACHE,
    check_encryption,
    check_extra_headers,
    check_flags,
    check_location,
    check_seconds,
    check_serde,
    check_whole_numbers,
    parse_url,
)
from .saver import (
    DEFAULT_COMPRESS_THRESHOLD,
    DEFAULT_OPERATION_TIMEOUT,
    make_bucket_io,
    make_client,
)

logger = logging.getLogger(__name__)
T = TypeVar("T")

CACHE_FOLDER = "cache/"
"""The node cache's folder under the prefix."""
MAX_ENTRY_BYTES = 5 * 1024**3
"""The largest object one PutObject may carry (S3's limit): a larger entry is refused before it is sent."""
DATE_RESOLUTION = timedelta(seconds=1)
"""How precisely a server dates objects and replies: HTTP's ``Last-Modified`` and ``Date`` have whole seconds."""
_LONGEST_ENTRY_KEY = len(CACHE_FOLDER) + MAX_SEGMENT + 1 + MAX_SEGMENT
"""Bytes of the longest key below the prefix: both segments are ASCII and at most ``MAX_SEGMENT`` long."""


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


# ------------------------------------------------------------------------------------------------
# Layout
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CacheLayout:
    """Keys of the node cache under one bucket prefix. Pure."""

    prefix: str = ""
    root: str = field(init=False)
    """``{prefix}cache/``: every entry."""
    markers: expiry.Markers = field(init=False)
    """The entries' expiry markers, ``{prefix}cache-ttl/`` and ``{prefix}cache-ttl-filed``: beside ``cache/``, so
    that no reader, listing or tool of the cache meets them."""

    def __post_init__(self) -> None:
        prefix = Layout(self.prefix).prefix
        object.__setattr__(self, "root", f"{prefix}{CACHE_FOLDER}")
        object.__setattr__(self, "markers", expiry.Markers(f"{prefix}cache-", self.root))

    def folder(self, namespace: Sequence[str]) -> str:
        """Every entry of ``namespace`` (and nothing of another namespace: segments end at ``/``)."""
        return f"{self.root}{namespace_segment(namespace)}/"

    def entry(self, namespace: Sequence[str], key: str) -> str:
        return f"{self.folder(namespace)}{escape(key)}"

    def is_entry(self, key: str) -> bool:
        """Whether a listed key is one of the cache's entries: ``{N}/{K}`` under the root, both segments of the
        cache's making. Folder markers and other tools' objects are foreign."""
        parts = key[len(self.root) :].split("/") if key.startswith(self.root) else []
        return len(parts) == 2 and is_namespace_segment(parts[0]) and is_own_segment(parts[1])

    def namespace_segment_of(self, entry_key: str) -> str:
        return entry_key[len(self.root) :].split("/", 1)[0]


# ------------------------------------------------------------------------------------------------
# Entries
# ------------------------------------------------------------------------------------------------
def _text(value: str) -> bytes:
    """Namespaces and keys are any strings, lone surrogates included: kept as their UTF-8 bytes."""
    return value.encode("utf-8", "surrogatepass")


@dataclass(frozen=True)
class Frame:
    """What an entry says of itself, its value left encoded."""

    namespace: tuple[str, ...]
    key: str
    ttl: float | None
    written: float
    """The writer's clock when it made the entry (POSIX seconds)."""
    value: Any


def age_of(obj: StoredObject, written: float, now: datetime) -> float:
    """How long ago an entry was written, in seconds, judged by the server's clock wherever it says something.

    The server dates the entry (``Last-Modified``) and its reply (``Date``) on one clock, so their difference is
    the entry's age whatever the writer's and the reader's clocks say; but in whole seconds, so the true age lies
    within :data:`DATE_RESOLUTION` of it. Within that window the clients' clocks decide (``now`` minus the
    writer's ``written``): exact when they agree, and a clock that is off by any amount moves the verdict by at
    most a second. Without both dates (a server or proxy that drops them) the clients' clocks alone decide."""
    by_clients = now.timestamp() - written
    if obj.modified is None or obj.served is None:
        return by_clients
    by_server = obj.served - obj.modified
    earliest = max(by_server - DATE_RESOLUTION, timedelta(0)).total_seconds()
    latest = (by_server + DATE_RESOLUTION).total_seconds()
    return min(max(by_clients, earliest), latest)


def expired(ttl: float | None, age: float) -> bool:
    """InMemoryCache's rule: an entry with a TTL is served while younger than it; ``None`` never expires."""
    return ttl is not None and age >= ttl


def marker_time(written: float, ttl: float | None) -> float | None:
    """When an entry expires by its writer's clock (``written`` + ``ttl``): the time its expiry marker is filed
    under; ``None`` for one that never expires (no TTL, or an infinite one). A TTL of minus infinity, or one
    reaching before the epoch, is filed under the epoch."""
    if ttl is None or ttl == math.inf:
        return None
    return written + max(ttl, -written)


@dataclass(frozen=True)
class EntryExpiry:
    """What the sweep reads of one version of an entry (:class:`._protocol.expiry.Judged`): its frame, not its value."""

    key: str
    etag: str
    expires: float | None
    """Its marker's time (:func:`marker_time`); an entry filed under a minute before it truly expires (a writer
    whose clock is behind) stays filed there, and is read by each sweep until it has."""
    ttl: float | None
    age: float
    """Its age at the sweep's ``now``, as reads judge it (:func:`age_of`: the server's clock)."""
    put_derived: bool = True
    """Every ``set`` with a TTL files its entry's marker first, and no read moves an entry's expiry."""

    def expired(self, now: datetime) -> bool:
        """Whether it has expired at ``now``, the sweep's clock that ``age`` was judged at."""
        return expired(self.ttl, self.age)


@dataclass(frozen=True)
class CacheCodec:
    """Bytes of one entry, framed like every object of the package (``codec.Codec``)."""

    codec: Codec

    def encode(self, namespace: tuple[str, ...], key: str, value: Any, ttl: float | None, written: float) -> bytes:
        return self.codec._frame(
            {
                "ns": [_text(label) for label in namespace],
                "key": _text(key),
                "value": self.codec.dump(f"cache value {namespace!r}/{key!r}", value),
                "ttl": ttl,
                "written": written,
            }
        )

    def decode(self, object_key: str, body: bytes) -> Frame:
        """The entry's frame; :class:`CorruptObjectError` (or :class:`NewerFormatError`) if it is not one."""
        frame = self.codec._unframe(object_key, body)
        try:
            ttl = frame["ttl"]
            return Frame(
                namespace=tuple(bytes(label).decode("utf-8", "surrogatepass") for label in frame["ns"]),
                key=bytes(frame["key"]).decode("utf-8", "surrogatepass"),
                ttl=None if ttl is None else float(ttl),
                written=float(frame["written"]),
                value=frame["value"],
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptObjectError(object_key, f"not a node cache entry ({exc!r})") from None

    def load(self, object_key: str, frame: Frame) -> Any:
        return self.codec.load(object_key, frame.value)


# ------------------------------------------------------------------------------------------------
# Plans
# ------------------------------------------------------------------------------------------------
@dataclass
class CacheSweep:
    """What a sweep found and did."""

    dry_run: bool
    scanned: int = 0
    """Entries read: those whose expiry marker came due (every entry, in a ``full`` or first sweep)."""
    expired: int = 0
    deleted: int = 0
    """Expired entries deleted (one rewritten since it was read stays: its delete is refused)."""
    foreign: int = 0
    """Objects under ``cache/`` that are not entries: left alone (counted by a sweep that lists every entry)."""
    unreadable: list[str] = field(default_factory=list)
    """Entries read that cannot be decoded (damaged, foreign, newer format): left alone, each logged, and read
    again a day later."""


@dataclass
class CachedNamespace:
    """One namespace of the cache as ``langgraph-s3 cache ls`` shows it."""

    segment: str
    namespace: tuple[str, ...] | None
    """``None`` when no entry could be read to name it (a digest segment whose entries are all damaged)."""
    entries: int = 0
    bytes: int = 0
    last_modified: datetime | None = None
    first_key: str = ""


@dataclass(frozen=True)
class CachePlans:
    """Plans for every cache operation over one bucket prefix."""

    layout: CacheLayout
    codec: CacheCodec
    now: Callable[[], datetime] = _utc_now
    """This machine's clock (see :func:`age_of` for how little it decides)."""
    sweep_state: expiry.SweepState = field(default_factory=expiry.SweepState)
    """What the sweeps of this cache remember (:mod:`._protocol.expiry`)."""

    @property
    def expiring(self) -> expiry.Expiring[EntryExpiry]:
        """What the expiry markers' plans need of the cache (:mod:`._protocol.expiry`)."""
        return expiry.Expiring(
            self.layout.markers, self.sweep_state, self.codec.codec, self.now, self.layout.is_entry, self._peek
        )

    def _peek(self, key: str, obj: StoredObject, now: datetime) -> EntryExpiry:
        frame = self.codec.decode(key, obj.body)
        return EntryExpiry(
            key, obj.etag, marker_time(frame.written, frame.ttl), frame.ttl, age_of(obj, frame.written, now)
        )

    def get(self, keys: Sequence[FullKey]) -> Plan[dict[FullKey, Any]]:
        """One GET per distinct key, all in one batch; an expired, missing or unreadable entry is a miss."""
        wanted: dict[str, FullKey] = {}
        for namespace, key in keys:
            full = (_namespace(namespace), _key(key))
            wanted.setdefault(self.layout.entry(*full), full)
        if not wanted:
            return {}
        objs = yield from all_of([Get(object_key) for object_key in wanted])
        now = self.now()
        found: dict[FullKey, Any] = {}
        for (object_key, full), obj in zip(wanted.items(), objs, strict=True):
            if obj is not None:
                hit, value = self._served(object_key, full, obj, now)
                if hit:
                    found[full] = value
        return found

    def _served(self, object_key: str, full: FullKey, obj: StoredObject, now: datetime) -> tuple[bool, Any]:
        """Whether the entry is a hit, and its value. A damaged entry, one of another format or another key, or
        one this serializer cannot decode (a wrong key) is a miss and a warning: the node runs again and its
        writes replace the entry."""
        try:
            frame = self.codec.decode(object_key, obj.body)
            if (frame.namespace, frame.key) != full:
                raise CorruptObjectError(object_key, f"holds the entry of {(frame.namespace, frame.key)!r}")
            if expired(frame.ttl, age_of(obj, frame.written, now)):
                return False, None
            return True, self.codec.load(object_key, frame)
        except (CorruptObjectError, NewerFormatError) as exc:
            logger.warning("node cache entry taken as a miss: %s", exc)
            return False, None

    def set(self, pairs: Mapping[FullKey, tuple[Any, int | float | None]]) -> Plan[None]:
        """One unconditional PUT per entry, all in one batch: the last writer wins, and a reader sees one whole
        entry (S3 replaces an object at once). Entries with a TTL have their expiry markers filed first, in a
        batch before (:mod:`._protocol.expiry`): an entry never exists without one, so a sweep finds it without reading
        the others."""
        written = self.now().timestamp()
        puts = []
        expiries = []
        for (namespace, key), (value, ttl) in pairs.items():
            full = (_namespace(namespace), _key(key))
            seconds = _ttl(ttl)
            body = self.codec.encode(*full, value, seconds, written)
            if len(body) > MAX_ENTRY_BYTES:
                raise InvalidConfigError(
                    f"the cache entry for {full!r} is {len(body)} bytes serialized; one S3 object holds at most "
                    f"{MAX_ENTRY_BYTES} bytes. Nothing was cached: cache a smaller value (or no value: no cache_policy)"
                )
            puts.append(Put(self.layout.entry(*full), body))
            if (expires := marker_time(written, seconds)) is not None:
                expiries.append((puts[-1].key, expires))
        yield from expiry.file_markers(self.expiring, expiries)
        if puts:
            yield from all_of(puts)

    def clear(self, namespaces: Sequence[Namespace] | None, *, dry_run: bool = False) -> Plan[int]:
        """Delete every entry of ``namespaces`` (``None``: of every namespace), listing only their folders, all
        namespaces' pages in one batch and their deletes in the next; returns how many entries there were."""
        if namespaces is None:
            folders = [self.layout.root]
        else:
            folders = sorted({self.layout.folder(_namespace(namespace)) for namespace in namespaces})
        pending: dict[str, str | None] = dict.fromkeys(folders)
        cleared = 0
        while pending:
            pages = yield from all_of([ListKeys(folder, token=token) for folder, token in pending.items()])
            doomed = [key for page in pages for key in page.keys if self.layout.is_entry(key)]
            cleared += len(doomed)
            if doomed and not dry_run:
                yield deletes(doomed)
            pending = {folder: page.token for folder, page in zip(pending, pages, strict=True) if page.token}
        return cleared

    def sweep(self, *, dry_run: bool = False, full: bool = False) -> Plan[CacheSweep]:
        """Delete every expired entry whose expiry marker came due (``DeleteIfMatch``: one rewritten since it was
        read stays), judged by its frame alone (no key is needed for encrypted values). Reads every entry when the
        cache was never filed (entries of releases before markers) or ``full``. See :mod:`._protocol.expiry`."""
        swept = yield from expiry.sweep(self.expiring, full, dry_run=dry_run)
        return CacheSweep(dry_run, swept.read, swept.expired, swept.deleted, swept.skipped, swept.damaged)

    def namespaces(self) -> Plan[tuple[list[CachedNamespace], int]]:
        """Every namespace holding entries, with their count, bytes and newest write, and how many foreign objects
        lie under ``cache/``. Lists the whole cache; reads one entry of each namespace whose segment does not
        spell its labels (a digest)."""
        found: dict[str, CachedNamespace] = {}
        foreign = 0
        token: str | None = None
        while True:
            page: Page = yield from one(ListKeys(self.layout.root, token=token))
            for i, key in enumerate(page.keys):
                if not self.layout.is_entry(key):
                    foreign += 1
                    continue
                segment = self.layout.namespace_segment_of(key)
                ns = found.setdefault(segment, CachedNamespace(segment, namespace_of_segment(segment), first_key=key))
                ns.entries += 1
                ns.bytes += page.sizes[i] if i < len(page.sizes) else 0
                modified = page.modified[i] if i < len(page.modified) else None
                if modified is not None and (ns.last_modified is None or modified > ns.last_modified):
                    ns.last_modified = modified
            if page.token is None:
                break
            token = page.token
        unnamed = [ns for ns in found.values() if ns.namespace is None]
        objs = yield from all_of([Get(ns.first_key) for ns in unnamed])
        for ns, obj in zip(unnamed, objs, strict=True):
            ns.namespace = self._namespace_in(ns.first_key, obj)
        return sorted(found.values(), key=lambda ns: (ns.namespace is None, ns.namespace or (), ns.segment)), foreign

    def _namespace_in(self, key: str, obj: StoredObject | None) -> tuple[str, ...] | None:
        if obj is None:
            return None
        try:
            return self.codec.decode(key, obj.body).namespace
        except (CorruptObjectError, NewerFormatError):
            return None


def _namespace(namespace: Any) -> tuple[str, ...]:
    """A namespace as a tuple of labels. A ``str`` is refused: it would be taken letter by letter."""
    if isinstance(namespace, str | bytes) or not isinstance(namespace, Sequence):
        raise InvalidArgumentTypeError(f"a cache namespace is a tuple of strings, got {namespace!r}")
    labels = tuple(namespace)
    if not all(isinstance(label, str) for label in labels):
        raise InvalidArgumentTypeError(f"a cache namespace is a tuple of strings, got {namespace!r}")
    return labels


def _key(key: Any) -> str:
    if not isinstance(key, str):
        raise InvalidArgumentTypeError(f"a cache key is a string, got {key!r}")
    return key


def _ttl(ttl: Any) -> float | None:
    """A TTL in seconds (any real number; zero or less expires at once, as in InMemoryCache), or ``None``."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or math.isnan(ttl):
        raise InvalidArgumentTypeError(f"a cache TTL is a number of seconds or None, got {ttl!r}")
    return float(ttl)


# ------------------------------------------------------------------------------------------------
# The class
# ------------------------------------------------------------------------------------------------
class S3Cache(ClosesAtBlockEnd, BaseCache[ValueT]):
    """LangGraph's node cache in an S3 bucket, beside the saver's threads and the store's items.

    ```python
    with S3Cache.from_conn_string("s3://agent-state/prod") as cache:
        graph = builder.compile(checkpointer=saver, store=store, cache=cache)
    ```
    One class serves the sync and the async graph methods (``get``/``aget``, ``set``/``aset``,
    ``clear``/``aclear``) and both ``with`` and ``async with``. Options are the saver's (``from_conn_string``
    takes the same URL; ``ttl_days`` tags entries for the lifecycle rule ``setup()`` installs). ``now`` is this
    machine's clock, for tests; expiry is judged by the server's clock (:func:`age_of`).

    Args:
        bucket: The bucket's name.
        prefix: The key prefix (the saver's, if they share one: entries live under ``cache/``).
        client: A boto3 S3 client (or a :class:`~.memory.MemoryBucket`); by default one the cache makes from
            ``client_options``.
        serde: The serializer of cached values; by default LangGraph's.
        compress_threshold: As the saver's.
        max_concurrency: As the saver's.
        create_bucket: As the saver's.
        require_conditional_writes: Refuse a server that does not enforce conditional writes, as the saver does.
            Off by default: the cache needs none (``set`` is a plain PUT, the last writer wins), and on such a
            server it sends none (its sweep checks each conditional delete with a LIST first, so a sweep racing a
            ``set`` may delete the entry just written: a miss, never a wrong or expired value).
        server_side_encryption: As the saver's.
        sse_kms_key_id: As the saver's.
        sse_customer_key: As the saver's.
        ttl_days: As the saver's: tag entries for the lifecycle rule.
        transport: As the saver's.
        operation_timeout: Deadline in seconds of ``get`` and ``set`` (``clear`` and sweeps are bounded per
            request only).
        extra_headers: As the saver's.
        now: This machine's clock, for tests.
        **client_options: Settings of the client the cache makes (``endpoint_url``, ``region_name`` ...).

    Raises:
        InvalidConfigError: An option is malformed or out of range, the prefix is too long for entries' keys, or
            client options were given beside ``client=``.

    Errors every call may raise, besides those its docstring names (all are :class:`S3CheckpointError`):
    :class:`S3RequestError` (the endpoint is unreachable, silent or failing after retries, or the call passed
    ``operation_timeout``), :class:`S3AccessError`, :class:`BucketNotFoundError`,
    :class:`ConditionalWritesUnsupportedError` (at the first write, only with ``require_conditional_writes=True``)
    and :class:`SaverMisuseError` (a call on a closed cache).
    """

    def __init__(
        self,
        *,
        bucket: str,
        prefix: str = "",
        client: Any = None,
        serde: SerializerProtocol | None = None,
        compress_threshold: int | None = DEFAULT_COMPRESS_THRESHOLD,
        max_concurrency: int = 32,
        create_bucket: bool = False,
        require_conditional_writes: bool = False,
        server_side_encryption: str | None = None,
        sse_kms_key_id: str | None = None,
        sse_customer_key: str | None = None,
        ttl_days: int | None = None,
        transport: str = "auto",
        operation_timeout: float | None = DEFAULT_OPERATION_TIMEOUT,
        extra_headers: Mapping[str, str] | str | None = None,
        now: Callable[[], datetime] | None = None,
        **client_options: Any,
    ) -> None:
        check_serde(serde)
        super().__init__(serde=serde)
        self.serde = maybe_add_typed_methods(self.serde)
        prefix = check_location(bucket, prefix)
        check_whole_numbers(max_concurrency=max_concurrency, compress_threshold=compress_threshold, ttl_days=ttl_days)
        check_flags(create_bucket=create_bucket, require_conditional_writes=require_conditional_writes)
        check_encryption(server_side_encryption, sse_kms_key_id, sse_customer_key)
        layout = CacheLayout(prefix)
        if key_bytes(layout.root) - len(CACHE_FOLDER) + _LONGEST_ENTRY_KEY > MAX_KEY_BYTES:
            raise InvalidConfigError(
                f"prefix {prefix!r} is too long for the node cache: its entries' keys could pass S3's "
                f"{MAX_KEY_BYTES} bytes. Use a prefix of at most {MAX_KEY_BYTES - _LONGEST_ENTRY_KEY - 1} bytes"
            )
        deadline = None if operation_timeout is None else check_seconds("operation_timeout", operation_timeout)
        if client is None:
            client_options.setdefault("max_pool_connections", max(64, max_concurrency * 2))
            client = make_client(**client_options)
        elif client_options:
            raise InvalidConfigError(
                f"client options {sorted(client_options)} only apply when the cache creates the client; set them "
                "on your client (botocore.config.Config) instead"
            )
        self.bucket = bucket
        self.prefix = prefix
        self.client = client
        self.create_bucket = create_bucket
        self.require_conditional_writes = require_conditional_writes
        self.ttl_days = ttl_days
        self._bucket_io = make_bucket_io(
            client,
            bucket,
            prefix=prefix,
            require_conditional_writes=require_conditional_writes,
            extra_headers=check_extra_headers(extra_headers),
            max_concurrency=max_concurrency,
            server_side_encryption=server_side_encryption,
            sse_kms_key_id=sse_kms_key_id,
            sse_customer_key=sse_customer_key,
            transport=transport,
            expiry_tag=EXPIRY_TAG if ttl_days else None,
            deadline=deadline,
            native_async=True,  # the async methods send from the loop with the direct transport, as the store's
            serves="cache",
        )
        self._codec = Codec(self.serde, compress_threshold=compress_threshold)
        self._plans = CachePlans(layout, CacheCodec(self._codec), now or _utc_now)

    @classmethod
    def from_conn_string(cls, url: str, **kwargs: Any) -> S3Cache[Any]:
        """A cache at a location URL, as :meth:`.S3Saver.from_conn_string`: use it in ``with`` or ``async with``,
        which close it at the block's end, or as it is, and call :meth:`close` when done.

        Args:
            url: ``s3://bucket/prefix?option=value&...`` (the saver's URL; options only the saver or the store use
                are ignored).
            **kwargs: Options that override the URL's.

        Returns:
            The cache.

        Raises:
            InvalidConfigError: The URL is not ``s3://bucket/...``, or an option is unknown or malformed.
        """
        bucket, prefix, options = parse_url(url, used_by=CACHE)
        options.update(kwargs)
        return cls(bucket=bucket, prefix=prefix, **options)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(bucket={self.bucket!r}, prefix={self.prefix!r})"

    @property
    def plans(self) -> CachePlans:
        """The cache's plans: the handle for tools (the CLI), which run them through :attr:`bucket_io`."""
        return self._plans

    @property
    def bucket_io(self) -> BucketIO:
        """The I/O shell that runs this cache's plans."""
        return self._bucket_io

    def close(self) -> None:
        """Release the worker threads and connections. Idempotent; every later call raises
        :class:`SaverMisuseError` naming it (``with``/``async with`` blocks end with this)."""
        self._bucket_io.close()

    # -- drivers: get and set are held to operation_timeout; clear and sweep walk a whole folder ------------
    def _run(self, what: str, plan: Plan[T], *, bounded: bool = True) -> T:
        self._bucket_io.check_open(what)
        return self._bucket_io.run(plan, bounded=bounded)

    async def _arun(self, what: str, plan: Plan[T], *, bounded: bool = True) -> T:
        self._bucket_io.check_open(what)
        return await self._bucket_io.arun(plan, bounded=bounded)

    def _setup_plan(self) -> Plan[None]:
        core = CheckpointPlans(
            layout=Layout(self.prefix),
            codec=self._codec,
            ttl=timedelta(days=self.ttl_days) if self.ttl_days else None,
        )
        yield from core.setup(create_bucket=self.create_bucket, bucket=self.bucket)
        yield from expiry.file_if_empty(self._plans.expiring)  # an empty cache's first sweep need not list it all

    # -- BaseCache ------------------------------------------------------------------------------------------
    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        """The cached values of ``keys``, read in one round trip.

        An expired, missing or unreadable entry (damaged, another format, a serializer without its key) is a miss;
        an unreadable one is also a warning on the ``langgraph_s3_checkpoint.cache`` logger.

        Args:
            keys: ``(namespace, key)`` pairs.

        Returns:
            The values found, by key.

        Raises:
            InvalidArgumentTypeError: A namespace is not a tuple of strings, or a key is not a string.
            S3CheckpointError: An error every call may raise (see the class docstring).
        """
        return self._run("get", self._plans.get(keys))

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, ValueT]:
        """:meth:`get`, awaited: same arguments, result and errors."""
        return await self._arun("aget", self._plans.get(keys))

    def set(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        """Store values, one PUT each, in one round trip: the last writer wins, and readers see whole entries.

        Args:
            pairs: ``(namespace, key)`` -> ``(value, ttl)``, the TTL in seconds (``None``: never expires).

        Raises:
            InvalidArgumentTypeError: A namespace, key or TTL is of the wrong type.
            InvalidConfigError: An entry would be larger than one S3 object holds; nothing was cached.
            SerializationError: A value cannot be serialized.
            S3CheckpointError: An error every call may raise (see the class docstring).
        """
        self._run("set", self._plans.set(pairs))

    async def aset(self, pairs: Mapping[FullKey, tuple[ValueT, int | None]]) -> None:
        """:meth:`set`, awaited: same arguments and errors."""
        await self._arun("aset", self._plans.set(pairs))

    def clear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        """Delete the entries of some namespaces, or of the whole cache.

        Args:
            namespaces: The namespaces to clear; ``None``: every one.

        Raises:
            InvalidArgumentTypeError: A namespace is not a tuple of strings.
            S3CheckpointError: An error every call may raise (see the class docstring).
        """
        self._run("clear", self._plans.clear(namespaces), bounded=False)

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        """:meth:`clear`, awaited: same arguments and errors."""
        await self._arun("aclear", self._plans.clear(namespaces), bounded=False)

    # -- the rest of the API ---------------------------------------------------------------------------------
    def setup(self) -> None:
        """Check the bucket (creating it with ``create_bucket=True``) as the saver's ``setup`` does; with
        ``ttl_days``, install the lifecycle rule that expires tagged objects under the prefix. Optional: the cache
        works without it.

        Raises:
            BucketNotFoundError: The bucket does not exist and ``create_bucket`` is not set.
            ConditionalWritesUnsupportedError: The server does not enforce conditional writes and
                ``require_conditional_writes=True``.
            InvalidConfigError: The server did not keep the lifecycle rule for ``ttl_days`` as sent.
            S3CheckpointError: An error every call may raise (see the class docstring).
        """
        self._run("setup", self._setup_plan())

    async def asetup(self) -> None:
        """:meth:`setup`, awaited: same effect and errors."""
        await self._arun("asetup", self._setup_plan())

    def sweep(self, *, dry_run: bool = False, full: bool = False) -> CacheSweep:
        """Delete every expired entry now (reads never return one anyway: a sweep only reclaims space).

        Reads the entries whose expiry marker came due, not the others; an entry rewritten since it was read stays,
        and one that cannot be read is left and listed in the result.

        Args:
            dry_run: Only count what would be deleted.
            full: Read every entry, not only those whose marker came due (after processes of a release before
                expiry markers wrote entries while this one already swept).

        Returns:
            What the sweep read, found expired, deleted and left.

        Raises:
            S3CheckpointError: An error every call may raise (see the class docstring).
        """
        return self._run("sweep", self._plans.sweep(dry_run=dry_run, full=full), bounded=False)

    async def asweep(self, *, dry_run: bool = False, full: bool = False) -> CacheSweep:
        """:meth:`sweep`, awaited: same arguments, result and errors."""
        return await self._arun("asweep", self._plans.sweep(dry_run=dry_run, full=full), bounded=False)


__all__ = ["CacheLayout", "CachePlans", "CacheSweep", "CachedNamespace", "S3Cache", "age_of"]
