"""The saver's logic, free of I/O: for each LangGraph operation, which objects to read and write, in
what order, under which conditions, and how to turn the replies into a result or an error.

Every operation is a *plan*: a generator that yields batches of :mod:`requests` and receives their
replies (see :mod:`langgraph_s3_checkpoint.requests`). The sync and async savers run the same plans
through two small drivers (:mod:`langgraph_s3_checkpoint.shell`), so there is exactly one copy of the
commit protocol, and it can be read top to bottom here.

The commit protocol (docs/design.md has the long form; ``Core.put`` states it in its docstring):

1. ``put`` writes what the new record needs first, in parallel: large channel values that are not known
   to exist, run-index entries, ``name`` objects.
2. Then it sends the record and the ``head`` together. The head is a full copy of the record, replaced
   conditionally: ``If-Match`` on the ETag this saver observed at the parent, ``If-None-Match: *`` for a
   new thread, or ``If-Match`` on a head just read for a fork. That conditional PUT is the commit, and
   the point where a second writer loses. Each record names the head it replaced, so the committed
   records form a chain that every reader follows (:mod:`langgraph_s3_checkpoint.chain`).

A crash before the head lands leaves a record off the chain, invisible; a crash after it leaves a
committed checkpoint whose record, if it did not land, is restored from the head.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from enum import Enum
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_metadata,
    writes_sort_key,
)

from .chain import Chain, Standing
from .codec import Codec, RawWrite, Record, WriteBatch
from .errors import (
    CREATE_BUCKET_ADVICE,
    BucketNotFoundError,
    CheckpointConflictError,
    ClockSkewError,
    ConditionalWritesUnsupportedError,
    CorruptObjectError,
    InvalidArgumentTypeError,
    InvalidConfigError,
    TargetThreadExistsError,
)
from .keys import Layout, escape, is_digest, unescape
from .plans import MAX_PAGE, READ_BATCH, chunks, collect, deletes, each, list_all, one, pages
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

ROLLBACK_ATTEMPTS = 5
"""How often ``delete_for_runs`` starts over when the run it deletes commits again meanwhile."""
PRUNE_GRACE = timedelta(minutes=10)
"""prune(keep_latest) leaves unreferenced objects younger than this alone (they may be an in-flight put's)."""
WRITE_ATTEMPTS = 8
"""How often ``put_writes`` merges into a task's writes object that another call changed meanwhile."""
JOIN_ATTEMPTS = 5
"""How often an unfenced ``put`` re-reads a head that moved under it before giving up."""

ABSENT = "<absent>"
"""Key of the observation "this saver saw no head for the namespace" (a parentless put's parent)."""
SUPERSEDED = "<superseded>"
"""ETag of a head this saver committed that another writer has already continued: its next put loses."""


# ------------------------------------------------------------------------------------------------
# Config parsing
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str | None


def parse_config(config: RunnableConfig | None, *, need_checkpoint_id: bool = False) -> Target:
    configurable = (config or {}).get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None:
        raise InvalidConfigError(
            "config['configurable']['thread_id'] is required, e.g. {'configurable': {'thread_id': 'my-thread'}}"
        )
    ns = configurable.get("checkpoint_ns") or ""
    checkpoint_id = configurable.get("checkpoint_id") or None
    if need_checkpoint_id and checkpoint_id is None:
        raise InvalidConfigError(
            "config['configurable']['checkpoint_id'] is required here: pass the config returned by put()"
        )
    if not isinstance(ns, str) or (checkpoint_id is not None and not isinstance(checkpoint_id, str)):
        raise InvalidConfigError("checkpoint_ns and checkpoint_id must be strings")
    return Target(str(thread_id), ns, checkpoint_id)


def checkpoint_config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


# ------------------------------------------------------------------------------------------------
# What a saver remembers between calls (bounded; guarded by a lock, never held across I/O)
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HeadSeen:
    """What this saver knows of a head it observed: enough to continue it without reading anything."""

    etag: str
    blobs: Mapping[str, str]
    """Large values (channel -> version) the head's record references: they exist while it is the head."""
    run_id: str | None
    """The run that wrote it: a put of the same run needs no new run-index entry."""


@dataclass(frozen=True)
class Fenced:
    """The put continues a head this saver observed: commit only if it still has this ETag."""

    seen: HeadSeen


@dataclass(frozen=True)
class NewThread:
    """This saver observed that the namespace has no head: commit only if there still is none."""


@dataclass(frozen=True)
class Join:
    """Read the head and commit on top of it: a fork or replay from a checkpoint this saver read
    explicitly (``fork``), or a parent this saver knows nothing of (a fresh saver, an evicted memory)."""

    fork: bool = False


Fence = Fenced | NewThread | Join


class SaverMemory:
    r"""The head this saver last observed in each namespace (the basis of fencing), and when it last
    wrote large values.

    ``heads[(thread, ns)]`` is the checkpoint id the head pointed at when this saver last read or
    wrote it, with the :class:`HeadSeen` of that moment (``None`` for "saw no head"). Only a put whose
    parent is that very checkpoint is :class:`Fenced`: an older parent means the saver has itself seen
    the thread move past it, so the put is a fork (LangGraph's ``__copy__`` updates, a subgraph starting
    over during a replay) and :class:`Join`\ s. Reading a checkpoint explicitly (by id, or below a
    ``before`` bound) is how LangGraph starts a replay, so it marks that checkpoint as a fork point,
    which also exempts a step on top of it from the straggler rule (see ``Core.put``). Everything else
    the saver might remember (that a large value or a ``name`` object exists, that a run is indexed) is
    derived from the observed head, so it is only trusted while the fence holds: nothing here can
    outlive what it describes.
    """

    def __init__(self, max_threads: int = 10_000, blobs_per_namespace: int = 256) -> None:
        self._lock = threading.Lock()
        self._blobs_per_namespace = blobs_per_namespace
        self._max_threads = max_threads
        self._heads: OrderedDict[tuple[str, str], tuple[str, HeadSeen | None]] = OrderedDict()
        self._written: OrderedDict[tuple[str, str], dict[tuple[str, str], datetime]] = OrderedDict()
        self._forks: OrderedDict[tuple[str, str, str], None] = OrderedDict()

    def _touch(self, table: OrderedDict[Any, Any], key: Any, default: Any) -> Any:
        entry = table.get(key)
        if entry is None:
            entry = table[key] = default
            while len(table) > self._max_threads:
                table.popitem(last=False)
        else:
            table.move_to_end(key)
        return entry

    def saw_head(self, thread_id: str, ns: str, checkpoint_id: str | None, seen: HeadSeen | None) -> None:
        with self._lock:
            self._heads[(thread_id, ns)] = (checkpoint_id or ABSENT, seen)
            self._heads.move_to_end((thread_id, ns))
            while len(self._heads) > self._max_threads:
                self._heads.popitem(last=False)

    def fence(self, thread_id: str, ns: str, parent_id: str | None) -> Fence:
        """How a put with this parent commits."""
        with self._lock:
            observed = self._heads.get((thread_id, ns))
            if observed is not None and observed[0] == (parent_id or ABSENT):
                return NewThread() if observed[1] is None else Fenced(observed[1])
            return Join(fork=parent_id is not None and (thread_id, ns, parent_id) in self._forks)

    def read_explicitly(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        """A checkpoint was read by id or below a bound: how LangGraph starts a replay or a fork.

        A put on top of it joins the current head instead of being fenced on an old observation, and
        is not taken for a straggler when the head has moved on.
        """
        with self._lock:
            self._touch(self._forks, (thread_id, ns, checkpoint_id), None)

    def forget_namespace(self, thread_id: str, ns: str) -> None:
        """After a surprise (a conflict, a rollback): the next put reads the head again."""
        with self._lock:
            self._heads.pop((thread_id, ns), None)

    def forget_thread(self, thread_id: str) -> None:
        with self._lock:
            tables: tuple[OrderedDict[Any, Any], ...] = (self._heads, self._written, self._forks)
            for table in tables:
                for key in [k for k in table if k[0] == thread_id]:
                    del table[key]

    def wrote_blobs(self, thread_id: str, ns: str, refs: Mapping[str, str], when: datetime | None) -> None:
        """Remember when these (channel -> version) values were written, for lifecycle renewal."""
        if when is None:
            return
        with self._lock:
            known = self._touch(self._written, (thread_id, ns), {})
            for ref in refs.items():
                known.pop(ref, None)
                known[ref] = when  # re-inserted: the most recently referenced values are kept
            while len(known) > self._blobs_per_namespace:
                del known[next(iter(known))]

    def blob_written(self, thread_id: str, ns: str, channel: str, version: str) -> datetime | None:
        with self._lock:
            return self._written.get((thread_id, ns), {}).get((channel, version))


@dataclass
class _Limit:
    remaining: int | None

    @property
    def done(self) -> bool:
        return self.remaining is not None and self.remaining <= 0

    def take(self) -> None:
        if self.remaining is not None:
            self.remaining -= 1


@dataclass
class _NsCursor:
    """Newest-first stream of one namespace's committed records, each with its writes keys.

    One LIST of ``c/`` returns every record followed by the keys of its pending writes, so the cursor
    groups them as they come; a record is complete once the next record (or the end) has been seen.
    Which records are committed is the :class:`~langgraph_s3_checkpoint.chain.Chain`'s decision.
    """

    checkpoint_ns: str
    prefix: str
    start_after: str | None
    page_size: int
    reuse: bool = True
    """Whether reads carry the ETag the listing showed (so the store may answer them from its cache)."""
    chain: Chain = field(default_factory=lambda: Chain(None, None))
    buffer: list[tuple[Get, list[Get]]] = field(default_factory=list)
    token: str | None = None
    exhausted: bool = False
    _current: str | None = None
    """Checkpoint id of the record the writes being listed belong to (``None``: skip them)."""

    def restart(self) -> None:
        """List from the newest record: the chain must be walked from the head."""
        self.start_after, self.token, self.exhausted, self._current = None, None, False, None
        self.buffer.clear()

    def admit(self, record: Record) -> bool:
        """Whether a record (met in newest-first order) was committed."""
        return self.chain.standing(record.checkpoint["id"], record.previous_head, record.detached) is Standing.COMMITTED

    def accept(self, page: Page) -> None:
        # Start small and double: a walk that stops early (a page of history, the writes since the
        # last DeltaChannel snapshot) lists and parses only a little more than it uses. Scans start
        # at the full page size.
        self.page_size = min(MAX_PAGE, self.page_size * 2)
        self.token = page.token
        head_id = self.chain.head_id
        # Without a head nothing in the namespace is committed.
        self.exhausted = page.token is None or head_id is None
        if head_id is None:
            return
        for read in page.reads(with_etags=self.reuse):
            parsed = Layout.parse_checkpoint_key(self.prefix, read.key)
            if parsed is None:
                continue  # not ours (a folder marker, a foreign object)
            if parsed.is_record:
                # Records newer than the head are puts in flight (or dead): never visible.
                self._current = parsed.checkpoint_id if parsed.checkpoint_id <= head_id else None
                if self._current is not None:
                    self.buffer.append((read, []))
            elif parsed.checkpoint_id == self._current:
                # Writes belong to the record listed just before them, and only to it: writes whose
                # record is missing (a cancelled run's, a loser's) are nobody's.
                self.buffer[-1][1].append(read)

    def ready(self) -> int:
        """How many buffered records are complete (their writes fully listed)."""
        return len(self.buffer) if self.exhausted else max(0, len(self.buffer) - 1)

    def request(self) -> ListKeys:
        return ListKeys(
            self.prefix,
            start_after=None if self.token else self.start_after,
            max_keys=self.page_size,
            token=self.token,
        )


# ------------------------------------------------------------------------------------------------
# The core
# ------------------------------------------------------------------------------------------------
@dataclass
class Core:
    """Plans for every saver operation over one bucket prefix."""

    layout: Layout
    codec: Codec
    inline_threshold: int = 4096
    ttl: timedelta | None = None
    """With a lifecycle TTL, objects expire this long after they were written (see ``setup``)."""
    memory: SaverMemory = field(default_factory=SaverMemory)

    # -- reading ------------------------------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> Plan[CheckpointTuple | None]:
        t = parse_config(config)
        if t.checkpoint_id is None:
            return (yield from self._get_latest(t.thread_id, t.checkpoint_ns))
        return (yield from self._get_by_id(t.thread_id, t.checkpoint_ns, t.checkpoint_id))

    def _get_latest(self, thread_id: str, ns: str) -> Plan[CheckpointTuple | None]:
        head_key = self.layout.head(thread_id, ns)
        head = yield from one(Get(head_key))
        if head is None:
            self.memory.saw_head(thread_id, ns, None, None)
            return None
        record = self.codec.decode_record(head_key, head.body)
        checkpoint_id = record.checkpoint["id"]
        self.memory.saw_head(thread_id, ns, checkpoint_id, _seen(head, record))
        folder = self.layout.checkpoint_dir(thread_id, ns, checkpoint_id)
        listing = yield from one(ListKeys(folder))
        key = self.layout.record(thread_id, ns, checkpoint_id)
        # The head was committed but its record was not (a crash between the two parallel PUTs):
        # restore the record from the head, which is a copy of it.
        repair = [] if key in listing.keys else [Put(key, head.body, if_none_match=True)]
        write_reads = yield from self._writes_reads(thread_id, ns, checkpoint_id, listing)
        tuples = yield from self._assemble(thread_id, [(ns, record, write_reads)], repair)
        return tuples[0]

    def _get_by_id(self, thread_id: str, ns: str, checkpoint_id: str) -> Plan[CheckpointTuple | None]:
        key = self.layout.record(thread_id, ns, checkpoint_id)
        head_key = self.layout.head(thread_id, ns)
        obj, listing, head = yield [
            Get(key),
            ListKeys(self.layout.checkpoint_dir(thread_id, ns, checkpoint_id)),
            Get(head_key),
        ]
        repair: list[Request] = []
        if obj is None:
            if head is None or self.codec.peek_head_id(head_key, head.body) != checkpoint_id:
                return None
            # A head-only commit (see _get_latest): the head holds the record.
            obj, key = head, head_key
            repair.append(Put(self.layout.record(thread_id, ns, checkpoint_id), head.body, if_none_match=True))
        record = self.codec.decode_record(key, obj.body)
        if (yield from self._standing(thread_id, ns, record, head)) is not Standing.COMMITTED:
            return None  # a put that never committed (or has not yet): not part of the thread
        # Asking for a checkpoint by id is how forks and replays start, so a put on top of it is a
        # fork (joins the current head), never a fenced continuation.
        self.memory.read_explicitly(thread_id, ns, checkpoint_id)
        write_reads = yield from self._writes_reads(thread_id, ns, checkpoint_id, listing)
        tuples = yield from self._assemble(thread_id, [(ns, record, write_reads)], repair)
        return tuples[0]

    def _writes_reads(self, thread_id: str, ns: str, checkpoint_id: str, listing: Page) -> Plan[list[Get]]:
        """Reads of a checkpoint's writes objects, from the listing of its folder (and its next pages)."""
        prefix = self.layout.records(thread_id, ns)
        keys = list(listing.keys)
        if listing.token is not None:
            keys += yield from list_all(self.layout.checkpoint_dir(thread_id, ns, checkpoint_id), listing.token)
        reads = []
        for key in keys:
            parsed = Layout.parse_checkpoint_key(prefix, key)
            if parsed is not None and not parsed.is_record and parsed.checkpoint_id == checkpoint_id:
                reads.append(Get(key))
        return reads

    def _standing(self, thread_id: str, ns: str, record: Record, head: Obj | None) -> Plan[Standing]:
        """Whether ``record`` is committed, by :mod:`chain`'s rule, walking down from ``head``."""
        if head is None:
            return Standing.PENDING
        try:
            head_id, head_previous = self.codec.peek_chain(self.layout.head(thread_id, ns), head.body)
        except CorruptObjectError:
            # A damaged head fails the latest read, which names it; what was committed below it cannot
            # be judged, so a record read by id is trusted rather than the whole history hidden.
            return Standing.COMMITTED
        chain = Chain.from_head(head_id, head_previous)
        checkpoint_id = record.checkpoint["id"]
        if not record.detached and (known := chain.decided(checkpoint_id)) is not None:
            return known
        if record.detached:
            return chain.standing(checkpoint_id, record.previous_head, True)
        # Walk the records between the head and this one: each names the head it replaced.
        prefix = self.layout.records(thread_id, ns)
        start_after: str | None = self.layout.record(thread_id, ns, head_id)
        token: str | None = None
        page_size = 100
        while True:
            page: Page = yield from one(ListKeys(prefix, start_after=start_after, token=token, max_keys=page_size))
            page_size = min(MAX_PAGE, page_size * 2)
            reads = []
            for read in page.reads():
                parsed = Layout.parse_checkpoint_key(prefix, read.key)
                if parsed is not None and parsed.is_record and checkpoint_id <= parsed.checkpoint_id < head_id:
                    reads.append((parsed.checkpoint_id, read))
            for chunk in chunks(reads, READ_BATCH):
                objs = yield [read for _, read in chunk]
                for (cid, read), obj in zip(chunk, objs, strict=True):
                    if cid == checkpoint_id:
                        return chain.standing(cid, record.previous_head, record.detached)
                    try:
                        if obj is None:
                            continue  # deleted since the listing: a missing link
                        previous, detached = self.codec.peek_link(read.key, obj.body)
                    except CorruptObjectError:
                        continue  # a damaged record is reported when read itself; here, a missing link
                    chain.standing(cid, previous, detached)
                    if (known := chain.decided(checkpoint_id)) is not None:
                        return known
            if page.token is None:
                return chain.standing(checkpoint_id, record.previous_head, record.detached)
            start_after, token = None, page.token

    def _assemble(
        self, thread_id: str, items: Sequence[tuple[str, Record, list[Get]]], extra: Sequence[Request] = ()
    ) -> Plan[list[CheckpointTuple]]:
        """Fetch the blobs and writes of several records (ns, record, writes reads) in one parallel batch."""
        requests: list[Request] = []
        for ns, record, write_reads in items:
            requests.extend(Get(self.layout.blob(thread_id, ns, ch, v)) for ch, v in record.blobs.items())
            requests.extend(write_reads)
        requests.extend(extra)
        replies = iter((yield requests) if requests else [])
        tuples = []
        for ns, record, write_reads in items:
            values = dict(record.inline)
            for ch, version in record.blobs.items():
                key = self.layout.blob(thread_id, ns, ch, version)
                blob = next(replies)
                if blob is None:
                    raise CorruptObjectError(key, "a channel value the checkpoint references is missing")
                values[ch] = self.codec.decode_blob(key, blob.body)
                self.memory.wrote_blobs(thread_id, ns, {ch: version}, blob.modified)
            batches = []
            for read in write_reads:
                obj = next(replies)
                if obj is not None:
                    batches.append(self.codec.decode_writes(read.key, obj.body))
            tuples.append(self._tuple(thread_id, ns, record, values, batches))
        return tuples

    def _tuple(
        self, thread_id: str, ns: str, record: Record, values: dict[str, Any], batches: list[WriteBatch]
    ) -> CheckpointTuple:
        checkpoint = cast(Checkpoint, {**record.checkpoint, "channel_values": values})
        return CheckpointTuple(
            config=checkpoint_config(thread_id, ns, checkpoint["id"]),
            checkpoint=checkpoint,
            metadata=record.metadata,
            parent_config=checkpoint_config(thread_id, ns, record.parent_id) if record.parent_id else None,
            pending_writes=merge_writes(batches),
        )

    def list_checkpoints(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Plan[None]:
        """Stream matching tuples newest first within each thread (threads in key order)."""
        budget = _Limit(limit)
        if budget.done:
            return
        before_id = ((before or {}).get("configurable") or {}).get("checkpoint_id")
        if config is None:
            root = self.layout.threads_root

            def threads(page: Page) -> Plan[bool]:
                for prefix in page.prefixes:
                    thread_id = yield from self._name_of(self.layout.segment_after(prefix, root), prefix)
                    if thread_id is None:
                        continue  # a folder we did not make
                    yield from self._list_thread(thread_id, None, None, filter, before_id, budget)
                    if budget.done:
                        return False
                return True

            yield from each(pages(root, delimiter="/"), threads)
            return
        t = parse_config(config)
        configurable = config.get("configurable") or {}
        ns = t.checkpoint_ns if "checkpoint_ns" in configurable else None
        yield from self._list_thread(t.thread_id, ns, t.checkpoint_id, filter, before_id, budget)

    def _name_of(self, segment: str, prefix: str) -> Plan[str | None]:
        """The real id behind a thread or namespace segment; ``None`` for a segment we did not make
        (a foreign folder such as ``%ZZ``, or a digest without its ``name`` object)."""
        try:
            if not is_digest(segment):
                name = unescape(segment)
            else:
                obj = yield from one(Get(f"{prefix}name"))
                if obj is None:
                    return None
                name = obj.body.decode("utf-8", "surrogatepass")
        except (ValueError, UnicodeDecodeError):
            return None
        return name if escape(name) == segment else None

    def _namespaces(self, thread_id: str) -> Plan[list[str]]:
        root = self.layout.namespaces(thread_id)
        found: list[Page] = []
        yield from collect(pages(root, delimiter="/"), found)
        names = []
        for page in found:
            for prefix in page.prefixes:
                name = yield from self._name_of(self.layout.segment_after(prefix, root), prefix)
                if name is not None:
                    names.append(name)
        return names

    def _list_thread(
        self,
        thread_id: str,
        ns: str | None,
        checkpoint_id: str | None,
        filter: dict[str, Any] | None,
        before_id: str | None,
        budget: _Limit,
        reuse: bool | None = None,
        first_page: int | None = None,
    ) -> Plan[None]:
        """Stream a thread's committed tuples newest first.

        ``reuse`` says whether the records read may be served from and kept in the read cache; by
        default only bounded listings use it: a walk over a whole history is a scan, which would
        evict what is worth keeping and make the listing's memory grow with the history.
        ``first_page`` starts a walk that will probably stop early with a small page (pages double).
        """
        namespaces = [ns] if ns is not None else (yield from self._namespaces(thread_id))
        if checkpoint_id is not None:
            for name in namespaces:
                tup = yield from self.get_tuple(checkpoint_config(thread_id, name, checkpoint_id))
                if (
                    tup is not None
                    and matches(tup.metadata, filter)
                    and (before_id is None or checkpoint_id < before_id)
                ):
                    yield Emit(tup)
                    budget.take()
                    if budget.done:
                        return
            return
        # Records and their writes share one listing; a generous page keeps it to one LIST for small k.
        if first_page is not None:
            page_size = first_page
        elif budget.remaining is None or filter:
            page_size = MAX_PAGE  # a scan: full pages, so its peak memory is the same at any length
        else:
            page_size = min(MAX_PAGE, max(100, 10 * budget.remaining + 10))
        cursors = [
            _NsCursor(
                checkpoint_ns=name,
                prefix=self.layout.records(thread_id, name),
                start_after=self.layout.record(thread_id, name, before_id) if before_id else None,
                page_size=page_size,
                reuse=budget.remaining is not None if reuse is None else reuse,
            )
            for name in namespaces
        ]
        if not cursors:
            return
        first: list[Request] = []
        for c in cursors:
            # The head, the first page, and (when paging) the record the page starts below, whose
            # previous_head says where the commit chain continues.
            start = Get(self.layout.record(thread_id, c.checkpoint_ns, before_id)) if before_id else None
            first.extend([Get(self.layout.head(thread_id, c.checkpoint_ns)), c.request(), *([start] if start else [])])
        replies = iter((yield first))
        for c in cursors:
            head, page = next(replies), next(replies)
            head_id, head_previous = (
                self.codec.peek_chain(self.layout.head(thread_id, c.checkpoint_ns), head.body)
                if head is not None
                else (None, None)
            )
            c.chain = Chain.from_head(head_id, head_previous)
            if before_id:
                below = next(replies)
                bound = None if below is None else self.codec.decode_record(c.start_after or "", below.body)
                standing = None
                if bound is not None and not bound.detached:
                    standing = yield from self._standing(thread_id, c.checkpoint_ns, bound, head)
                if bound is None or standing is not Standing.COMMITTED:
                    # The bound is not a record on this namespace's chain (another namespace's id, a
                    # detached, deleted or never committed checkpoint): walk the chain from the head.
                    c.restart()
                    continue
                c.chain = Chain.below(head_id, bound.previous_head)
            c.accept(page)
        # The cursors keep what they need of the first pages: drop the replies, or each namespace's
        # first page (up to 1,000 keys with their stamps) stays alive for the whole listing.
        del replies, head, page
        while not budget.done:
            batch = yield from self._next_batch(cursors, budget, filter)
            if not batch:
                return
            objs = yield [read for _, read, _ in batch]
            chosen: list[tuple[_NsCursor, Record, list[Get]]] = []
            for (cursor, read, write_reads), obj in zip(batch, objs, strict=True):
                if obj is None:  # deleted between the listing and the read
                    continue
                record = self.codec.decode_record(read.key, obj.body)
                if (
                    cursor.admit(record)
                    and (before_id is None or record.checkpoint["id"] < before_id)
                    and matches(record.metadata, filter)
                ):
                    chosen.append((cursor, record, write_reads))
            if budget.remaining is not None:
                chosen = chosen[: budget.remaining]
            # One parallel round trip for the values and writes of every chosen record.
            tuples = yield from self._assemble(thread_id, [(c.checkpoint_ns, r, w) for c, r, w in chosen])
            for tup in tuples:
                if before_id is not None:
                    # Reading below a bound is how LangGraph finds a subgraph's state for a replay:
                    # a put on top of what it returns is a fork, not a continuation.
                    found_in = tup.config["configurable"]["checkpoint_ns"]
                    self.memory.read_explicitly(thread_id, found_in, tup.checkpoint["id"])
                yield Emit(tup)
                budget.take()

    def _next_batch(
        self, cursors: list[_NsCursor], budget: _Limit, filter: dict[str, Any] | None
    ) -> Plan[list[tuple[_NsCursor, Get, list[Get]]]]:
        """Up to READ_BATCH complete records (record and writes reads), merged newest first across namespaces."""
        want = READ_BATCH if filter or budget.remaining is None else min(READ_BATCH, budget.remaining)
        batch: list[tuple[_NsCursor, Get, list[Get]]] = []
        while len(batch) < want:
            starving = [c for c in cursors if not c.ready() and not c.exhausted]
            if starving:
                listed = yield [c.request() for c in starving]
                for c, page in zip(starving, listed, strict=True):
                    c.accept(page)
                continue
            live = [c for c in cursors if c.ready()]
            if not live:
                break
            # Inverted ids: the smallest key is the newest checkpoint.
            best = min(live, key=lambda c: c.buffer[0][0].key[len(c.prefix) :])
            read, write_reads = best.buffer.pop(0)
            batch.append((best, read, write_reads))
        return batch

    # -- writing ------------------------------------------------------------------------------------
    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Plan[RunnableConfig]:
        """Commit one checkpoint.

        1. *Prerequisites*, in parallel: large values the new record references that are not known
           to exist, run-index entries on a run's first put in the namespace, ``name`` objects for
           ids too long to be key segments, and — for a :class:`Join` — a GET of the head.
        2. *Commit*: the record ``c/{R}/checkpoint`` and the head are sent together. The head is a full
           copy of the record, replaced conditionally (the :data:`Fence`): ``If-Match`` on the ETag
           this saver observed at the parent, ``If-None-Match: *`` for a new thread, or ``If-Match`` on
           the ETag just read for a join. That conditional PUT is the commit and the point where a
           second writer loses. The record names the head it replaces (``previous_head``), which is
           what makes the committed records a chain (see :mod:`langgraph_s3_checkpoint.chain`).
        3. *Outcome* of a refused head PUT (:func:`refused_outcome`): the saver reads the head, and if
           this checkpoint is the head or on its chain, an earlier attempt was applied and only its
           answer was lost — committed. Otherwise a join retries on the new head, and a fenced put
           deletes its record (provably never committed) and raises :class:`CheckpointConflictError`.
        """
        t = parse_config(config)
        thread_id, ns, parent_id = t.thread_id, t.checkpoint_ns, t.checkpoint_id
        checkpoint_id = checkpoint["id"]
        stored_metadata = get_checkpoint_metadata(config, metadata)
        run_id = None if stored_metadata.get("run_id") is None else str(stored_metadata["run_id"])
        fence = self.memory.fence(thread_id, ns, parent_id)
        if isinstance(fence, Fenced):
            if fence.seen.etag == SUPERSEDED:
                raise CheckpointConflictError(thread_id, ns)
            if parent_id is not None and checkpoint_id <= parent_id:
                raise ClockSkewError(thread_id, ns, checkpoint_id, parent_id)
        now = datetime.now(timezone.utc)
        values = self._split_values(thread_id, ns, checkpoint, new_versions, fence, now)
        prerequisites = [*values.puts, *self._run_entries(run_id, thread_id, ns, checkpoint_id, fence)]
        if not isinstance(fence, Fenced):
            prerequisites += self._names(thread_id, ns)  # a fenced parent's head proves they exist
        head_key = self.layout.head(thread_id, ns)
        record_key = self.layout.record(thread_id, ns, checkpoint_id)
        joining = isinstance(fence, Join)
        head_now: Obj | None = None
        if prerequisites or joining:
            replies = yield [*prerequisites, *([Get(head_key)] if joining else [])]
            head_now = replies[-1] if joining else None

        def record(previous_head: str | None, detached: bool) -> bytes:
            return self.codec.encode_record(
                checkpoint,
                stored_metadata,
                parent_id,
                values.inline,
                values.blobs,
                previous_head=previous_head,
                detached=detached,
            )

        commit = _Commit(thread_id, ns, checkpoint_id, parent_id, stored_metadata.get("source"), head_key, record_key)
        committed_etag = yield from self._commit(commit, fence, head_now, record)
        if committed_etag is not None:
            seen = HeadSeen(committed_etag, dict(values.blobs), run_id)
            self.memory.saw_head(thread_id, ns, checkpoint_id, seen)
        self.memory.wrote_blobs(thread_id, ns, values.renewed, now)
        return checkpoint_config(thread_id, ns, checkpoint_id)

    def _commit(
        self, c: _Commit, fence: Fence, head_now: Obj | None, record: Callable[[str | None, bool], bytes]
    ) -> Plan[str | None]:
        """Send the record and the head until one of :class:`Outcome` settles it; the committed head's
        ETag (``None`` for a detached commit, :data:`SUPERSEDED` if another writer already continued it)."""
        for _ in range(JOIN_ATTEMPTS):
            attempt = self._attempt(c, fence, head_now)
            if isinstance(attempt, str):
                return attempt  # this very put already committed (a retry through a new saver)
            if attempt is None:
                # An older id than the head's (a fork that lost a race with a newer one): it does not
                # move the head, exactly as "latest" is the newest id for every LangGraph saver. Its
                # record alone is the commit.
                yield [Put(c.record_key, record(None, True))]
                return None
            previous, head_put, extra = attempt
            body = record(previous, False)
            replies = yield [Put(c.record_key, body), dataclasses.replace(head_put, body=body), *extra]
            if isinstance(replies[1], Stored):
                return replies[1].etag
            head_now = yield from one(Get(c.head_key))
            ours = Standing.PENDING
            if head_now is not None:
                mine = self.codec.decode_record(c.record_key, body)
                ours = yield from self._standing(c.thread_id, c.ns, mine, head_now)
            outcome = refused_outcome(fence, head_now, c.checkpoint_id, ours, self.codec.peek_head_id, c.head_key)
            if outcome is Outcome.COMMITTED:
                if head_now is not None and self.codec.peek_head_id(c.head_key, head_now.body) == c.checkpoint_id:
                    return head_now.etag
                return SUPERSEDED
            if outcome is Outcome.CONFLICT:
                break
        yield [Delete((c.record_key,))]  # never committed, and never can be
        self.memory.forget_namespace(c.thread_id, c.ns)
        detail = "" if not isinstance(fence, Join) else f" ({JOIN_ATTEMPTS} attempts to join the moving head)"
        raise CheckpointConflictError(c.thread_id, c.ns, detail)

    def _attempt(self, c: _Commit, fence: Fence, head_now: Obj | None) -> _HeadSwap | str | None:
        """What one commit attempt sends, decided from the fence and the head just read (no I/O).

        Returns ``(previous_head, head PUT without its body, extra requests)``; the head's ETag if the
        head already holds this checkpoint; ``None`` for a detached commit. Raises for a straggler and
        for a clock behind the head's.
        """
        if isinstance(fence, Fenced):
            return c.parent_id, Put(c.head_key, b"", if_match=fence.seen.etag), []
        if head_now is None:
            return None, Put(c.head_key, b"", if_none_match=True), []
        head_id = self.codec.peek_head_id(c.head_key, head_now.body)
        if head_id == c.checkpoint_id:
            return head_now.etag
        straggler = isinstance(fence, Join) and not fence.fork and c.source == "loop"
        if straggler and c.parent_id not in (None, head_id):
            # A step continues its parent, which must still be the head: this is a straggler whose
            # saver no longer remembers the head it read (the memory is bounded), not a replay (those
            # read their starting checkpoint explicitly, which marks it a fork).
            raise CheckpointConflictError(c.thread_id, c.ns)
        if c.checkpoint_id < head_id:
            if c.parent_id == head_id:
                raise ClockSkewError(c.thread_id, c.ns, c.checkpoint_id, head_id)
            return None
        # The head may be a head-only commit (its record PUT failed): make sure its record exists
        # before the head moves on, or it would be lost from history.
        repair = Put(self.layout.record(c.thread_id, c.ns, head_id), head_now.body, if_none_match=True)
        return head_id, Put(c.head_key, b"", if_match=head_now.etag), [repair]

    def _split_values(
        self,
        thread_id: str,
        ns: str,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
        fence: Fence,
        now: datetime,
    ) -> _Values:
        """Inline the small channel values; store the large ones once per (channel, version).

        A large value is sent unless the fenced parent references the same version (its head is
        still there, so its values are). Anything else is offered with ``If-None-Match``, which the
        server refuses without storing if it exists. With a lifecycle TTL, values are rewritten once
        they are older than half of it: the rule expires objects by their own age, and a live
        thread must not lose a value it still references.
        """
        values = checkpoint["channel_values"]
        result = _Values()
        for channel, version in checkpoint["channel_versions"].items():
            if channel not in values:
                continue
            typed = self.codec.encode_value(channel, values[channel])
            if len(typed[1]) <= self.inline_threshold:
                result.inline[channel] = typed
                continue
            version = str(version)
            result.blobs[channel] = version
            key = self.layout.blob(thread_id, ns, channel, version)
            vouched = isinstance(fence, Fenced) and fence.seen.blobs.get(channel) == version
            if self.ttl is None:
                if not vouched:
                    result.puts.append(Put(key, self.codec.encode_blob(typed), if_none_match=True))
                continue
            written = self.memory.blob_written(thread_id, ns, channel, version)
            if not vouched or written is None or now - written > self.ttl / 2:
                result.puts.append(Put(key, self.codec.encode_blob(typed)))
                result.renewed[channel] = version
        return result

    def _run_entries(
        self, run_id: str | None, thread_id: str, ns: str, checkpoint_id: str, fence: Fence
    ) -> list[Request]:
        """Run-index entries (the run's first checkpoint id here), unless the fenced parent is the run's."""
        if run_id is None or (isinstance(fence, Fenced) and fence.seen.run_id == run_id):
            return []
        marker = checkpoint_id.encode()
        return [
            Put(self.layout.run_entry(run_id, thread_id, ns), marker, if_none_match=True),
            Put(self.layout.thread_run_entry(run_id, thread_id, ns), marker, if_none_match=True),
        ]

    def _names(self, thread_id: str, ns: str) -> list[Request]:
        """``name`` objects for ids too long to be key segments (create-only: a rewrite is refused)."""
        named = ((thread_id, self.layout.thread_name(thread_id)), (ns, self.layout.ns_name(thread_id, ns)))
        return [
            Put(key, value.encode("utf-8", "surrogatepass"), if_none_match=True, expires=False)
            for value, key in named
            if is_digest(escape(value))
        ]

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> Plan[None]:
        """Store a task's writes with InMemorySaver's rule, per (task, idx): the first write of a regular
        channel wins, a special channel (error, interrupt, resume, scheduled) replaces.

        One object per task holds all its writes. The first call creates it (``If-None-Match``: one
        PUT, and a retried PUT changes nothing). A later call for the same task — a node that
        interrupts and then completes, a task retried after a crash — reads it and replaces it with the
        merge, conditional on the ETag it read, so concurrent calls cannot drop each other's writes.
        """
        t = parse_config(config, need_checkpoint_id=True)
        assert t.checkpoint_id is not None
        if not writes:
            return
        new = [
            (WRITES_IDX_MAP.get(channel, i), channel, self.codec.dump(f"the write to channel {channel!r}", value))
            for i, (channel, value) in enumerate(writes)
        ]
        key = self.layout.task_writes(t.thread_id, t.checkpoint_ns, t.checkpoint_id, task_id)
        put = Put(key, self.codec.encode_task_writes(task_id, task_path, new), if_none_match=True)
        for _ in range(WRITE_ATTEMPTS):
            if isinstance((yield from one(put)), Stored):
                return
            stored = yield from one(Get(key))
            if stored is None:
                put = dataclasses.replace(put, if_match=None, if_none_match=True)
                continue  # deleted meanwhile (a rollback): create it again
            merged = merge_task_writes(self.codec.peek_task_writes(key, stored.body), new)
            if merged is None:
                return  # nothing new: a retry, or writes that lost to earlier ones
            put = Put(key, self.codec.encode_task_writes(task_id, task_path, merged), if_match=stored.etag)
        raise CheckpointConflictError(
            t.thread_id, t.checkpoint_ns, f" (task {task_id!r} kept changing its writes object {key!r})"
        )

    # -- deleting and copying -----------------------------------------------------------------------
    def delete_thread(self, thread_id: str) -> Plan[None]:
        # Heads first: once they are gone the thread reads as empty, so a crash part-way through
        # never leaves a half-deleted thread that looks alive.
        root = self.layout.namespaces(thread_id)
        found: list[Page] = []
        yield from collect(pages(root, delimiter="/"), found)
        heads = [f"{p}head" for page in found for p in page.prefixes]
        if heads:
            yield deletes(heads)
        thread_prefix = self.layout.thread(thread_id)
        thread_segment = escape(thread_id)
        run_prefix = f"{thread_prefix}r/"

        def delete_page(page: Page) -> Plan[None]:
            keys = list(page.keys)
            keys += [self.layout.global_run_entry_of(k, thread_segment) for k in keys if k.startswith(run_prefix)]
            if keys:
                yield deletes(keys)

        yield from each(pages(thread_prefix), delete_page)
        self.memory.forget_thread(thread_id)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> Plan[None]:
        source_ns = self.layout.namespaces(source_thread_id)
        target_ns = self.layout.namespaces(target_thread_id)
        src_pages: list[Page] = []
        yield from collect(pages(source_ns, delimiter="/"), src_pages)
        prefixes = [p for page in src_pages for p in page.prefixes]
        if not prefixes:
            return
        # Only a committed checkpoint (a head) makes the target exist. Objects of a copy that died
        # before committing, and the emptied folders some servers (SeaweedFS) keep listing after a
        # delete, must not block a new copy: it overwrites the former and ignores the latter.
        target_pages: list[Page] = []
        yield from collect(pages(target_ns, delimiter="/"), target_pages)
        target_heads = [f"{p}head" for page in target_pages for p in page.prefixes]
        found = (yield [Get(k) for k in target_heads]) if target_heads else []
        if any(obj is not None for obj in found):
            raise TargetThreadExistsError(
                f"copy_thread: target thread {target_thread_id!r} already has checkpoints; "
                "delete it first or choose a new thread id"
            )
        # Snapshot the heads before copying anything: records newer than a snapshot head stay
        # invisible in the copy, exactly as they would in the source.
        heads = yield [Get(f"{p}head") for p in prefixes]
        source_prefix = self.layout.thread(source_thread_id)
        target_segment = escape(target_thread_id)
        run_prefix = f"{source_prefix}r/"

        def copy_page(page: Page) -> Plan[None]:
            requests: list[Request] = []
            for key in page.keys:
                if key.endswith("/head") or key == self.layout.thread_name(source_thread_id):
                    continue
                requests.append(Copy(key, self.layout.retarget_thread(key, source_thread_id, target_thread_id)))
                if key.startswith(run_prefix):
                    requests.append(Copy(key, self.layout.global_run_entry_of(key, target_segment)))
            for chunk in chunks(requests, READ_BATCH * 2):
                yield list(chunk)

        yield from each(pages(source_prefix), copy_page)
        names = self._names(target_thread_id, "")
        if names:
            yield names
        commits: list[Request] = []
        for prefix, head in zip(prefixes, heads, strict=True):
            if head is not None:
                target = self.layout.retarget_thread(f"{prefix}head", source_thread_id, target_thread_id)
                commits.append(Put(target, head.body, if_none_match=True))
        if commits:
            yield commits

    def prune(self, thread_ids: Sequence[str], strategy: str) -> Plan[None]:
        if isinstance(thread_ids, str):
            raise InvalidArgumentTypeError(
                "prune() takes a sequence of thread ids, not a single string; wrap it in a list"
            )
        if strategy not in ("keep_latest", "delete"):
            raise InvalidConfigError(f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'")
        for thread_id in thread_ids:
            if strategy == "delete":
                yield from self.delete_thread(thread_id)
                continue
            for ns in (yield from self._namespaces(thread_id)):
                yield from self._keep_latest(thread_id, ns)

    def _keep_latest(self, thread_id: str, ns: str) -> Plan[None]:
        head_key = self.layout.head(thread_id, ns)
        head = yield from one(Get(head_key))
        keep: set[str] = {head_key, self.layout.ns_name(thread_id, ns)}
        keep_prefixes: list[str] = []
        if head is not None:
            record = self.codec.decode_record(head_key, head.body)
            # DeltaChannel values absent from the head are rebuilt from ancestors' writes back to the
            # nearest ancestor that stores the channel: keep that chain, or the channel reads empty.
            # LangGraph names those channels in this metadata field; other channels without a stored
            # value (triggers such as "branch:to:x") are simply empty and need no ancestor.
            delta_channels = set(record.metadata.get("counters_since_delta_snapshot") or ())
            missing = delta_channels - set(record.inline) - set(record.blobs)
            chain = [record]
            cursor = record.parent_id
            while missing and cursor is not None:
                key = self.layout.record(thread_id, ns, cursor)
                obj = yield from one(Get(key))
                if obj is None:
                    break
                ancestor = self.codec.decode_record(key, obj.body)
                chain.append(ancestor)
                missing -= set(ancestor.inline) | set(ancestor.blobs)
                cursor = ancestor.parent_id
            for kept in chain:
                cid = kept.checkpoint["id"]
                keep.add(self.layout.record(thread_id, ns, cid))
                keep_prefixes.append(self.layout.writes(thread_id, ns, cid))
                keep.update(self.layout.blob(thread_id, ns, ch, v) for ch, v in kept.blobs.items())
        # A put still in flight writes its blobs and its record (newer than the head) before its head;
        # such objects are spared while younger than the grace period, or the checkpoint it is about
        # to commit would lose them. Any unreferenced large value may be one (a fork numbers its
        # versions from an older checkpoint, so a version below the head's proves nothing). Records
        # not newer than the head can never commit again (see chain.py) and go whatever their age.
        # Age is judged by the server's clock (the listing's Date), never by this machine's.
        head_id = record.checkpoint["id"] if head is not None else None
        records_prefix = self.layout.records(thread_id, ns)
        blobs_prefix = self.layout.blobs(thread_id, ns)

        def standing(key: str) -> Standing | None:
            """PENDING for what a put in flight may need, ORPHAN for the rest; None: not ours."""
            if key.startswith(records_prefix):
                parsed = Layout.parse_checkpoint_key(records_prefix, key)
                if parsed is None:
                    return None
                return Standing.PENDING if head_id is None or parsed.checkpoint_id > head_id else Standing.ORPHAN
            return Standing.PENDING if Layout.is_blob(blobs_prefix, key) else None

        def victims_of(page: Page) -> list[str]:
            young = (page.served or datetime.now(timezone.utc)) - PRUNE_GRACE
            victims = []
            for key, modified in zip(page.keys, page.modified, strict=True):
                if key in keep or any(key.startswith(p) for p in keep_prefixes):
                    continue
                found = standing(key)
                if found is Standing.ORPHAN or (found is Standing.PENDING and modified <= young):
                    victims.append(key)
            return victims

        # Records (with their writes) oldest first: an interrupted prune then leaves the head's chain
        # contiguous down to where it stopped, never a gap with an orphan below it (see chain.py). That
        # needs the namespace's victim keys in memory (keys only, one namespace at a time).
        doomed: list[str] = []

        def take(page: Page) -> Plan[None]:
            doomed.extend(victims_of(page))
            yield from ()

        yield from each(pages(records_prefix), take)
        for request in deletes(doomed[::-1]):
            yield [request]
        del doomed[:]

        # Blobs after records: a crash in between must not leave a record whose blobs are gone, which
        # list() would fail on until the prune runs again.
        def prune_blobs(page: Page) -> Plan[None]:
            victims = victims_of(page)
            if victims:
                yield deletes(victims)

        yield from each(pages(blobs_prefix), prune_blobs)
        self.memory.forget_thread(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> Plan[None]:
        if isinstance(run_ids, str):
            raise InvalidArgumentTypeError("delete_for_runs() takes a sequence of run ids, not a single string")
        for run_id in run_ids:
            index = self.layout.run_index(run_id)
            entries: list[Page] = []
            yield from collect(pages(index), entries)
            # Only "{thread}/{namespace}" entries are ours (not folder markers or foreign objects).
            keys = [k for page in entries for k in page.keys if _is_pair(k[len(index) :])]
            if not keys:
                continue
            markers = yield [Get(k) for k in keys]
            for key, marker in zip(keys, markers, strict=True):
                thread_seg, ns_seg = key[len(index) :].split("/")
                thread_id = yield from self._name_of(thread_seg, f"{self.layout.threads_root}{thread_seg}/")
                if thread_id is None:
                    continue
                ns = yield from self._name_of(ns_seg, f"{self.layout.namespaces(thread_id)}{ns_seg}/")
                if ns is None:
                    continue
                first_id = marker.body.decode() if marker is not None else ""
                yield from self._delete_run_in_ns(run_id, thread_id, ns, first_id)
                yield [Delete((key, self.layout.thread_run_entry(run_id, thread_id, ns)))]

    def _delete_run_in_ns(self, run_id: str, thread_id: str, ns: str, first_id: str) -> Plan[None]:
        # A run being cancelled may still commit a checkpoint while its rollback runs (the Agent Server
        # cancels and rolls back concurrently); that checkpoint is the run's too, so start over.
        for _ in range(ROLLBACK_ATTEMPTS):
            if (yield from self._try_delete_run_in_ns(run_id, thread_id, ns, first_id)):
                return
        raise CheckpointConflictError(thread_id, ns, f" while run {run_id!r} was being deleted (it kept committing)")

    def _run_of(self, key: str, obj: Obj) -> Any:
        """The run id a record (or head) was written by."""
        return self.codec.peek_record(key, obj.body)[0].get("run_id")

    def _try_delete_run_in_ns(self, run_id: str, thread_id: str, ns: str, first_id: str) -> Plan[bool]:
        """Delete one namespace's checkpoints of a run; False if the run itself moved the head meanwhile.

        The records are walked newest first down to the run's first checkpoint and on to the next
        committed record below it, classified by the commit chain. The run's records all go, committed
        or not. If the head is the run's, it moves back to the newest committed record of another run
        (the *survivor*: a record on the chain, never a leftover that was never committed). Orphans met
        on the way are deleted first, so the gap the run leaves in the chain opens onto a committed
        record (see :mod:`langgraph_s3_checkpoint.chain`).
        """
        records = self.layout.records(thread_id, ns)
        head_key = self.layout.head(thread_id, ns)
        head = yield from one(Get(head_key))
        chain = Chain(None, None)
        head_is_run = False
        if head is not None:
            chain = Chain.from_head(*self.codec.peek_chain(head_key, head.body))
            # Counted from the head itself: a head-only commit of the run has no record to find.
            head_is_run = self._run_of(head_key, head) == run_id
        doomed_ids: set[str] = set()
        orphan_ids: set[str] = set()
        doomed: list[str] = []
        orphans: list[str] = []
        survivor: Obj | None = None
        reached_below = False  # met a committed record older than the run's first checkpoint
        token: str | None = None
        while True:
            page: Page = yield from one(ListKeys(records, token=token))
            parsed = [(key, Layout.parse_checkpoint_key(records, key)) for key in page.keys]
            record_keys = [(key, p.checkpoint_id) for key, p in parsed if p is not None and p.is_record]
            objs = yield [Get(key) for key, _ in record_keys]
            for (key, cid), obj in zip(record_keys, objs, strict=True):
                if obj is None or reached_below:
                    continue
                try:
                    previous, detached = self.codec.peek_link(key, obj.body)
                    run_of = self._run_of(key, obj)
                except CorruptObjectError:
                    continue  # whose it is cannot be told: left alone (verify reports it), a missing link here
                standing = chain.standing(cid, previous, detached)
                if run_of == run_id:
                    doomed_ids.add(cid)
                elif standing is Standing.ORPHAN:
                    orphan_ids.add(cid)
                elif standing is Standing.COMMITTED:
                    if survivor is None and head_is_run:
                        # A detached survivor (a fork older than the head was) becomes an ordinary head:
                        # its chain continues at the link below it, or everything older would be orphaned.
                        survivor = obj if not detached else Obj(self.codec.relink(key, obj.body, chain.link), "")
                    reached_below = cid < first_id
            for key, p in parsed:
                if p is not None and p.checkpoint_id in doomed_ids:
                    doomed.append(key)
                elif p is not None and p.checkpoint_id in orphan_ids:
                    orphans.append(key)
            token = page.token
            if token is None or reached_below:
                break
        if not doomed_ids and not head_is_run:
            return True
        if orphans:
            yield deletes(orphans)
        if head is not None and head_is_run:
            # Conditional on the head read above: a writer that committed on top of the run meanwhile
            # must not lose its checkpoint to the rollback.
            if survivor is not None:
                reply = yield from one(Put(head_key, survivor.body, if_match=head.etag))
            else:
                reply = yield from one(DeleteIfMatch(head_key, head.etag))
            if reply is PRECONDITION_FAILED:
                # The head moved since it was read: to the survivor (a retried PUT whose first attempt
                # was applied, answer lost), or to another run's checkpoint, which stays the head; the
                # run's own records go either way. If the run itself committed again, start over to
                # take that checkpoint too.
                now = yield from one(Get(head_key))
                if now is not None and self._run_of(head_key, now) == run_id:
                    return False
        if doomed:
            yield deletes(doomed)
        self.memory.forget_namespace(thread_id, ns)
        return True

    # -- retention ------------------------------------------------------------------------------------
    def expire_threads(self, cutoff: datetime, *, dry_run: bool) -> Plan[None]:
        """Delete (or, dry, only name) every thread none of whose heads was written after ``cutoff``.

        Emits each expired thread id. Cost: one LIST of the thread index per 1,000 threads, and per
        thread one LIST of its namespaces and one LIST per namespace (returning just its head), then
        ``delete_thread`` for the expired ones. History objects are never listed for live threads.
        """
        root = self.layout.threads_root

        def expire_page(page: Page) -> Plan[None]:
            for prefix in page.prefixes:
                namespaces: list[Page] = []
                yield from collect(pages(f"{prefix}ns/", delimiter="/"), namespaces)
                ns_prefixes = [p for ns_page in namespaces for p in ns_page.prefixes]
                # "head" is the only key of a namespace that starts with "h": this LIST returns it alone.
                heads = yield [ListKeys(f"{p}h", max_keys=1) for p in ns_prefixes]
                newest = max((m for head_page in heads for m in head_page.modified), default=None)
                # No head at all: not a live thread (an emptied folder some servers keep listing, or a
                # leftover that gc collects), so nothing to expire.
                if newest is None or newest >= cutoff:
                    continue
                thread_id = yield from self._name_of(self.layout.segment_after(prefix, root), prefix)
                if thread_id is None:
                    continue
                if not dry_run:
                    yield from self.delete_thread(thread_id)
                yield Emit(thread_id)

        yield from each(pages(root, delimiter="/"), expire_page)

    # -- DeltaChannel support -----------------------------------------------------------------------
    def delta_history(self, config: RunnableConfig, channels: Sequence[str]) -> Plan[Mapping[str, DeltaChannelHistory]]:
        if not channels:
            return {}
        target = yield from self.get_tuple(config)
        collected: dict[str, list[PendingWrite]] = {c: [] for c in channels}
        seeds: dict[str, Any] = {}
        remaining = set(channels)
        cursor = target.parent_config if target is not None else None
        if cursor is not None:
            t = parse_config(cursor)
            assert t.checkpoint_id is not None

            def visit(tup: CheckpointTuple) -> Plan[bool]:
                """Take one ancestor's writes (or its value as the seed); False once nothing is left."""
                nonlocal cursor
                if cursor is None or tup.checkpoint["id"] != cursor["configurable"]["checkpoint_id"]:
                    return True  # a record of another branch: not an ancestor
                for write in reversed(tup.pending_writes or []):
                    if write[1] in remaining:
                        collected[write[1]].append(write)
                for ch in list(remaining):
                    if ch in tup.checkpoint["channel_values"]:
                        seeds[ch] = tup.checkpoint["channel_values"][ch]
                        remaining.discard(ch)
                cursor = tup.parent_config
                return cursor is not None and bool(remaining)
                yield  # a plan that needs no request of its own

            # One newest-first stream from the parent down, stopped at the last seed: ancestors come
            # in batches, and bodies already read (listed with the same ETag) are not read again.
            ancestors = self._list_thread(
                t.thread_id,
                t.checkpoint_ns,
                None,
                None,
                _after(t.checkpoint_id),
                _Limit(None),
                reuse=True,
                first_page=100,
            )
            yield from each(ancestors, visit)
        result: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            entry: DeltaChannelHistory = {"writes": list(reversed(collected[ch]))}
            if ch in seeds:
                entry["seed"] = seeds[ch]
            result[ch] = entry
        return result

    # -- setup ------------------------------------------------------------------------------------
    def setup(self, *, create_bucket: bool, require_conditional_writes: bool, bucket: str, token: str) -> Plan[None]:
        exists = yield from one(BucketExists())
        if not exists:
            if not create_bucket:
                raise BucketNotFoundError(f"Bucket {bucket!r} does not exist. {CREATE_BUCKET_ADVICE}")
            yield [CreateBucket()]
        if self.ttl is not None:
            yield [EnsureExpiryRule(f"langgraph-s3-ttl:{self.layout.prefix}", self.layout.prefix, self.ttl.days)]
        probe = self.layout.probe(token)
        yield [Put(probe, b"1", if_none_match=True)]
        second = yield from one(Put(probe, b"2", if_none_match=True))
        third = yield from one(Put(probe, b"3", if_match='"00000000000000000000000000000000"'))
        yield [Delete((probe,))]
        if (second is not PRECONDITION_FAILED or third is not PRECONDITION_FAILED) and require_conditional_writes:
            raise ConditionalWritesUnsupportedError(
                f"The S3 server behind bucket {bucket!r} ignores conditional writes "
                "(If-None-Match / If-Match), so concurrent writers could silently fork a thread's history. "
                "Use a server that supports them (AWS S3, SeaweedFS, recent MinIO, R2), or pass "
                "require_conditional_writes=False if only one process ever writes each thread."
            )


class Outcome(Enum):
    COMMITTED = "committed"
    """The checkpoint is the head, or on the head's chain: an earlier attempt landed, its answer was lost."""
    RETRY = "retry"
    """A join found a newer head: commit on top of it."""
    CONFLICT = "conflict"
    """Another writer moved the head this put was fenced on: it loses."""


def refused_outcome(
    fence: Fence,
    head_now: Obj | None,
    checkpoint_id: str,
    ours: Standing,
    head_id_of: Callable[[str, bytes], str],
    head_key: str,
) -> Outcome:
    """What a refused head PUT means, given the head read right after it and this checkpoint's standing.

    ====================================  ===========  =========
    head now                              fence        outcome
    ====================================  ===========  =========
    this checkpoint, or a descendant      any          COMMITTED
    another writer's, or gone             Join         RETRY
    another writer's, or gone             Fenced/New   CONFLICT
    ====================================  ===========  =========
    """
    if head_now is not None and (head_id_of(head_key, head_now.body) == checkpoint_id or ours is Standing.COMMITTED):
        return Outcome.COMMITTED
    return Outcome.RETRY if isinstance(fence, Join) else Outcome.CONFLICT


_HeadSwap = tuple[str | None, Put, list[Request]]
"""One commit attempt: the record's ``previous_head``, the head PUT (without its body), extra requests."""


@dataclass(frozen=True)
class _Commit:
    """The checkpoint a ``put`` is committing, as its commit attempts need it."""

    thread_id: str
    ns: str
    checkpoint_id: str
    parent_id: str | None
    source: Any
    head_key: str
    record_key: str


@dataclass
class _Values:
    """A checkpoint's channel values as ``put`` stores them."""

    inline: dict[str, list[Any]] = field(default_factory=dict)
    blobs: dict[str, str] = field(default_factory=dict)
    puts: list[Request] = field(default_factory=list)
    """Large values to store before the commit."""
    renewed: dict[str, str] = field(default_factory=dict)
    """Large values rewritten now (their age restarts, for the lifecycle rule)."""


def _is_pair(relative: str) -> bool:
    parts = relative.split("/")
    return len(parts) == 2 and all(parts)


def _seen(head: Obj, record: Record) -> HeadSeen:
    run_id = record.metadata.get("run_id")
    return HeadSeen(head.etag, dict(record.blobs), None if run_id is None else str(run_id))


def _after(checkpoint_id: str) -> str:
    """A ``before`` bound that includes ``checkpoint_id`` itself (the smallest id greater than it)."""
    return checkpoint_id + "\x00"


def matches(metadata: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    return not filter or all(metadata.get(k) == v for k, v in filter.items())


def merge_task_writes(stored: Sequence[RawWrite], new: Sequence[RawWrite]) -> list[RawWrite] | None:
    """InMemorySaver's rule for a later ``put_writes`` call of a task; ``None`` when nothing changes.

    For each (idx, channel, value) of the call: a regular write (idx >= 0) is dropped if that index
    is already stored; a special one (negative idx) replaces it.
    """
    merged = {write[0]: write for write in stored}
    changed = False
    for write in new:
        idx = write[0]
        if idx >= 0 and idx in merged:
            continue
        if merged.get(idx) != write:
            merged[idx] = write
            changed = True
    return list(merged.values()) if changed else None


def merge_writes(batches: Iterable[WriteBatch]) -> list[PendingWrite]:
    """Pending writes of one checkpoint, one per (task, idx), in ``writes_sort_key`` order.

    A standalone special write (an error, interrupt or resume value) replaces the same index from a
    combined call; otherwise the first stored write for an index is the one that counts.
    """
    chosen: dict[tuple[str, int], tuple[str, str, Any]] = {}
    for batch in sorted(batches, key=lambda b: len(b.writes) == 1 and b.writes[0][0] < 0):
        for idx, channel, value in batch.writes:
            chosen[(batch.task_id, idx)] = (batch.task_path, channel, value)
    ordered = sorted(chosen.items(), key=lambda kv: writes_sort_key(kv[1][0], kv[0][0], kv[0][1]))
    return [(task_id, channel, value) for (task_id, _), (_, channel, value) in ordered]


__all__ = ["Core", "SaverMemory", "Target", "checkpoint_config", "parse_config"]
