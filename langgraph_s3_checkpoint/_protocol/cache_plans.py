"""The node cache's pure part: its layout, the bytes of an entry, and its plans (``get``, ``set``, ``clear``, the
sweep, the namespaces), driven by ``langgraph_s3_checkpoint.cache.S3Cache`` through the I/O shell. Layout under
``{prefix}/cache/`` (see :func:`.keys.namespace_segment` and :func:`.keys.escape`)::

    cache/{N}/{K}     one entry: its namespace and key, serde(value), its TTL, the writer's clock
    cache-ttl/...     expiry markers of the entries with a TTL, and ``cache-ttl-filed`` (:mod:`.expiry`)

Neither the saver (``threads/``, ``runs/``, ``_setup/``) nor the store (``store/``) reads these, and the cache's
plans read nothing else. A key under ``cache/`` that is not ``{N}/{K}`` with both segments of the cache's making is
foreign: counted by ``langgraph-s3 cache ls``, never decoded, never deleted. See docs/design.md, "Node cache".
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from langgraph.cache.base import FullKey, Namespace

from ..errors import (
    CorruptObjectError,
    InvalidArgumentTypeError,
    InvalidConfigError,
    NewerFormatError,
)
from . import expiry
from .codec import Codec
from .keys import (
    MAX_SEGMENT,
    Layout,
    escape,
    is_namespace_segment,
    is_own_segment,
    namespace_of_segment,
    namespace_segment,
)
from .plans import all_of, deletes, one
from .requests import Get, ListKeys, Page, Plan, Put, StoredObject

logger = logging.getLogger("langgraph_s3_checkpoint.cache")
T = TypeVar("T")

CACHE_FOLDER = "cache/"
"""The node cache's folder under the prefix."""
MAX_ENTRY_BYTES = 5 * 1024**3
"""The largest object one PutObject may carry (S3's limit): a larger entry is refused before it is sent."""
DATE_RESOLUTION = timedelta(seconds=1)
"""How precisely a server dates objects and replies: HTTP's ``Last-Modified`` and ``Date`` have whole seconds."""
LONGEST_ENTRY_KEY = len(CACHE_FOLDER) + MAX_SEGMENT + 1 + MAX_SEGMENT
"""Bytes of the longest key below the prefix: both segments are ASCII and at most ``MAX_SEGMENT`` long."""


def utc_now() -> datetime:
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
    now: Callable[[], datetime] = utc_now
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
