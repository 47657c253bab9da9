"""``S3Store`` and ``AsyncS3Store``: LangGraph's long-term memory ``BaseStore`` on the saver's bucket.

Same design as the saver: every operation is a *plan* (a generator yielding batches of independent
requests, see :mod:`requests`), written once in :class:`StoreCore` and driven by ``BucketIO.run`` (sync)
or ``BucketIO.arun`` (async). Embeddings are computed by the store classes before a plan starts (with
``embed_documents`` or ``aembed_documents``), so plans stay pure.

Layout under ``{prefix}/store/`` (labels and keys escaped by :func:`keys.escape`; segments longer than
180 characters become ``~`` + SHA-256 and the real label is kept in a ``names/`` object)::

    store/ns/{l1}/.../{ln}/~/{key}       one item (value, timestamps, TTL), the only source of truth
    store/vec/{l1}/.../{ln}/~/{shard}    vectors of the namespace's items whose key hashes to ``shard``
    store/names/{digest}                 the real label or key behind a digest segment (immutable)

``~`` alone is never an escaped label (labels are not empty), so a namespace's own items never mix with
a child namespace's. The saver only reads ``threads/``, ``runs/`` and ``_setup/``: saver and store can
share one bucket and prefix. See docs/design.md, "Long-term memory store".
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import math
import re
import threading
import uuid
from abc import abstractmethod
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from numbers import Integral
from typing import Any, TypeVar

from langgraph.checkpoint.serde.base import SerializerProtocol, maybe_add_typed_methods
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)
from langgraph.store.memory import _compare_values, _cosine_similarity, _does_match

from . import expiry
from .codec import Codec
from .core import Core
from .errors import (
    CorruptObjectError,
    DecryptionError,
    InvalidArgumentTypeError,
    InvalidConfigError,
    StoreConflictError,
)
from .keys import MAX_KEY_BYTES, MAX_SEGMENT, Layout, has_lone_surrogate, is_digest, key_bytes, made_by
from .options import (
    STORE,
    check_encryption,
    check_extra_headers,
    check_flags,
    check_location,
    check_seconds,
    check_serde,
    check_whole_numbers,
    parse_url,
)
from .plans import all_pages, chunks, one
from .requests import (
    PRECONDITION_FAILED,
    Delete,
    DeleteIfMatch,
    Get,
    ListKeys,
    Page,
    Plan,
    Put,
    Request,
    StoredObject,
    Written,
    same_etag,
)
from .saver import (
    DEFAULT_COMPRESS_THRESHOLD,
    DEFAULT_OPERATION_TIMEOUT,
    make_bucket_io,
    make_client,
)
from .shell import ClosesAtBlockEnd

logger = logging.getLogger(__name__)
T = TypeVar("T")
StoreT = TypeVar("StoreT", bound="BaseS3Store")

HERE = "~"
"""The segment holding a namespace's own items (never an escaped label: labels are not empty)."""
DEFAULT_VECTOR_SHARDS = 16
READ_CHUNK = 128
"""Items read in parallel at once by a scan (bounds the bodies held in memory)."""
MAX_SHARD_ATTEMPTS = 20

Vectors = dict[str, list[float]]
"""Path of an embedded field (``"text"``, ``"tags.1"`` ...) -> its vector."""
Place = tuple[tuple[str, ...], str, str]
"""Where a text to embed comes from: (namespace, key, field path)."""


# ------------------------------------------------------------------------------------------------
# Layout
# ------------------------------------------------------------------------------------------------
_KEEP = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def escape(value: str) -> str:
    """One key segment for a label or key: letters, digits and ``_`` stay, every other UTF-8 byte
    becomes ``=XX``; ``""`` becomes ``~``; a segment over 180 characters becomes ``~`` + SHA-256.

    Unlike the saver's :func:`keys.escape` (``%XX``, ``-`` kept), every character of a segment sorts
    above ``/``, so ascending byte order of keys (S3, moto) and folder-by-folder order (SeaweedFS's
    filer) are the same order: search pages identically on every server."""
    if value == "":
        return "~"
    raw = value.encode("utf-8", "surrogatepass")
    segment = "".join(chr(b) if b in _KEEP else f"={b:02X}" for b in raw)
    if len(segment) > MAX_SEGMENT:
        return "~" + hashlib.sha256(raw).hexdigest()
    return segment


def unescape(segment: str) -> str:
    """Inverse of :func:`escape` for verbatim segments."""
    if segment == "~":
        return ""
    out = bytearray()
    i = 0
    while i < len(segment):
        if segment[i] == "=":
            out.append(int(segment[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(ord(segment[i]))
            i += 1
    return out.decode("utf-8", "surrogatepass")


_VERBATIM = re.compile(r"[A-Za-z0-9_]+")


def is_own_segment(segment: str) -> bool:
    """Whether :func:`escape` could have made ``segment`` (:func:`keys.made_by`, as :func:`keys.is_own_segment` for
    the saver's): a folder or key of the store whose segment fails it (``a.b``, ``%zz``, ``=zz``) is foreign,
    skipped by every read, search, listing and sweep."""
    return made_by(segment, escape, unescape, _VERBATIM)


@dataclass(frozen=True)
class StoreLayout:
    """Keys of the store under one bucket prefix. Pure."""

    prefix: str = ""
    root: str = field(init=False)
    """``{prefix}store/``: every object of the store."""
    items_root: str = field(init=False)
    """``{root}ns/``: the items, one object each."""
    vectors_root: str = field(init=False)
    """``{root}vec/``: the vector shards."""
    names_root: str = field(init=False)
    """``{root}names/``: the real strings behind digest segments."""

    def __post_init__(self) -> None:
        cleaned = self.prefix.strip("/")
        prefix = f"{cleaned}/" if cleaned else ""
        root = f"{prefix}store/"
        derived = {
            "prefix": prefix,
            "root": root,
            "items_root": f"{root}ns/",
            "vectors_root": f"{root}vec/",
            "names_root": f"{root}names/",
        }
        for attribute, value in derived.items():
            object.__setattr__(self, attribute, value)  # frozen: set once, here

    @staticmethod
    def path(namespace: Sequence[str]) -> str:
        return "".join(f"{escape(label)}/" for label in namespace)

    def items(self, namespace_prefix: Sequence[str]) -> str:
        """Prefix of every item in ``namespace_prefix`` and the namespaces below it."""
        return f"{self.items_root}{self.path(namespace_prefix)}"

    def item(self, namespace: Sequence[str], key: str) -> str:
        return f"{self.items(namespace)}{HERE}/{escape(key)}"

    def vectors(self, namespace_prefix: Sequence[str]) -> str:
        return f"{self.vectors_root}{self.path(namespace_prefix)}"

    def shard(self, namespace: Sequence[str], key: str, shards: int) -> str:
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
        return f"{self.vectors(namespace)}{HERE}/{int.from_bytes(digest[:4], 'big') % shards:02x}"

    def name(self, segment: str) -> str:
        return f"{self.names_root}{segment}"

    def digests(self, namespace: Sequence[str], key: str | None) -> dict[str, str]:
        """Digest segment -> real string, for the labels (and key) too long to be kept verbatim."""
        out = {}
        for value in (*namespace, *(() if key is None else (key,))):
            segment = escape(value)
            if is_digest(segment):
                out[segment] = value
        return out

    def is_item(self, key: str) -> bool:
        """Whether a listed key is an item of ours (folder markers and foreign objects are skipped)."""
        return _is_namespace_leaf(self.items_root, key)

    def is_shard(self, key: str) -> bool:
        """Whether a listed key is a vector shard of ours: its leaf a shard number as :meth:`shard` writes it
        (another tool's ``notes`` beside the shards is not one)."""
        return (
            _is_namespace_leaf(self.vectors_root, key) and _SHARD_NUMBER.fullmatch(key.rsplit("/", 1)[-1]) is not None
        )

    def item_of_shard_entry(self, shard_key: str, key: str) -> str:
        """The item key of ``key`` in the namespace that ``shard_key`` belongs to."""
        namespace_path = shard_key[len(self.vectors_root) : shard_key.rindex(f"{HERE}/")]
        return f"{self.items_root}{namespace_path}{HERE}/{escape(key)}"


_SHARD_NUMBER = re.compile("[0-9a-f]{2,}")
"""A shard's leaf: its number in lowercase hexadecimal, at least two digits (``Layout.shard``)."""


def _is_namespace_leaf(root: str, key: str) -> bool:
    """Whether ``key`` is ``{root}{label}/.../~/{leaf}``: escaped labels (never ``~`` alone), the
    namespace's own segment, one leaf (an item key or a shard number), each a segment :func:`escape` could
    have made."""
    if not key.startswith(root):
        return False
    parts = key[len(root) :].split("/")
    return (
        len(parts) >= 2
        and parts[-2] == HERE
        and HERE not in parts[:-2]
        and all(map(is_own_segment, parts[:-2]))
        and is_own_segment(parts[-1])
    )


# ------------------------------------------------------------------------------------------------
# Objects
# ------------------------------------------------------------------------------------------------
@dataclass
class Stored:
    """One item as read from the bucket."""

    key: str
    etag: str
    frame: dict[str, Any]
    item: Item

    @property
    def version(self) -> str:
        return str(self.frame.get("ver", ""))

    @property
    def ttl(self) -> float | None:
        ttl = self.frame.get("ttl")
        return None if ttl is None else float(ttl)

    def expired(self, now: datetime) -> bool:
        expires = self.frame.get("expires")
        return _has_expired(None if expires is None else float(expires), now)


def _has_expired(expires: float | None, now: datetime) -> bool:
    """The TTL rule: an item expires at its ``expires`` time (by the clock of the process that judges)."""
    return expires is not None and expires <= now.timestamp()


def expires_at(now: datetime, ttl_minutes: float) -> float:
    """The ``expires`` (POSIX time) of an item written or refreshed at ``now`` with a TTL of ``ttl_minutes``."""
    return (now + timedelta(minutes=ttl_minutes)).timestamp()


@dataclass(frozen=True)
class Expiry:
    """What the TTL sweep reads of an item: its frame's expiry and identity, not its value."""

    key: str
    etag: str
    expires: float | None
    """POSIX time the item expires at; ``None``: it never does."""
    namespace: tuple[str, ...]
    item_key: str
    put_derived: bool = False
    """Whether ``expires`` is the one its put set (not moved by a refresh): that put filed a marker for it."""

    def expired(self, now: datetime) -> bool:
        return _has_expired(self.expires, now)


STORE_CORRUPT_ADVICE = (
    "Other items are unaffected. Put the item again to replace it, or delete the object (`langgraph-s3 store rm` "
    "for an item), which loses what it holds."
)


def _iso(moment: datetime) -> str:
    return moment.isoformat()


@dataclass(frozen=True)
class StoreCodec:
    """Bytes of items, vector shards and name objects, framed like every object of the saver."""

    codec: Codec

    def encode_item(
        self, namespace: Sequence[str], key: str, value: Any, now: datetime, ttl: float | None, version: str
    ) -> bytes:
        return self.codec._frame(
            {
                "ns": list(namespace),
                "key": key,
                "value": self.codec.dump(f"store value {tuple(namespace)!r}/{key!r}", dict(value)),
                "created": _iso(now),
                "updated": _iso(now),
                "ttl": ttl,
                "expires": None if ttl is None else expires_at(now, ttl),
                "ver": version,
            }
        )

    def refreshed(self, stored: Stored, now: datetime) -> bytes:
        frame = dict(stored.frame)
        frame["expires"] = expires_at(now, float(frame["ttl"]))
        return self.codec._frame(frame)

    def _unframe(self, key: str, obj: StoredObject) -> dict[str, Any]:
        """The frame of a store object. Damage is reported with the store's advice (the codec's names the
        saver's tools); a value that cannot be decrypted keeps its own error (the object is intact)."""
        try:
            frame = self.codec._unframe(key, obj.body)
        except CorruptObjectError as exc:
            raise CorruptObjectError(key, exc.reason, STORE_CORRUPT_ADVICE) from None
        if not isinstance(frame, dict):
            raise CorruptObjectError(key, "not a store object", STORE_CORRUPT_ADVICE)
        return frame

    def decode_item(self, key: str, obj: StoredObject) -> Stored:
        frame = self._unframe(key, obj)
        try:
            value = self.codec.load(key, frame["value"])
            item = Item(
                value=value,
                key=str(frame["key"]),
                namespace=tuple(frame["ns"]),
                created_at=datetime.fromisoformat(frame["created"]),
                updated_at=datetime.fromisoformat(frame["updated"]),
            )
        except DecryptionError:
            raise
        except CorruptObjectError as exc:
            raise CorruptObjectError(key, exc.reason, STORE_CORRUPT_ADVICE) from None
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptObjectError(key, f"store item is missing a field ({exc})", STORE_CORRUPT_ADVICE) from exc
        return Stored(key, obj.etag, frame, item)

    def peek_expiry(self, key: str, obj: StoredObject) -> Expiry:
        """When an item expires, and which it is, from its frame alone: the TTL sweep need not decode (nor
        be able to decrypt) the value to delete an expired item."""
        frame = self._unframe(key, obj)
        try:
            expires = None if frame.get("expires") is None else float(frame["expires"])
            ttl = frame.get("ttl")
            put_derived = (
                expires is not None
                and ttl is not None
                and expires_at(datetime.fromisoformat(frame["updated"]), float(ttl)) == expires
            )
            return Expiry(key, obj.etag, expires, tuple(frame["ns"]), str(frame["key"]), put_derived)
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise CorruptObjectError(key, f"store item is missing a field ({exc})", STORE_CORRUPT_ADVICE) from exc

    def peek_version(self, key: str, obj: StoredObject) -> str:
        """The version an item was written with (as :attr:`Stored.version`), from its frame alone: its value is
        neither decoded nor decrypted. Raises :class:`CorruptObjectError` for an object that is not a store item."""
        return str(self._unframe(key, obj).get("ver", ""))

    def encode_shard(self, entries: dict[str, list[Any]]) -> bytes:
        return self.codec._frame({"entries": entries})

    def decode_shard(self, key: str, obj: StoredObject) -> dict[str, list[Any]]:
        frame = self._unframe(key, obj)
        try:
            return dict(frame["entries"])
        except (KeyError, TypeError) as exc:
            raise CorruptObjectError(key, f"vector shard is missing a field ({exc})", STORE_CORRUPT_ADVICE) from exc

    def encode_name(self, value: str) -> bytes:
        return self.codec._frame({"name": value})

    def decode_name(self, key: str, obj: StoredObject) -> str:
        frame = self._unframe(key, obj)
        try:
            return str(frame["name"])
        except (KeyError, TypeError) as exc:
            raise CorruptObjectError(key, f"name object is missing a field ({exc})", STORE_CORRUPT_ADVICE) from exc


def pack_vector(vector: Sequence[float]) -> bytes:
    """float32, little endian: half the bytes of float64, and precise enough for cosine ranking."""
    import array

    packed = array.array("f", vector)
    return packed.tobytes() if _LITTLE else _swapped(packed)


def unpack_vector(data: bytes) -> list[float]:
    import array

    values = array.array("f")
    values.frombytes(data)
    if not _LITTLE:
        values.byteswap()
    return values.tolist()


DISTANCES = ("cosine", "inner_product", "l2")
"""``index['distance_type']`` values, scored as PostgresStore scores them (higher is closer): cosine similarity
(the default, and InMemoryStore's only one), the inner product, and minus the Euclidean distance."""


def similarity_scores(query: Sequence[float], packed: Sequence[bytes], distance: str = "cosine") -> list[float]:
    """The score of each packed vector against ``query`` for ``distance`` (see :data:`DISTANCES`); cosine is
    InMemoryStore's (same float64 arithmetic, so the same scores). With numpy the vectors are scored from their
    packed bytes without turning each into a Python list."""
    if not packed:
        return []
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is optional, as for InMemoryStore
        return _python_scores(query, [unpack_vector(v) for v in packed], distance)
    try:
        matrix = np.frombuffer(b"".join(packed), dtype="<f4").reshape(len(packed), -1).astype(np.float64)
    except ValueError:  # vectors of different sizes (the index changed): the general path
        return _python_scores(query, [unpack_vector(v) for v in packed], distance)
    if matrix.shape[1] != len(query):
        return _python_scores(query, [unpack_vector(v) for v in packed], distance)
    x = np.array(query)
    if distance == "inner_product":
        return [float(v) for v in (matrix @ x).tolist()]
    if distance == "l2":
        return [float(v) for v in (-np.linalg.norm(matrix - x, axis=1)).tolist()]
    x_norm = np.linalg.norm(x)
    y_norm = np.linalg.norm(matrix, axis=1)
    mask = y_norm != 0
    similarities = np.zeros_like(y_norm)
    similarities[mask] = np.dot(matrix[mask], x) / (y_norm[mask] * x_norm)
    return [float(v) for v in similarities.tolist()]


def _python_scores(query: Sequence[float], vectors: list[list[float]], distance: str) -> list[float]:
    if distance == "inner_product":
        return [math.fsum(a * b for a, b in zip(query, v, strict=False)) for v in vectors]
    if distance == "l2":
        return [-math.sqrt(math.fsum((a - b) ** 2 for a, b in zip(query, v, strict=False))) for v in vectors]
    return _cosine_similarity(list(query), vectors)


def _swapped(values: Any) -> bytes:
    values.byteswap()
    return bytes(values.tobytes())


_LITTLE = __import__("sys").byteorder == "little"


# ------------------------------------------------------------------------------------------------
# Plan helpers
# ------------------------------------------------------------------------------------------------
def parallel(plans: Sequence[Plan[Any]]) -> Plan[list[Any]]:
    """Run independent plans side by side: each round trip carries every plan's next batch."""
    results: list[Any] = [None] * len(plans)
    steps: dict[int, list[Request]] = {}
    for i, plan in enumerate(plans):
        _step(plan, None, i, steps, results)
    while steps:
        order = list(steps.items())
        batch = [request for _, step in order for request in step]
        replies = (yield batch) if batch else []
        steps = {}
        at = 0
        for i, step in order:
            _step(plans[i], replies[at : at + len(step)], i, steps, results)
            at += len(step)
    return results


def _step(plan: Plan[Any], reply: Any, i: int, steps: dict[int, list[Request]], results: list[Any]) -> None:
    try:
        step = plan.send(reply)
    except StopIteration as stop:
        results[i] = stop.value
        return
    if not isinstance(step, list):
        raise TypeError("parallel() runs plans that yield request batches only")
    steps[i] = step


def matches(value: dict[str, Any], filter: dict[str, Any] | None) -> bool:
    """InMemoryStore's filter; a comparison that cannot be made (missing or non-numeric field) is False."""
    if not filter:
        return True
    for key, wanted in filter.items():
        try:
            if not _compare_values(value.get(key), wanted):
                return False
        except (TypeError, ValueError):
            return False
    return True


@dataclass
class _Candidate:
    key: str
    etag: str | None
    stored: Stored | None = None
    vectors: list[bytes] = field(default_factory=list)
    """Packed float32 vectors (see :func:`pack_vector`), one per embedded field."""
    version: str | None = None
    """Version of the item the shard's vectors were computed for."""
    read: bool = False
    shard_value: Any = None
    """The value as the shard recorded it (serde-encoded), to filter without reading the item."""
    current: bool = False
    """The shard entry was written for the very object listed (same ETag): its value is the item's."""

    def record(self, entry: list[Any]) -> None:
        """Take what a shard entry ``[version, {path: vector}, value, item ETag]`` says of the item
        (older entries lack the last two); it is current when its ETag is the one listed."""
        self.version = str(entry[0])
        self.vectors = [bytes(v) for v in entry[1].values()]
        self.shard_value = entry[2] if len(entry) > 2 else None
        self.current = bool(len(entry) > 3 and entry[3] and self.etag and same_etag(entry[3], self.etag))


def rank_by_similarity(
    query: Sequence[float], candidates: Sequence[_Candidate], distance: str = "cosine"
) -> list[tuple[float, _Candidate]]:
    """Candidates with vectors, best first, each scored by its best field (max-pooling) as
    InMemoryStore does; equal scores keep the candidates' order."""
    flat = [(vector, c) for c in candidates for vector in c.vectors]
    scores = similarity_scores(query, [v for v, _ in flat], distance)
    order = sorted(zip(scores, (c for _, c in flat), strict=True), key=lambda pair: pair[0], reverse=True)
    ranked: list[tuple[float, _Candidate]] = []
    seen: set[str] = set()
    for score, candidate in order:
        if candidate.key not in seen:
            seen.add(candidate.key)
            ranked.append((score, candidate))
    return ranked


@dataclass(frozen=True)
class NamespaceWalk:
    """What a ``list_namespaces`` op asks for, as the decisions of a walk down the namespace tree."""

    conditions: tuple[MatchCondition, ...]
    prefixes: tuple[tuple[str, ...], ...]
    """Paths of the prefix conditions (``"*"`` matches any label)."""
    has_suffix: bool
    max_depth: int | None

    @classmethod
    def of(cls, op: ListNamespacesOp) -> NamespaceWalk:
        conditions = tuple(op.match_conditions or ())
        return cls(
            conditions=conditions,
            prefixes=tuple(tuple(c.path) for c in conditions if c.match_type == "prefix"),
            has_suffix=any(c.match_type == "suffix" for c in conditions),
            max_depth=op.max_depth,
        )

    @property
    def start(self) -> tuple[str, ...]:
        """Where the walk starts: the labels of the first prefix condition before its first wildcard."""
        fixed: tuple[str, ...] = ()
        for label in self.prefixes[0] if self.prefixes else ():
            if label == "*":
                break
            fixed += (label,)
        return fixed

    def matches(self, namespace: tuple[str, ...]) -> bool:
        """Whether a namespace holding items is reported (every condition matches it)."""
        return all(_does_match(c, namespace) for c in self.conditions)

    def reported(self, namespace: tuple[str, ...]) -> tuple[str, ...]:
        """The namespace as reported: cut to ``max_depth``."""
        return namespace if self.max_depth is None else namespace[: self.max_depth]

    def rules_out(self, namespace: tuple[str, ...]) -> bool:
        """Whether a prefix condition rejects the namespace's last label (and so all below it)."""
        depth = len(namespace)
        return any(depth <= len(p) and p[depth - 1] not in ("*", namespace[-1]) for p in self.prefixes)

    def cuts(self, namespace: tuple[str, ...]) -> bool:
        """Whether the walk stops at this namespace: it is at ``max_depth``, past every prefix
        condition, and no suffix condition needs the full namespaces below it. A negative ``max_depth``
        cuts labels off the end, as a slice does in InMemoryStore: the walk needs every full namespace."""
        if self.has_suffix or self.max_depth is None or self.max_depth < 0:
            return False
        depth = len(namespace)
        longest = max((len(p) for p in self.prefixes), default=0)
        return depth >= self.max_depth and depth >= longest


# ------------------------------------------------------------------------------------------------
# The plans
# ------------------------------------------------------------------------------------------------
@dataclass
class StoreCore:
    """Plans for every store operation over one bucket prefix."""

    layout: StoreLayout
    codec: StoreCodec
    vector_shards: int = DEFAULT_VECTOR_SHARDS
    indexed: bool = False
    """Whether an index is configured: puts maintain the vector shards, queries read them."""
    distance: str = "cosine"
    """How queries score vectors (``index['distance_type']``, see :data:`DISTANCES`)."""
    now: Callable[[], datetime] = field(default=lambda: datetime.now(timezone.utc))
    names: dict[str, str] = field(default_factory=dict)
    """Digest segment -> real string, for name objects known to exist (written or read)."""
    sweep_state: expiry.SweepState = field(default_factory=expiry.SweepState)
    """What the TTL sweeps of this store remember (:mod:`.expiry`)."""

    @property
    def markers(self) -> expiry.Markers:
        """Keys of the expiry markers (:mod:`.expiry`)."""
        return expiry.Markers(self.layout.root, self.layout.items_root)

    @property
    def expiring(self) -> expiry.Expiring[Expiry]:
        """What the expiry markers' plans need of the store (:mod:`.expiry`)."""
        return expiry.Expiring(
            self.markers,
            self.sweep_state,
            self.codec.codec,
            self.now,
            self.layout.is_item,
            lambda key, obj, now: self.codec.peek_expiry(key, obj),
            self.forget_vectors,
        )

    # -- batch ------------------------------------------------------------------------------------
    def batch(
        self,
        ops: Sequence[Op],
        put_vectors: dict[tuple[tuple[str, ...], str], Vectors],
        queries: dict[str, list[float]],
    ) -> Plan[list[Result]]:
        """Reads see the state before the batch (they run first, in parallel); then the last write to
        each (namespace, key) is applied, all writes in parallel."""
        results: list[Result] = [None] * len(ops)
        reads: list[tuple[int, Plan[Any]]] = []
        writes: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for i, op in enumerate(ops):
            if isinstance(op, GetOp):
                reads.append((i, self.get(op)))
            elif isinstance(op, SearchOp):
                query = queries.get(op.query) if op.query and self.indexed else None
                reads.append((i, self.search(op, query)))
            elif isinstance(op, ListNamespacesOp):
                reads.append((i, self.list_namespaces(op)))
            elif isinstance(op, PutOp):
                writes[(tuple(op.namespace), op.key)] = op
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
        if reads:
            answers = yield from parallel([plan for _, plan in reads])
            for (i, _), answer in zip(reads, answers, strict=True):
                results[i] = answer
        if writes:
            yield from self.write(list(writes.values()), put_vectors)
        return results

    # -- get --------------------------------------------------------------------------------------
    def get(self, op: GetOp) -> Plan[Item | None]:
        key = self.layout.item(op.namespace, op.key)
        obj = yield from one(Get(key))
        if obj is None:
            return None
        stored = self.codec.decode_item(key, obj)
        now = self.now()
        if stored.expired(now):
            return None
        if op.refresh_ttl:
            yield from self._refresh([stored], now)
        return stored.item

    def _refresh(self, items: Sequence[Stored], now: datetime) -> Plan[None]:
        """Push back the expiry of items with a TTL (``If-Match``: a concurrent rewrite wins)."""
        puts: list[Request] = [
            Put(s.key, self.codec.refreshed(s, now), if_match=s.etag) for s in items if s.ttl is not None
        ]
        if puts:
            yield puts

    # -- write ------------------------------------------------------------------------------------
    def write(self, ops: Sequence[PutOp], put_vectors: dict[tuple[tuple[str, ...], str], Vectors]) -> Plan[None]:
        """Items (and new name objects) in one round trip; vector shards beside them, one
        read-modify-write plan per shard touched: its GET travels with the item PUTs, its PUT follows
        and records each item's ETag, so that search knows a shard entry is current from a LIST."""
        now = self.now()
        # Expiry markers first: an item with a TTL never exists without one (expiry.py).
        yield from expiry.file_markers(
            self.expiring,
            [
                (self.layout.item(op.namespace, op.key), expires_at(now, op.ttl))
                for op in ops
                if op.value is not None and op.ttl is not None
            ],
        )
        requests: list[Request] = []
        deletes: list[str] = []
        shard_updates: dict[str, dict[str, list[Any] | None]] = {}
        versions: dict[str, str | None] = {}
        """Item key (within its shard) -> the version written, ``None`` for a delete."""
        new_names: dict[str, str] = {}
        entries: dict[str, list[Any]] = {}
        for op in ops:
            namespace = tuple(op.namespace)
            key = self.layout.item(namespace, op.key)
            version = uuid.uuid4().hex
            if op.value is None:
                deletes.append(key)
            else:
                for segment, real in self.layout.digests(namespace, None).items():
                    if segment not in self.names:
                        new_names[segment] = real
                body = self.codec.encode_item(namespace, op.key, op.value, now, op.ttl, version)
                requests.append(Put(key, body, expires=False))
            if self.indexed:
                vectors = put_vectors.get((namespace, op.key)) if op.value is not None else None
                entry = (
                    [
                        version,
                        {path: pack_vector(v) for path, v in vectors.items()},
                        self.codec.codec.dump("store value", dict(op.value or {})),
                        None,  # the item's ETag, once its PUT is answered
                    ]
                    if vectors
                    else None
                )
                if entry is not None:
                    entries[key] = entry
                shard = self.layout.shard(namespace, op.key, self.vector_shards)
                shard_updates.setdefault(shard, {})[op.key] = entry
                versions[op.key] = None if op.value is None else version
        for segment, real in new_names.items():
            requests.append(Put(self.layout.name(segment), self.codec.encode_name(real), if_none_match=True))
        for start in range(0, len(deletes), 1000):
            requests.append(Delete(tuple(deletes[start : start + 1000])))
        # parallel() hands each round trip's replies to the plans in order: _send (first) fills in the
        # ETags before any shard plan builds the body of its PUT.
        plans: list[Plan[Any]] = [self._send(requests, entries)]
        plans += [self.update_shard(shard, changes, versions) for shard, changes in shard_updates.items()]
        yield from parallel(plans)
        self.names.update(new_names)

    @staticmethod
    def _send(requests: list[Request], entries: dict[str, list[Any]]) -> Plan[None]:
        if requests:
            replies = yield requests
            for request, reply in zip(requests, replies, strict=True):
                if isinstance(request, Put) and isinstance(reply, Written) and request.key in entries:
                    entries[request.key][3] = reply.etag

    def update_shard(
        self,
        shard: str,
        changes: dict[str, list[Any] | None],
        versions: Mapping[str, str | None] | None = None,
    ) -> Plan[None]:
        """Bring a vector shard in line with the items a batch wrote: ``changes`` holds each item's entry (``None``:
        it has none), ``versions`` the version each item was written with (``None``: deleted; by default the
        entry's own, or deleted).

        Each attempt GETs the shard and writes it back conditioned on what it read (``If-Match``, or
        ``If-None-Match`` for a new shard), again from the GET when refused. When puts of one key race, that
        condition is not enough: item PUTs are unconditional and land in some order, and the shard must end up
        with the entry of the version that landed last, but a put that landed first may write its shard after the
        other one did and put its older entry back. So each shard write travels with a GET of the items whose
        entries it changes. An item found at another version than the one just written was overwritten by a put
        that landed later: the plan then writes that version's entry if it has read it in the shard (none if the
        item is gone), and else leaves the key to the writer that holds it. Why that ends right: the put that
        lands last writes its entry after its item PUT was answered; the first shard write after that one read
        that entry, and its item GET, sent after that read, finds the last version, so its writer puts the entry
        back (every interleaving of two and three puts: tests/test_vector_race.py). Costs one GET per item, in
        the round trip of the shard's PUT."""
        wanted: Wanted = {
            key: (_entry_version(entry) if versions is None else versions[key], entry) for key, entry in changes.items()
        }
        read: dict[str, dict[str, list[Any]]] = {}
        """Item key -> the entries of it seen in the shard, by version."""
        for _ in range(MAX_SHARD_ATTEMPTS):
            obj = yield from one(Get(shard))
            entries = {} if obj is None else self.codec.decode_shard(shard, obj)
            updated = _with_wanted(entries, wanted, read)
            changed = [key for key in wanted if updated.get(key) != entries.get(key)]
            if not changed:
                return  # the shard already reads as wanted
            items = [self.layout.item_of_shard_entry(shard, key) for key in changed]
            replies = yield [self._shard_write(shard, obj, updated), *map(Get, items)]
            found = {
                key: self._version_or_unknown(item, reply)
                for key, item, reply in zip(changed, items, replies[1:], strict=True)
            }
            wanted = _still_wanted(
                {key: wanted[key] for key in changed}, found, replies[0] is not PRECONDITION_FAILED, read
            )
            if not wanted:
                return
        raise StoreConflictError(
            f"Vector shard {shard!r} changed under {MAX_SHARD_ATTEMPTS} attempts to update it in a row; "
            "the items were written, their vectors may be missing from semantic search. Retry the put."
        )

    def _shard_write(self, shard: str, obj: StoredObject | None, entries: dict[str, list[Any]]) -> Request:
        """The conditional write of a shard read as ``obj`` (``None``: missing) that makes it hold ``entries``."""
        if obj is None:
            return Put(shard, self.codec.encode_shard(entries), if_none_match=True, expires=False)
        if not entries:
            return DeleteIfMatch(shard, obj.etag)
        return Put(shard, self.codec.encode_shard(entries), if_match=obj.etag, expires=False)

    def _version_or_unknown(self, key: str, obj: StoredObject | None) -> str | None:
        """The version of an item as read (``None``: missing); ``""`` if it has none or cannot be read, which no
        shard entry describes."""
        if obj is None:
            return None
        try:
            return self.codec.peek_version(key, obj)
        except CorruptObjectError:
            return ""

    # -- search -----------------------------------------------------------------------------------
    def search(self, op: SearchOp, query: list[float] | None) -> Plan[list[SearchItem]]:
        if query is not None:
            return (yield from self._vector_search(op, query))
        bounded = min(op.offset, op.limit) >= 0
        need = op.offset + op.limit if bounded else None
        found: list[Stored] = []
        now = self.now()
        prefix = self.layout.items(op.namespace_prefix)
        token: str | None = None
        while need is None or len(found) < need:
            page: Page = yield from one(ListKeys(prefix, token=token))
            reads = [r for r in page.reads() if self.layout.is_item(r.key)]
            at = 0
            while at < len(reads) and (need is None or len(found) < need):
                # Without a filter every live item counts: read only as many as still needed.
                size = READ_CHUNK if op.filter or need is None else max(1, min(READ_CHUNK, need - len(found)))
                chunk: list[Request] = list(reads[at : at + size])
                at += len(chunk)
                objs = yield chunk
                for request, obj in zip(chunk, objs, strict=True):
                    if obj is None:
                        continue  # deleted since it was listed
                    assert isinstance(request, Get)
                    stored = self.codec.decode_item(request.key, obj)
                    if not stored.expired(now) and matches(stored.item.value, op.filter):
                        found.append(stored)
                        if need is not None and len(found) == need:
                            break
            if page.token is None:
                break
            token = page.token
        kept = found[op.offset : op.offset + op.limit]
        if op.refresh_ttl:
            yield from self._refresh(kept, now)
        return [_search_item(s.item, None) for s in kept]

    def _vector_search(self, op: SearchOp, query: list[float]) -> Plan[list[SearchItem]]:
        """Rank by cosine similarity exactly as InMemoryStore does, reading vectors from the shards.

        Without a filter: LIST shards, GET shards, GET the items in rank order, only as many as the page
        needs (each GET verifies the item: missing, expired or of another version than the shard entry
        means not ranked); the items are listed only if unscored items must fill the page. With a
        filter: LIST items ∥ LIST shards, GET shards; the filter is applied to the values the shards
        recorded for the very objects listed (same ETag), and again to each item read."""
        now = self.now()
        listed, by_key = yield from self._shard_candidates(op)
        ranked = rank_by_similarity(query, self._rankable(op, listed, by_key), self.distance)
        kept = yield from self._read_ranked_page(op, ranked, now)
        if len(kept) < op.limit:
            kept += yield from self._unscored_to_fill(op, op.limit - len(kept), listed, by_key, now)
        items = [c.stored for _, c in kept if c.stored is not None]
        if op.refresh_ttl:
            yield from self._refresh(items, now)
        return [_search_item(c.stored.item, score) for score, c in kept if c.stored is not None]

    def _shard_candidates(self, op: SearchOp) -> Plan[tuple[list[_Candidate] | None, dict[str, _Candidate]]]:
        """Read every vector shard under the prefix; returns the listed items (only with a filter, else
        ``None``) and item key -> candidate. With a filter the items are listed beside the shards, and
        a shard entry of an item the LIST does not show is stale and dropped; without one, every item a
        shard names is a candidate (its GET will tell whether it still exists)."""
        vectors_prefix = self.layout.vectors(op.namespace_prefix)
        listed: list[_Candidate] | None = None
        if op.filter:
            item_pages, shard_pages = yield from parallel(
                [all_pages(self.layout.items(op.namespace_prefix)), all_pages(vectors_prefix)]
            )
            listed = self._listed_candidates(item_pages, {})
        else:
            shard_pages = yield from all_pages(vectors_prefix)
        shard_keys = [k for page in shard_pages for k in page.keys if self.layout.is_shard(k)]
        by_key = {c.key: c for c in listed or ()}
        shards = (yield [Get(k) for k in shard_keys]) if shard_keys else []
        for shard_key, obj in zip(shard_keys, shards, strict=True):
            if obj is None:
                continue
            for key, entry in self.codec.decode_shard(shard_key, obj).items():
                item_key = self.layout.item_of_shard_entry(shard_key, key)
                candidate = by_key.get(item_key)
                if candidate is None:
                    if listed is not None:
                        continue  # the item is gone: a stale entry
                    candidate = by_key[item_key] = _Candidate(item_key, None)
                candidate.record(entry)
        return listed, by_key

    def _listed_candidates(self, pages: Iterable[Page], known: dict[str, _Candidate]) -> list[_Candidate]:
        """The items of listed pages as candidates, in listing (key) order; ``known`` ones are reused."""
        return [
            known.get(r.key) or _Candidate(r.key, r.etag)
            for page in pages
            for r in page.reads()
            if self.layout.is_item(r.key)
        ]

    def _rankable(
        self, op: SearchOp, listed: list[_Candidate] | None, by_key: dict[str, _Candidate]
    ) -> list[_Candidate]:
        """The candidates to score, in key order (ties in score keep it). With a filter: the listed
        items, minus those whose current shard entry records a value the filter rejects (the others are
        filtered on their real value when read); without one: every item a shard names."""
        if listed is not None:
            return [
                c
                for c in listed
                if not c.current or not c.vectors or matches(self.codec.codec.load(c.key, c.shard_value), op.filter)
            ]
        # Key order, as a listing would give them.
        return sorted(by_key.values(), key=lambda c: c.key.encode("utf-8", "surrogatepass"))

    def _read_ranked_page(
        self, op: SearchOp, ranked: Sequence[tuple[float, _Candidate]], now: datetime
    ) -> Plan[list[tuple[float | None, _Candidate]]]:
        """Read ranked candidates in rank order, only as many as ``offset + limit`` still needs (more
        only when some turn out dead), and keep those of the page. A candidate is dead when missing,
        expired or rejected by the filter; one whose item is of another version than its shard entry
        (a put in flight or interrupted) loses its vectors: not ranked on a stale vector, it may still
        fill the page as unscored."""
        end = op.offset + op.limit
        kept: list[tuple[float | None, _Candidate]] = []
        position = 0
        at = 0
        while at < len(ranked) and position < end:
            chunk = ranked[at : at + max(1, min(READ_CHUNK, end - position))]
            at += len(chunk)
            yield from self._load([c for _, c in chunk], now)
            for score, candidate in chunk:
                if candidate.stored is None or not matches(candidate.stored.item.value, op.filter):
                    continue
                if candidate.stored.version != candidate.version:
                    candidate.vectors = []
                    continue
                if op.offset <= position:
                    kept.append((score, candidate))
                position += 1
        return kept

    def _unscored_to_fill(
        self,
        op: SearchOp,
        room: int,
        listed: list[_Candidate] | None,
        by_key: dict[str, _Candidate],
        now: datetime,
    ) -> Plan[list[tuple[float | None, _Candidate]]]:
        """Up to ``room`` live items without a vector, in key order, to fill a page the ranked items
        left short (as InMemoryStore does). Lists the items first when the search did not."""
        if listed is None:
            listed = self._listed_candidates((yield from all_pages(self.layout.items(op.namespace_prefix))), by_key)
        unscored = [c for c in listed if not c.vectors]
        found: list[tuple[float | None, _Candidate]] = []
        at = 0
        while at < len(unscored) and len(found) < room:
            chunk = unscored[at : at + min(READ_CHUNK, room - len(found))]
            at += len(chunk)
            yield from self._load(chunk, now)
            for candidate in chunk:
                alive = candidate.stored is not None and matches(candidate.stored.item.value, op.filter)
                if alive and len(found) < room:
                    found.append((None, candidate))
        return found

    def _load(self, candidates: Sequence[_Candidate], now: datetime) -> Plan[None]:
        """Read the candidates not read yet; missing and expired ones keep ``stored = None``."""
        todo = [c for c in candidates if not c.read]
        for chunk in chunks(todo, READ_CHUNK):
            objs = yield [Get(c.key) for c in chunk]
            for candidate, obj in zip(chunk, objs, strict=True):
                candidate.read = True
                if obj is not None:
                    stored = self.codec.decode_item(candidate.key, obj)
                    if not stored.expired(now):
                        candidate.stored = stored

    # -- list_namespaces --------------------------------------------------------------------------
    def list_namespaces(self, op: ListNamespacesOp) -> Plan[list[tuple[str, ...]]]:
        """Walk the namespace tree with delimiter LISTs, one level per round trip, pruning by the prefix
        condition and stopping at ``max_depth`` when no suffix condition needs the full namespace.

        Filer-backed servers (SeaweedFS) keep a folder after its last object is deleted and list it as
        a common prefix, so a namespace is reported only once a LIST (``max_keys`` 10, in the next
        level's round trip) shows an item in it, and likewise a subtree cut at ``max_depth``."""
        walk = NamespaceWalk.of(op)
        found: set[tuple[str, ...]] = set()
        frontier: list[tuple[str, ...]] = [walk.start]
        checks: dict[tuple[str, ...], list[str]] = {}
        """Namespace to report -> listing prefixes of which one must hold an item."""
        while frontier or checks:
            listings, proven = yield from parallel(
                [
                    parallel([all_pages(self.layout.items(ns), delimiter="/") for ns in frontier]),
                    self._namespaces_holding_items(checks, found),
                ]
            )
            found |= proven
            checks, children = self._split_level(walk, frontier, listings)
            yield from self._learn_names(segment for _, segment in children)
            frontier = self._next_frontier(walk, children, checks)
        return sorted(found)[op.offset : op.offset + op.limit]

    def _namespaces_holding_items(
        self, checks: dict[tuple[str, ...], list[str]], found: set[tuple[str, ...]]
    ) -> Plan[set[tuple[str, ...]]]:
        """Which namespaces to report hold an item: one LIST (``max_keys`` 10) per listing prefix of
        each, all in one round trip; namespaces already found are not checked again."""
        pending = [
            (result, prefix) for result, prefixes in checks.items() if result not in found for prefix in prefixes
        ]
        verdicts = yield from parallel([self._holds_item(prefix) for _, prefix in pending])
        return {result for (result, _), holds in zip(pending, verdicts, strict=True) if holds}

    def _split_level(
        self, walk: NamespaceWalk, frontier: Sequence[tuple[str, ...]], listings: Sequence[list[Page]]
    ) -> tuple[dict[tuple[str, ...], list[str]], list[tuple[tuple[str, ...], str]]]:
        """Sort one level's delimiter listings: a namespace's own ``~/`` folder makes it (cut to
        ``max_depth``) a namespace to report if the conditions match it, to be checked for an item;
        every other folder is a child segment to descend into."""
        checks: dict[tuple[str, ...], list[str]] = {}
        children: list[tuple[tuple[str, ...], str]] = []
        for namespace, pages in zip(frontier, listings, strict=True):
            base = self.layout.items(namespace)
            for common in (prefix for page in pages for prefix in page.prefixes):
                segment = common[len(base) : -1]
                if segment == HERE:
                    if walk.matches(namespace):
                        checks.setdefault(walk.reported(namespace), []).append(common)
                elif segment:
                    children.append((namespace, segment))
        return checks, children

    def _learn_names(self, segments: Iterable[str]) -> Plan[None]:
        """GET the name objects of the digest segments not known yet, in one round trip."""
        unknown = sorted({s for s in segments if is_digest(s) and s not in self.names})
        if unknown:
            objs = yield [Get(self.layout.name(s)) for s in unknown]
            for segment, obj in zip(unknown, objs, strict=True):
                if obj is not None:
                    self.names[segment] = self.codec.decode_name(self.layout.name(segment), obj)

    def _label(self, segment: str) -> str | None:
        """The label behind a folder segment; ``None`` for a digest whose name object is missing, or a folder
        the store did not make."""
        if not is_own_segment(segment):
            return None
        return self.names.get(segment) if is_digest(segment) else unescape(segment)

    def _next_frontier(
        self,
        walk: NamespaceWalk,
        children: Sequence[tuple[tuple[str, ...], str]],
        checks: dict[tuple[str, ...], list[str]],
    ) -> list[tuple[str, ...]]:
        """The child namespaces to list at the next level: those the prefix conditions allow, except
        where the walk is cut at ``max_depth`` — a cut subtree is added to ``checks`` instead, to be
        reported (cut) if anything below it is an item. Children that cannot be named are skipped."""
        frontier: list[tuple[str, ...]] = []
        for parent, segment in children:
            label = self._label(segment)
            if label is None:
                continue
            namespace = (*parent, label)
            if walk.rules_out(namespace):
                continue
            if walk.cuts(namespace):
                # Every item below matches the prefix: report the cut namespace if there is one.
                checks.setdefault(walk.reported(namespace), []).append(self.layout.items(namespace))
                continue
            frontier.append(namespace)
        return frontier

    def _holds_item(self, prefix: str) -> Plan[bool]:
        page: Page = yield from one(ListKeys(prefix, max_keys=10))
        return any(self.layout.is_item(key) for key in page.keys)

    # -- TTL sweep --------------------------------------------------------------------------------
    def sweep(self, full: bool = False) -> Plan[int]:
        """Delete every expired item whose expiry marker came due (every expired item, reading all of them,
        when the store was never filed or ``full``), and its vectors; returns how many (see :mod:`.expiry`)."""
        swept = yield from expiry.sweep(self.expiring, full)
        return swept.deleted

    def forget_vectors(self, gone: Sequence[Expiry]) -> Plan[None]:
        """Remove the vector entries of deleted items (with an index): one read-modify-write per shard."""
        if not self.indexed or not gone:
            return
        updates: dict[str, dict[str, list[Any] | None]] = {}
        for e in gone:
            shard = self.layout.shard(e.namespace, e.item_key, self.vector_shards)
            updates.setdefault(shard, {})[e.item_key] = None
        yield from parallel([self.update_shard(k, v) for k, v in updates.items()])


Wanted = dict[str, tuple["str | None", "list[Any] | None"]]
"""Item key -> (the item's version a shard entry must describe, ``None`` for a deleted item; that entry, or ``None``
for none)."""


def _with_wanted(
    entries: dict[str, list[Any]], wanted: Wanted, read: dict[str, dict[str, list[Any]]]
) -> dict[str, list[Any]]:
    """The shard's ``entries`` with the ``wanted`` ones applied; the entries read of wanted items join ``read``."""
    updated = dict(entries)
    for key, (_, entry) in wanted.items():
        if key in entries:
            read.setdefault(key, {})[str(entries[key][0])] = entries[key]
        if entry is None:
            updated.pop(key, None)
        else:
            updated[key] = entry
    return updated


def _still_wanted(
    wanted: Wanted, found: dict[str, str | None], written: bool, read: dict[str, dict[str, list[Any]]]
) -> Wanted:
    """What a shard plan must still write after a shard write (``written``: not refused) and the item GETs that
    travelled with it (``found``: each item's version, ``None`` if missing): an item at the version just
    written is done; one that moved on wants the entry of its version if it was read (no entry once deleted),
    and is left to its own writer otherwise."""
    still: Wanted = {}
    for key, (version, entry) in wanted.items():
        now = found[key]
        if now == version:
            if not written:
                still[key] = (version, entry)
        elif now is None:
            still[key] = (None, None)
        elif now in read.get(key, {}):
            still[key] = (now, read[key][now])
    return still


def _entry_version(entry: list[Any] | None) -> str | None:
    """The version of the item a shard entry describes (``None``: no entry)."""
    return None if entry is None else str(entry[0])


def _search_item(item: Item, score: float | None) -> SearchItem:
    return SearchItem(
        namespace=item.namespace,
        key=item.key,
        value=item.value,
        created_at=item.created_at,
        updated_at=item.updated_at,
        score=None if score is None else float(score),
    )


# ------------------------------------------------------------------------------------------------
# Embedding (outside the plans: sync or async)
# ------------------------------------------------------------------------------------------------
def texts_to_embed(index: dict[str, Any], ops: Iterable[PutOp]) -> dict[str, list[Place]]:
    """Unique text -> the (namespace, key, path) fields it comes from, as InMemoryStore extracts them."""
    out: dict[str, list[Place]] = {}
    for op in ops:
        if op.value is None or op.index is False:
            continue
        paths = index["__tokenized_fields"] if op.index is None else [(p, tokenize_path(p)) for p in op.index]
        for path, tokens in paths:
            texts = get_text_at_path(op.value, tokens)
            if len(texts) > 1:
                for i, text in enumerate(texts):
                    out.setdefault(text, []).append((tuple(op.namespace), op.key, f"{path}.{i}"))
            elif texts:
                out.setdefault(texts[0], []).append((tuple(op.namespace), op.key, path))
    return out


def assign_vectors(
    to_embed: dict[str, list[Place]], embeddings: Sequence[Sequence[float]]
) -> dict[tuple[tuple[str, ...], str], Vectors]:
    places = [place for places in to_embed.values() for place in places]
    texts = [text for text, places in to_embed.items() for _ in places]
    by_text = dict(zip(to_embed, embeddings, strict=True))
    if len(places) != len(texts):  # pragma: no cover - same construction
        raise ValueError("embedding count mismatch")
    out: dict[tuple[tuple[str, ...], str], Vectors] = {}
    for text, (namespace, key, path) in zip(texts, places, strict=True):
        out.setdefault((namespace, key), {})[path] = list(by_text[text])
    return out


def _last_writes(ops: Sequence[Op]) -> list[PutOp]:
    last: dict[tuple[tuple[str, ...], str], PutOp] = {}
    for op in ops:
        if isinstance(op, PutOp):
            last[(tuple(op.namespace), op.key)] = op
    return list(last.values())


# ------------------------------------------------------------------------------------------------
# The stores
# ------------------------------------------------------------------------------------------------
_TTL_KEYS = frozenset({"default_ttl", "refresh_on_read", "omit_expired", "sweep_interval_minutes"})
"""TTLConfig's keys. ``omit_expired`` is accepted and always in effect for ``get`` and ``search``, which never
return an expired item; ``list_namespaces`` reads keys only and lists a namespace until its items are swept."""


_OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})
"""The filter operators of InMemoryStore and PostgresStore."""


def _check_op(op: Op) -> None:
    """What LangGraph's namespace check leaves to each store: a str where a tuple belongs (it would be
    taken letter by letter), a key that is not a str, a per-item ``ttl`` that is not a positive number
    of minutes, and a filter operator that does not exist (it would silently match nothing)."""
    namespace = op.namespace_prefix if isinstance(op, SearchOp) else getattr(op, "namespace", ())
    if isinstance(namespace, str):
        raise InvalidArgumentTypeError(
            f"a namespace is a tuple of labels, not the str {namespace!r}: write ({namespace!r},)"
        )
    if isinstance(op, (GetOp, PutOp)) and not isinstance(op.key, str):
        raise InvalidArgumentTypeError(f"an item's key must be a str, got {type(op.key).__name__} {op.key!r}")
    if isinstance(op, PutOp):
        _check_put(op)
    if isinstance(op, SearchOp) and op.filter:
        _check_filter(op.filter)


def _check_put(op: PutOp) -> None:
    for text in (*op.namespace, op.key):
        if isinstance(text, str) and has_lone_surrogate(text):
            raise InvalidConfigError(
                f"{text!r} (in namespace {tuple(op.namespace)!r}, key {op.key!r}) holds a lone surrogate, "
                "which is not text an item can be stored under; decode the bytes it came from properly"
            )
    if op.ttl is not None and (
        isinstance(op.ttl, bool) or not isinstance(op.ttl, (int, float)) or not 0 < op.ttl < math.inf
    ):
        raise InvalidConfigError(f"ttl of item {op.key!r} must be a positive number of minutes or None, got {op.ttl!r}")


def _check_filter(filter: Mapping[str, Any]) -> None:
    for field_name, wanted in filter.items():
        if not isinstance(wanted, Mapping):
            continue
        if any(str(k).startswith("$") for k in wanted):
            unknown = sorted(str(k) for k in wanted if k not in _OPERATORS)
            if unknown:
                raise ValueError(
                    f"Unsupported operator: {unknown[0]} (filter on {field_name!r}); "
                    f"the operators are {', '.join(sorted(_OPERATORS))}"
                )
        else:
            _check_filter(wanted)


def _check_ttl(ttl: Any) -> None:
    """``ttl`` is LangGraph's ``TTLConfig``: minutes, a flag and minutes again; nothing else."""
    if ttl is None:
        return
    if not isinstance(ttl, Mapping):
        raise InvalidConfigError(f"ttl must be a TTLConfig dict ({', '.join(sorted(_TTL_KEYS))}), got {ttl!r}")
    unknown = sorted(set(ttl) - _TTL_KEYS)
    if unknown:
        raise InvalidConfigError(f"unknown ttl key(s) {unknown}; TTLConfig has {', '.join(sorted(_TTL_KEYS))}")
    for name in ("default_ttl", "sweep_interval_minutes"):
        minutes = ttl.get(name)
        if minutes is not None and (
            isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or not minutes > 0
        ):
            raise InvalidConfigError(f"ttl[{name!r}] must be a positive number of minutes (or None), got {minutes!r}")
    for name in ("refresh_on_read", "omit_expired"):
        if not isinstance(ttl.get(name, True), bool):
            raise InvalidConfigError(f"ttl[{name!r}] must be True or False, got {ttl[name]!r}")


# LangGraph's IndexConfig, and the keys of LangGraph's other stores that mean something here: SqliteStore's
# "text_fields" (its name for "fields"), PostgresStore's "distance_type" (see DISTANCES) and "ann_index_config"
# (it tunes pgvector's approximate index; S3Store scores every vector of the namespaces searched exactly, so there
# is nothing to tune and it is ignored). A store's own index_config also holds "__tokenized_fields" (recomputed
# from the fields), so one store's index_config can configure another.
_INDEX_KEYS = frozenset({"embed", "dims", "fields", "text_fields", "distance_type", "ann_index_config"})


def _check_index(index: Any) -> None:
    """``index`` is LangGraph's ``IndexConfig``: an embedder, the vectors' size, the fields to embed."""
    if index is None:
        return
    if not isinstance(index, Mapping):
        raise InvalidConfigError(f"index must be an IndexConfig dict (embed, dims, fields), got {index!r}")
    unknown = sorted(str(name) for name in index if name not in _INDEX_KEYS and name != "__tokenized_fields")
    if unknown:
        raise InvalidConfigError(f"index has keys S3Store does not know: {unknown}; it takes {sorted(_INDEX_KEYS)}")
    if index.get("distance_type", "cosine") not in DISTANCES:
        raise InvalidConfigError(
            f"index['distance_type'] must be one of {', '.join(map(repr, DISTANCES))} (as for PostgresStore's "
            f"float vectors), got {index['distance_type']!r}"
        )
    embed = index.get("embed")
    if embed is None or not (isinstance(embed, str) or callable(embed) or hasattr(embed, "embed_documents")):
        raise InvalidConfigError(
            "index['embed'] must be an Embeddings object, a function from texts to vectors, or a provider "
            f"string such as 'openai:text-embedding-3-small'; got {embed!r}"
        )
    dims = index.get("dims")
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, Integral) or dims < 1):
        raise InvalidConfigError(f"index['dims'] must be a whole number >= 1 (the vectors' size), got {dims!r}")
    _index_fields(index)


def _index_fields(index: Mapping[str, Any]) -> list[str] | None:
    """The JSON paths to embed: ``fields``, or SqliteStore's ``text_fields`` (which may be one path)."""
    fields = index.get("fields")
    text_fields = index.get("text_fields")
    if isinstance(text_fields, str):
        text_fields = [text_fields]
    if fields is not None and text_fields is not None and list(fields) != list(text_fields):
        raise InvalidConfigError(
            f"index has both 'fields' {fields!r} and 'text_fields' {text_fields!r}; give one ('text_fields' is "
            "SqliteStore's name for 'fields')"
        )
    chosen = fields if fields is not None else text_fields
    if chosen is not None and (isinstance(chosen, str) or not all(isinstance(f, str) for f in chosen)):
        raise InvalidConfigError(
            f"index['fields'] must be a list of JSON paths such as ['text', 'metadata.title'], got {chosen!r}"
        )
    return None if chosen is None else list(chosen)


class BaseS3Store(ClosesAtBlockEnd, BaseStore):
    """Shared construction and ``batch``/``abatch``; see :class:`S3Store` and :class:`AsyncS3Store`."""

    supports_ttl = True

    def __init__(
        self,
        *,
        bucket: str,
        prefix: str = "",
        client: Any = None,
        serde: SerializerProtocol | None = None,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        compress_threshold: int | None = DEFAULT_COMPRESS_THRESHOLD,
        max_concurrency: int = 32,
        create_bucket: bool = False,
        require_conditional_writes: bool = True,
        server_side_encryption: str | None = None,
        sse_kms_key_id: str | None = None,
        sse_customer_key: str | None = None,
        transport: str = "auto",
        vector_shards: int = DEFAULT_VECTOR_SHARDS,
        operation_timeout: float | None = DEFAULT_OPERATION_TIMEOUT,
        extra_headers: Mapping[str, str] | str | None = None,
        **client_options: Any,
    ) -> None:
        prefix = check_location(bucket, prefix)
        check_whole_numbers(
            max_concurrency=max_concurrency, compress_threshold=compress_threshold, vector_shards=vector_shards
        )
        check_flags(create_bucket=create_bucket, require_conditional_writes=require_conditional_writes)
        check_serde(serde)
        check_encryption(server_side_encryption, sse_kms_key_id, sse_customer_key)
        _check_ttl(ttl)
        _check_index(index)
        headers = check_extra_headers(extra_headers)
        if client is None:
            client_options.setdefault("max_pool_connections", max(64, max_concurrency * 2))
            client = make_client(**client_options)
        elif client_options:
            raise InvalidConfigError(
                f"client options {sorted(client_options)} only apply when the store creates the client"
            )
        self.bucket = bucket
        self.prefix = prefix
        self.client = client
        self.create_bucket = create_bucket
        self.require_conditional_writes = require_conditional_writes
        self.operation_timeout = (
            None if operation_timeout is None else check_seconds("operation_timeout", operation_timeout)
        )
        """Deadline of one call, as the saver's (the TTL sweep, which reads every item, is bounded per request only)."""
        self.serde: SerializerProtocol = maybe_add_typed_methods(serde or JsonPlusSerializer())
        self.ttl_config = ttl
        self.index_config: dict[str, Any] | None = None
        self.embeddings: Any = None
        if index:
            config: dict[str, Any] = dict(index)
            self.embeddings = ensure_embeddings(config.get("embed"))
            config["fields"] = _index_fields(index)
            config["__tokenized_fields"] = [
                (p, tokenize_path(p)) if p != "$" else (p, p) for p in (config["fields"] or ["$"])
            ]
            self.index_config = config
        self._io = make_bucket_io(
            client,
            bucket,
            prefix=self.prefix,
            require_conditional_writes=require_conditional_writes,
            extra_headers=headers,
            max_concurrency=max_concurrency,
            server_side_encryption=server_side_encryption,
            sse_kms_key_id=sse_kms_key_id,
            sse_customer_key=sse_customer_key,
            transport=transport,
            native_async=True,  # the async methods of both classes send from the loop with the direct transport
            serves="store",
            deadline=self.operation_timeout,
        )
        codec = Codec(self.serde, compress_threshold=compress_threshold)
        self._codec = codec
        self._core = StoreCore(
            layout=StoreLayout(self.prefix),
            codec=StoreCodec(codec),
            vector_shards=vector_shards,
            indexed=self.embeddings is not None,
            distance=str((index or {}).get("distance_type", "cosine")),
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(bucket={self.bucket!r}, prefix={self.prefix!r})"

    @classmethod
    def _from_url(cls: type[StoreT], url: str, **kwargs: Any) -> StoreT:
        bucket, prefix, options = parse_url(url, used_by=STORE)  # one URL serves saver, store and cache
        options.update(kwargs)
        return cls(bucket=bucket, prefix=prefix, **options)

    def close(self) -> None:
        """Stop the TTL sweeper and release the worker threads and connections. Idempotent; every later call
        raises :class:`SaverMisuseError` naming it (``with``/``async with`` blocks end with this)."""
        self._stop_sweeping()
        self._io.close()

    def _setup_plan(self) -> Plan[None]:
        core = Core(layout=Layout(self.prefix), codec=self._codec)
        yield from core.setup(create_bucket=self.create_bucket, bucket=self.bucket)
        # A store without items has none an older release wrote: its first sweep need not read them all.
        yield from expiry.file_if_empty(self._core.expiring)

    # -- preparing a batch ------------------------------------------------------------------------
    def _prepare(self, ops: Iterable[Op]) -> tuple[list[Op], dict[str, list[Place]], list[str]]:
        """Check every op's namespace; return the ops, the texts their writes need embedded (the last
        write to each item) and their distinct queries: nothing to embed without an index."""
        listed = list(ops)
        for op in listed:
            validate_op_namespace(op)
            _check_op(op)
            if isinstance(op, PutOp):
                self._check_key_length(op)
        if self.index_config is None:
            return listed, {}, []
        to_embed = texts_to_embed(self.index_config, _last_writes(listed))
        queries = sorted({op.query for op in listed if isinstance(op, SearchOp) and op.query})
        return listed, to_embed, queries

    def _check_key_length(self, op: PutOp) -> None:
        """S3 keys are at most 1,024 bytes (AWS, SeaweedFS): refuse an item whose object key would be longer
        before any of the batch is written, instead of failing halfway through it."""
        size = key_bytes(self._core.layout.item(op.namespace, op.key))
        if size > MAX_KEY_BYTES:
            raise InvalidConfigError(
                f"item {op.key!r} in namespace {tuple(op.namespace)!r} would be stored under a key of {size} bytes; "
                f"S3 allows {MAX_KEY_BYTES}. Use shorter or fewer namespace labels (or a shorter prefix)"
            )

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        self._io.check_open("batch")  # before any embedding is paid for
        listed, to_embed, queries = self._prepare(ops)
        documents = self.embeddings.embed_documents(list(to_embed)) if to_embed else []
        query_vectors = {q: list(self.embeddings.embed_query(q)) for q in queries}
        return self._io.run(self._core.batch(listed, assign_vectors(to_embed, documents), query_vectors))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        self._io.check_open("abatch")
        listed, to_embed, queries = self._prepare(ops)
        documents = await self.embeddings.aembed_documents(list(to_embed)) if to_embed else []
        answers = await asyncio.gather(*(self.embeddings.aembed_query(q) for q in queries))
        query_vectors = {q: list(v) for q, v in zip(queries, answers, strict=True)}
        return await self._io.arun(self._core.batch(listed, assign_vectors(to_embed, documents), query_vectors))

    def _run(self, what: str, plan: Plan[T], *, bounded: bool = True) -> T:
        self._io.check_open(what)
        return self._io.run(plan, bounded=bounded)

    async def _arun(self, what: str, plan: Plan[T], *, bounded: bool = True) -> T:
        self._io.check_open(what)
        return await self._io.arun(plan, bounded=bounded)

    # -- TTL ----------------------------------------------------------------------------------------
    async def asweep_ttl(self, *, full: bool = False) -> int:
        """Delete every expired item now; returns how many. (Reads are already blind to them.) ``full``: read
        every item instead of only those whose expiry came due (after older releases wrote items)."""
        return await self._arun("asweep_ttl", self._core.sweep(full), bounded=False)

    def _sweep_interval_s(self, sweep_interval_minutes: float | None) -> float | None:
        """Seconds between background sweeps (the argument, else ``ttl_config``'s, else 5 minutes), or None
        without a ``ttl_config``: nothing can expire, so no sweeper starts (as in LangGraph's stores)."""
        if not self.ttl_config:
            return None
        return 60 * float(sweep_interval_minutes or self.ttl_config.get("sweep_interval_minutes") or 5)

    @abstractmethod
    def _stop_sweeping(self) -> None:
        """Stop the background sweeper without waiting for it (``close``)."""


def _log_sweep(store: BaseS3Store, swept: int) -> None:
    if swept:
        logger.info("%s TTL sweep deleted %d expired items", type(store).__name__, swept)


def _log_failed_sweep(store: BaseS3Store) -> None:
    logger.exception("%s TTL sweep failed; retrying at the next interval", type(store).__name__)


class S3Store(BaseS3Store):
    """LangGraph long-term memory in an S3 bucket, beside (and independent of) the saver's threads.

    ```python
    with S3Store.from_conn_string("s3://agent-state/prod") as store:
        store.setup()
        graph = builder.compile(checkpointer=saver, store=store)
    ```
    Its async methods (``aget``, ``asearch`` ...) work too; :class:`AsyncS3Store` is the same store
    opened with ``async with``.
    """

    @classmethod
    @contextmanager
    def from_conn_string(
        cls, url: str, *, index: IndexConfig | None = None, ttl: TTLConfig | None = None, **kwargs: Any
    ) -> Iterator[S3Store]:
        with cls._from_url(url, index=index, ttl=ttl, **kwargs) as store:
            yield store

    def setup(self) -> None:
        """Check the bucket (creating it with ``create_bucket=True``) and conditional-write support."""
        self._run("setup", self._setup_plan())

    # -- TTL: a sweeper thread, as PostgresStore's --------------------------------------------------
    _sweeper: threading.Thread | None = None
    _sweeper_stop: threading.Event
    _sweeper_future: concurrent.futures.Future[None] | None = None

    def sweep_ttl(self, *, full: bool = False) -> int:
        """Delete every expired item now; returns how many. (Reads are already blind to them.) ``full``: read
        every item instead of only those whose expiry came due (after older releases wrote items)."""
        return self._run("sweep_ttl", self._core.sweep(full), bounded=False)

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> concurrent.futures.Future[None]:
        """Sweep expired items every ``sweep_interval_minutes`` (default: ``ttl_config``'s, else 5) on a
        daemon thread, as PostgresStore does; the future completes when :meth:`stop_ttl_sweeper` stops it.
        Without a ``ttl_config`` nothing starts and the future is already done."""
        self._io.check_open("start_ttl_sweeper")
        if self._sweeper is not None and self._sweeper.is_alive() and self._sweeper_future is not None:
            return self._sweeper_future
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        interval = self._sweep_interval_s(sweep_interval_minutes)
        if interval is None:
            future.set_result(None)
            return future
        stop = self._sweeper_stop = threading.Event()

        def loop() -> None:
            while not stop.wait(interval):
                try:
                    _log_sweep(self, self._io.run(self._core.sweep(), bounded=False))
                except Exception:
                    _log_failed_sweep(self)
            future.set_result(None)

        self._sweeper = threading.Thread(target=loop, daemon=True, name="lgs3-store-ttl-sweeper")
        self._sweeper_future = future
        self._sweeper.start()
        return future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread; whether it stopped within ``timeout`` seconds."""
        if self._sweeper is None:
            return True
        self._sweeper_stop.set()
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        if stopped:
            self._sweeper = None
        return stopped

    def _stop_sweeping(self) -> None:
        if self._sweeper is not None:
            self._sweeper_stop.set()


class AsyncS3Store(BaseS3Store):
    """The asyncio twin of :class:`S3Store` (same objects, same plans, awaited).

    BaseStore's blocking methods (``get``, ``put``, ``search``, ``batch`` ...) work from any thread, the
    event loop's included, as InMemoryStore's do: they drive the plan with the store's own blocking I/O
    (``BucketIO.run``), never by scheduling work on the loop, so they cannot deadlock; called on the loop's
    thread they block the loop for the duration of the call, so prefer ``await store.aget(...)`` there.
    (AsyncPostgresStore refuses such calls because its sync methods wait for a coroutine on the very loop
    they would block.) The TTL methods ``sweep_ttl``, ``start_ttl_sweeper`` and ``stop_ttl_sweeper`` are
    coroutines, as AsyncPostgresStore's are.
    """

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls, url: str, *, index: IndexConfig | None = None, ttl: TTLConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[AsyncS3Store]:
        with cls._from_url(url, index=index, ttl=ttl, **kwargs) as store:
            yield store

    async def setup(self) -> None:
        await self._arun("setup", self._setup_plan())

    # -- TTL: a sweeper task on the event loop, as AsyncPostgresStore's ------------------------------
    # sweep_ttl, start_ttl_sweeper and stop_ttl_sweeper are coroutines here, as in AsyncPostgresStore and
    # AsyncSqliteStore (and what LangGraph's Agent Server awaits): code written for those runs unchanged.
    _sweeper_task: asyncio.Task[None] | None = None

    async def sweep_ttl(self, *, full: bool = False) -> int:
        """Delete every expired item now; returns how many. (Reads are already blind to them.) ``full``: read
        every item instead of only those whose expiry came due (after older releases wrote items)."""
        return await self._arun("sweep_ttl", self._core.sweep(full), bounded=False)

    async def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> asyncio.Task[None]:
        """Sweep expired items every ``sweep_interval_minutes`` (default: ``ttl_config``'s, else 5) in a task
        on the running loop; the task ends when :meth:`stop_ttl_sweeper` (or closing the store) cancels it.
        Without a ``ttl_config`` nothing sweeps and the task returned ends at once."""
        self._io.check_open("start_ttl_sweeper")
        if self._sweeper_task is not None and not self._sweeper_task.done():
            return self._sweeper_task
        interval = self._sweep_interval_s(sweep_interval_minutes)
        if interval is None:
            return asyncio.create_task(asyncio.sleep(0))

        async def loop() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    _log_sweep(self, await self._io.arun(self._core.sweep(), bounded=False))
                except Exception:
                    _log_failed_sweep(self)

        self._sweeper_task = asyncio.create_task(loop(), name="lgs3-store-ttl-sweeper")
        return self._sweeper_task

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Cancel the sweeper task; whether it ended within ``timeout`` seconds."""
        task = self._sweeper_task
        if task is None or task.done():
            self._sweeper_task = None
            return True
        task.cancel()
        await asyncio.wait({task}, timeout=timeout)
        if task.done():
            self._sweeper_task = None
        return task.done()

    def _stop_sweeping(self) -> None:
        task = self._sweeper_task
        if task is not None and not task.done() and not task.get_loop().is_closed():
            task.get_loop().call_soon_threadsafe(task.cancel)


__all__ = ["AsyncS3Store", "BaseS3Store", "S3Store", "StoreCore", "StoreLayout"]
