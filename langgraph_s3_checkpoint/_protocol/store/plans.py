"""The store's plans, free of I/O: :class:`StorePlans` says what each ``BaseStore`` operation reads and writes."""

from __future__ import annotations

import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from langgraph.store.base import (
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)
from langgraph.store.memory import _compare_values, _does_match

from ...errors import (
    CorruptObjectError,
    InvalidArgumentTypeError,
    StoreConflictError,
)
from .. import expiry
from ..keys import is_digest
from ..lru import LeastRecentlyUsed
from ..plans import all_pages, chunks, one, side_by_side
from ..requests import (
    CREATE,
    PRECONDITION_FAILED,
    DeleteIfMatch,
    DeleteObjects,
    Get,
    ListKeys,
    Page,
    Plan,
    Put,
    Request,
    StoredObject,
    Update,
    Written,
    same_etag,
)
from .layout import (
    DEFAULT_VECTOR_SHARDS,
    HERE,
    MAX_SHARD_ATTEMPTS,
    READ_CHUNK,
    StoreLayout,
    Vectors,
    is_own_segment,
    unescape,
)
from .objects import Expiry, StoreCodec, Stored, expires_at, pack_vector, similarity_scores


# ------------------------------------------------------------------------------------------------
# Plan helpers
# ------------------------------------------------------------------------------------------------
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
# What a store remembers
# ------------------------------------------------------------------------------------------------
NAMES_MEMORY_BYTES = 1024 * 1024
"""What a store keeps of the name objects it knows (:class:`KnownNames`), at most: about 2,000 labels of 300
characters."""
NAME_ENTRY_OVERHEAD = 100
"""Bytes an entry of :class:`KnownNames` costs beside its two strings (its place in the ordered dict)."""


class KnownNames:
    """Digest segment -> the real label (or key) behind it, for the name objects this store knows exist (it wrote
    or read them): least recently used first out, within ``max_bytes``, as the saver's memory is bounded
    (``fencing.Recall``).

    It spares requests, never decides anything: a put under a digest segment it does not know sends the name's
    create-only PUT again (refused when the name exists: one request), and a listing that meets such a segment
    GETs its name again. A long-lived store touching ever new long labels used to keep every one."""

    def __init__(self, max_bytes: int = NAMES_MEMORY_BYTES) -> None:
        self._kept: LeastRecentlyUsed[str, str] = LeastRecentlyUsed(max_bytes)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def max_bytes(self) -> int:
        return self._kept.max_bytes

    @property
    def retained_bytes(self) -> int:
        """Bytes kept now (at most ``max_bytes``), by :func:`sys.getsizeof` of both strings and the entry's
        overhead."""
        return self._kept.retained_bytes

    def get(self, segment: str) -> str | None:
        with self._lock:
            return self._kept.get(segment)

    def remember(self, segment: str, real: str) -> None:
        size = sys.getsizeof(segment) + sys.getsizeof(real) + NAME_ENTRY_OVERHEAD
        with self._lock:
            self._kept.keep(segment, real, size)


# ------------------------------------------------------------------------------------------------
# The plans
# ------------------------------------------------------------------------------------------------
@dataclass
class StorePlans:
    """Plans for every store operation over one bucket prefix."""

    layout: StoreLayout
    codec: StoreCodec
    vector_shards: int = DEFAULT_VECTOR_SHARDS
    indexed: bool = False
    """Whether an index is configured: puts maintain the vector shards, queries read them."""
    distance: str = "cosine"
    """How queries score vectors (``index['distance_type']``, see :data:`DISTANCES`)."""
    now: Callable[[], datetime] = field(default=lambda: datetime.now(timezone.utc))
    names: KnownNames = field(default_factory=KnownNames)
    """Digest segment -> real string, for name objects known to exist (written or read), in a byte budget."""
    sweep_state: expiry.SweepState = field(default_factory=expiry.SweepState)
    """What the TTL sweeps of this store remember (:mod:`.._protocol.expiry`)."""

    @property
    def markers(self) -> expiry.Markers:
        """Keys of the expiry markers (:mod:`.._protocol.expiry`)."""
        return expiry.Markers(self.layout.root, self.layout.items_root)

    @property
    def expiring(self) -> expiry.Expiring[Expiry]:
        """What the expiry markers' plans need of the store (:mod:`.._protocol.expiry`)."""
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
                raise InvalidArgumentTypeError(f"Unknown operation type: {type(op)}")
        if reads:
            answers = yield from side_by_side([plan for _, plan in reads])
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
            Put(s.key, self.codec.refreshed(s, now), mode=Update(s.etag)) for s in items if s.ttl is not None
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
                    if self.names.get(segment) is None:
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
            requests.append(Put(self.layout.name(segment), self.codec.encode_name(real), mode=CREATE))
        for start in range(0, len(deletes), 1000):
            requests.append(DeleteObjects(tuple(deletes[start : start + 1000])))
        # side_by_side() hands each round trip's replies to the plans in order: _send (first) fills in the
        # ETags before any shard plan builds the body of its PUT.
        plans: list[Plan[Any]] = [self._send(requests, entries)]
        plans += [self.update_shard(shard, changes, versions) for shard, changes in shard_updates.items()]
        yield from side_by_side(plans)
        for segment, real in new_names.items():
            self.names.remember(segment, real)

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
            return Put(shard, self.codec.encode_shard(entries), mode=CREATE, expires=False)
        if not entries:
            return DeleteIfMatch(shard, obj.etag)
        return Put(shard, self.codec.encode_shard(entries), mode=Update(obj.etag), expires=False)

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
            item_pages, shard_pages = yield from side_by_side(
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
            level: list[Plan[Any]] = [
                side_by_side([all_pages(self.layout.items(ns), delimiter="/") for ns in frontier]),
                self._namespaces_holding_items(checks, found),
            ]
            listings, proven = yield from side_by_side(level)
            found |= proven
            checks, children = self._split_level(walk, frontier, listings)
            labels = yield from self._learn_names(segment for _, segment in children)
            frontier = self._next_frontier(walk, children, checks, labels)
        return sorted(found)[op.offset : op.offset + op.limit]

    def _namespaces_holding_items(
        self, checks: dict[tuple[str, ...], list[str]], found: set[tuple[str, ...]]
    ) -> Plan[set[tuple[str, ...]]]:
        """Which namespaces to report hold an item: one LIST (``max_keys`` 10) per listing prefix of
        each, all in one round trip; namespaces already found are not checked again."""
        pending = [
            (result, prefix) for result, prefixes in checks.items() if result not in found for prefix in prefixes
        ]
        verdicts = yield from side_by_side([self._holds_item(prefix) for _, prefix in pending])
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

    def _learn_names(self, segments: Iterable[str]) -> Plan[dict[str, str]]:
        """The labels behind the digest segments among ``segments``: those remembered, and the others' name objects
        GET in one round trip (remembered too); a digest whose name object is missing has none. Returned, not only
        remembered: one level may meet more names than :class:`KnownNames` keeps."""
        labels: dict[str, str] = {}
        unknown: list[str] = []
        for segment in sorted({s for s in segments if is_digest(s)}):
            known = self.names.get(segment)
            if known is None:
                unknown.append(segment)
            else:
                labels[segment] = known
        if unknown:
            objs = yield [Get(self.layout.name(s)) for s in unknown]
            for segment, obj in zip(unknown, objs, strict=True):
                if obj is not None:
                    labels[segment] = self.codec.decode_name(self.layout.name(segment), obj)
                    self.names.remember(segment, labels[segment])
        return labels

    @staticmethod
    def _label(segment: str, labels: Mapping[str, str]) -> str | None:
        """The label behind a folder segment (``labels``: the level's digests, :meth:`_learn_names`); ``None`` for a
        digest whose name object is missing, or a folder the store did not make."""
        if not is_own_segment(segment):
            return None
        return labels.get(segment) if is_digest(segment) else unescape(segment)

    def _next_frontier(
        self,
        walk: NamespaceWalk,
        children: Sequence[tuple[tuple[str, ...], str]],
        checks: dict[tuple[str, ...], list[str]],
        labels: Mapping[str, str],
    ) -> list[tuple[str, ...]]:
        """The child namespaces to list at the next level: those the prefix conditions allow, except
        where the walk is cut at ``max_depth`` — a cut subtree is added to ``checks`` instead, to be
        reported (cut) if anything below it is an item. Children that cannot be named are skipped."""
        frontier: list[tuple[str, ...]] = []
        for parent, segment in children:
            label = self._label(segment, labels)
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
        when the store was never filed or ``full``), and its vectors; returns how many (see
        :mod:`.._protocol.expiry`)."""
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
        yield from side_by_side([self.update_shard(k, v) for k, v in updates.items()])


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
