"""The saver's logic, free of I/O: for each LangGraph operation, which objects to read and write, in
what order, under which conditions, and how to turn the replies into a result or an error.

Every operation is a *plan*: a generator that yields batches of :mod:`requests` and receives their
replies (see :mod:`langgraph_s3_checkpoint.requests`). The sync and async savers run the same plans
through two small drivers (:mod:`langgraph_s3_checkpoint.store`), so there is exactly one copy of the
commit protocol, and it can be read top to bottom here.

The commit protocol (docs/design.md has the long form):

1. ``put`` writes the immutable parts first, in parallel: the record ``c/{R}``, blobs for large channel
   values that changed, and the run-index entries. None of them is visible yet, because readers only
   trust records whose id is not newer than the head's.
2. Then it replaces the ``head`` object with a copy of the record, conditionally: ``If-Match`` on the
   ETag this saver last saw for the head at the parent checkpoint, or ``If-None-Match: *`` for a new
   thread. That single conditional PUT is the commit, and the point where a second writer loses.

A crash before step 2 leaves only unreachable objects; a crash after it leaves a complete checkpoint.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
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

from .codec import Codec, Record, WriteBatch
from .errors import (
    BucketNotFoundError,
    CheckpointConflictError,
    ConditionalWritesUnsupportedError,
    CorruptObjectError,
    InvalidConfigError,
    TargetThreadExistsError,
)
from .keys import Layout, escape, is_digest, unescape
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

DELETE_BATCH = 1000
"""Keys per DeleteObjects request (the S3 maximum)."""
MAX_PAGE = 1000
"""Keys per LIST request (the S3 maximum)."""
ROLLBACK_ATTEMPTS = 5
"""How often ``delete_for_runs`` starts over when the run it deletes commits again meanwhile."""
READ_BATCH = 32
"""Records fetched in parallel while streaming ``list``."""
PRUNE_GRACE = timedelta(minutes=10)
"""prune(keep_latest) leaves unreferenced objects younger than this alone (they may be an in-flight put's)."""
JOIN_ATTEMPTS = 5
"""How often an unfenced ``put`` re-reads a head that moved under it before giving up."""

ABSENT = "<absent>"
"""Head observation meaning "this saver saw no head for the namespace"."""


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
    if thread_id is None or thread_id == "":
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
class SaverMemory:
    """Head ETags this saver observed (the basis of fencing) and blobs it knows exist.

    ``heads[(thread, ns)]`` maps a checkpoint id to the head ETag at the moment the head pointed at that
    checkpoint. A ``put`` whose parent is such a checkpoint is *fenced*: it commits only if the head
    still has that ETag. A ``put`` whose parent this saver never saw at the head (a fork from an older
    checkpoint, or a fresh saver) *joins*: it reads the current head and commits on its ETag.
    """

    def __init__(self, max_threads: int = 10_000, per_thread: int = 16, blobs_per_namespace: int = 256) -> None:
        self._lock = threading.Lock()
        self._blobs_per_namespace = blobs_per_namespace
        self._max_threads = max_threads
        self._per_thread = per_thread
        self._heads: OrderedDict[tuple[str, str], OrderedDict[str, str]] = OrderedDict()
        self._blobs: OrderedDict[tuple[str, str], dict[tuple[str, str], datetime | None]] = OrderedDict()
        self._runs: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._names: OrderedDict[str, None] = OrderedDict()

    def _touch(self, table: OrderedDict[Any, Any], key: Any, default: Any) -> Any:
        entry = table.get(key)
        if entry is None:
            entry = table[key] = default
            while len(table) > self._max_threads:
                table.popitem(last=False)
        else:
            table.move_to_end(key)
        return entry

    def saw_head(self, thread_id: str, ns: str, checkpoint_id: str | None, etag: str | None) -> None:
        with self._lock:
            seen = self._touch(self._heads, (thread_id, ns), OrderedDict())
            seen[checkpoint_id or ABSENT] = etag or ABSENT
            seen.move_to_end(checkpoint_id or ABSENT)
            while len(seen) > self._per_thread:
                seen.popitem(last=False)

    def expected_head(self, thread_id: str, ns: str, parent_id: str | None) -> str | None:
        """The head ETag (or :data:`ABSENT`) a put with this parent must find, or ``None`` to join."""
        with self._lock:
            seen = self._heads.get((thread_id, ns))
            return None if seen is None else seen.get(parent_id or ABSENT)

    def forget_head(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        with self._lock:
            seen = self._heads.get((thread_id, ns))
            if seen is not None:
                seen.pop(checkpoint_id, None)

    def add_blobs(self, thread_id: str, ns: str, refs: Mapping[str, str], written: datetime | None = None) -> None:
        """Remember that these (channel -> version) blobs exist, and when they were written if known."""
        with self._lock:
            known = self._touch(self._blobs, (thread_id, ns), {})
            for ref in refs.items():
                when = written if written is not None else known.pop(ref, None)
                known[ref] = when  # re-inserted: the most recently referenced blobs are kept
            while len(known) > self._blobs_per_namespace:
                del known[next(iter(known))]

    def blob_known(self, thread_id: str, ns: str, channel: str, version: str) -> tuple[bool, datetime | None]:
        """Whether the blob is known to exist, and when it was last written (``None``: unknown)."""
        with self._lock:
            known = self._blobs.get((thread_id, ns), {})
            ref = (channel, version)
            return ref in known, known.get(ref)

    def run_recorded(self, run_id: str, thread_id: str, ns: str) -> bool:
        with self._lock:
            return (run_id, thread_id, ns) in self._runs

    def record_run(self, run_id: str, thread_id: str, ns: str) -> None:
        with self._lock:
            self._touch(self._runs, (run_id, thread_id, ns), None)

    def name_recorded(self, key: str) -> bool:
        with self._lock:
            return key in self._names

    def record_name(self, key: str) -> None:
        with self._lock:
            self._touch(self._names, key, None)

    def forget_thread(self, thread_id: str) -> None:
        with self._lock:
            for table in (self._heads, self._blobs):
                for key in [k for k in table if k[0] == thread_id]:
                    del table[key]


# ------------------------------------------------------------------------------------------------
# Small plan helpers
# ------------------------------------------------------------------------------------------------
def _one(request: Request) -> Plan[Any]:
    replies = yield [request]
    return replies[0]


def _list_all(prefix: str, token: str | None = None) -> Plan[list[str]]:
    """Every key under a prefix that is known to be small (one checkpoint's writes)."""
    keys: list[str] = []
    while True:
        page: Page = yield from _one(ListKeys(prefix, token=token))
        keys.extend(page.keys)
        token = page.token
        if token is None:
            return keys


def _pages(
    prefix: str, *, delimiter: str | None = None, start_after: str | None = None, max_keys: int = 1000
) -> Generator[Any, Any, None]:
    """Stream pages of a listing: yields request batches and ``Emit(page)`` for each page."""
    token: str | None = None
    while True:
        page: Page = yield from _one(
            ListKeys(
                prefix, delimiter=delimiter, start_after=None if token else start_after, max_keys=max_keys, token=token
            )
        )
        yield Emit(page)
        token = page.token
        if token is None:
            return


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _deletes(keys: Sequence[str]) -> list[Request]:
    return [Delete(tuple(chunk)) for chunk in _chunks(keys, DELETE_BATCH)]


def collect(sub: Plan[Any], into: list[Any]) -> Plan[Any]:
    """Run a streaming sub-plan inside another plan, appending what it emits to ``into``."""
    reply: Any = None
    while True:
        try:
            step = sub.send(reply)
        except StopIteration as stop:
            return stop.value
        if isinstance(step, Emit):
            into.append(step.value)
            reply = None
        else:
            reply = yield step


def each(sub: Plan[Any], handle: Callable[[Any], Plan[bool | None]]) -> Plan[None]:
    """Run a streaming sub-plan and, for each value it emits, the plan ``handle(value)``.

    ``handle`` returning ``False`` stops the stream. This is how listings are processed page by page
    without holding more than one page.
    """
    reply: Any = None
    while True:
        try:
            step = sub.send(reply)
        except StopIteration:
            return
        if isinstance(step, Emit):
            reply = None
            if (yield from handle(step.value)) is False:
                sub.close()
                return
        else:
            reply = yield step


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
    """

    checkpoint_ns: str
    head_id: str | None
    prefix: str
    start_after: str | None
    page_size: int
    reuse: bool = True
    """Whether reads carry the ETag the listing showed (so the store may answer them from its cache)."""
    buffer: list[tuple[Get, list[Get]]] = field(default_factory=list)
    token: str | None = None
    exhausted: bool = False
    expect: str | None = None
    """The next older committed checkpoint id on the commit chain (``previous_head`` links)."""
    chain_lost: bool = False
    """A chain link was deleted (delete_for_runs, prune) or unknown: fall back to "not newer than the head"."""
    _skipping: bool = False

    def admit(self, record: Record) -> bool:
        """Whether a record (met in newest-first order) was committed, following the commit chain.

        A put that died between its record and its head left a record the chain skips: it is
        hidden even once a later commit makes the head newer than it.
        """
        cid = record.checkpoint["id"]
        if cid == self.head_id or record.detached or self.chain_lost:
            return True
        if self.expect is None or cid > self.expect:
            return False
        if cid < self.expect:
            self.chain_lost = True
            return True
        self.expect = record.previous_head
        return True

    def accept(self, page: Page) -> None:
        # Start small and double: a walk that stops early (a page of history, the writes since the
        # last DeltaChannel snapshot) lists and parses only a little more than it uses. Scans start
        # at the full page size.
        self.page_size = min(MAX_PAGE, self.page_size * 2)
        self.token = page.token
        # Without a head nothing in the namespace is committed.
        self.exhausted = page.token is None or self.head_id is None
        if self.head_id is None:
            return
        for read in page.reads(with_etags=self.reuse):
            if Layout.is_record(read.key):
                # Records newer than the head are leftovers of uncommitted puts.
                self._skipping = Layout.checkpoint_id_of(read.key) > self.head_id
                if not self._skipping:
                    self.buffer.append((read, []))
            elif not self._skipping and self.buffer:
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
        thread_id, ns = t.thread_id, t.checkpoint_ns
        repair: list[Request] = []
        if t.checkpoint_id is not None:
            key = self.layout.record(thread_id, ns, t.checkpoint_id)
            folder = self.layout.checkpoint_dir(thread_id, ns, t.checkpoint_id)
            obj, listing = yield [Get(key), ListKeys(folder)]
            if obj is None:
                return None
            # Asking for a checkpoint by id is how forks and replays start, so a put on top of it is a
            # fork (joins the current head), never a fenced continuation.
            self.memory.forget_head(thread_id, ns, t.checkpoint_id)
            record = self.codec.decode_record(key, obj.body)
        else:
            head_key = self.layout.head(thread_id, ns)
            obj = yield from _one(Get(head_key))
            if obj is None:
                self.memory.saw_head(thread_id, ns, None, None)
                return None
            record = self.codec.decode_record(head_key, obj.body)
            key = self.layout.record(thread_id, ns, record.checkpoint["id"])
            folder = self.layout.checkpoint_dir(thread_id, ns, record.checkpoint["id"])
            self.memory.saw_head(thread_id, ns, record.checkpoint["id"], obj.etag)
            listing = yield from _one(ListKeys(folder))
            if key not in listing.keys:
                # The head was committed but its record was not (a crash between the two parallel
                # PUTs): restore the record from the head, which is a copy of it.
                repair.append(Put(key, obj.body, if_none_match=True))
        write_reads = [r for r in listing.reads() if r.key != key]
        if listing.token is not None:
            write_reads += [Get(k) for k in (yield from _list_all(folder, listing.token)) if k != key]
        self.memory.add_blobs(thread_id, ns, record.blobs)
        tuples = yield from self._assemble(thread_id, [(ns, record, write_reads)], repair)
        return tuples[0]

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
                self.memory.add_blobs(thread_id, ns, {ch: version}, blob.modified)
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
                    yield from self._list_thread(thread_id, None, None, filter, before_id, budget)
                    if budget.done:
                        return False
                return True

            yield from each(_pages(root, delimiter="/"), threads)
            return
        t = parse_config(config)
        configurable = config.get("configurable") or {}
        ns = t.checkpoint_ns if "checkpoint_ns" in configurable else None
        yield from self._list_thread(t.thread_id, ns, t.checkpoint_id, filter, before_id, budget)

    def _name_of(self, segment: str, prefix: str) -> Plan[str]:
        """The real id behind a thread or namespace segment."""
        if not is_digest(segment):
            return unescape(segment)
        obj = yield from _one(Get(f"{prefix}name"))
        if obj is None:
            return segment
        return cast(str, obj.body.decode("utf-8", "surrogatepass"))

    def _namespaces(self, thread_id: str) -> Plan[list[str]]:
        root = self.layout.namespaces(thread_id)
        found: list[Page] = []
        yield from collect(_pages(root, delimiter="/"), found)
        names = []
        for page in found:
            for prefix in page.prefixes:
                names.append((yield from self._name_of(self.layout.segment_after(prefix, root), prefix)))
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
                head_id=None,
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
            if head is not None:
                c.head_id, c.expect = self.codec.peek_chain(self.layout.head(thread_id, c.checkpoint_ns), head.body)
            if before_id:
                below = next(replies)
                if below is None:
                    c.chain_lost = True
                else:
                    _, c.expect = self.codec.peek_chain(
                        self.layout.record(thread_id, c.checkpoint_ns, before_id), below.body
                    )
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
                if cursor.admit(record) and matches(record.metadata, filter):
                    chosen.append((cursor, record, write_reads))
            if budget.remaining is not None:
                chosen = chosen[: budget.remaining]
            # One parallel round trip for the values and writes of every chosen record.
            tuples = yield from self._assemble(thread_id, [(c.checkpoint_ns, r, w) for c, r, w in chosen])
            for tup in tuples:
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
                pages = yield [c.request() for c in starving]
                for c, page in zip(starving, pages, strict=True):
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
        t = parse_config(config)
        thread_id, ns, parent_id = t.thread_id, t.checkpoint_ns, t.checkpoint_id
        checkpoint_id = checkpoint["id"]
        stored_metadata = get_checkpoint_metadata(config, metadata)

        values = checkpoint["channel_values"]
        inline: dict[str, list[Any]] = {}
        blobs: dict[str, str] = {}
        prerequisites: list[Request] = []
        renewed: dict[str, str] = {}
        now = datetime.now(timezone.utc)
        for channel, version in checkpoint["channel_versions"].items():
            if channel not in values:
                continue
            typed = self.codec.encode_value(channel, values[channel])
            if len(typed[1]) <= self.inline_threshold:
                inline[channel] = typed
                continue
            blobs[channel] = str(version)
            blob_key = self.layout.blob(thread_id, ns, channel, str(version))
            known, written = self.memory.blob_known(thread_id, ns, channel, str(version))
            if channel in new_versions or (not known and self.ttl is None):
                prerequisites.append(Put(blob_key, self.codec.encode_blob(typed), if_none_match=True))
                renewed[channel] = str(version)
            elif self.ttl is not None and (written is None or now - written > self.ttl / 2):
                # An expiry rule deletes objects by their own age: rewrite a value this checkpoint
                # still references before it gets old, or a live thread would lose it.
                prerequisites.append(Put(blob_key, self.codec.encode_blob(typed)))
                renewed[channel] = str(version)
        record_key = self.layout.record(thread_id, ns, checkpoint_id)

        def encode(previous_head: str | None, *, detached: bool = False) -> bytes:
            return self.codec.encode_record(
                checkpoint, stored_metadata, parent_id, inline, blobs, previous_head=previous_head, detached=detached
            )

        prerequisites.extend(self._names(thread_id, ns))
        run_id = stored_metadata.get("run_id")
        if run_id is not None and not self.memory.run_recorded(str(run_id), thread_id, ns):
            marker = checkpoint_id.encode()
            prerequisites.append(Put(self.layout.run_entry(str(run_id), thread_id, ns), marker, if_none_match=True))
            prerequisites.append(
                Put(self.layout.thread_run_entry(str(run_id), thread_id, ns), marker, if_none_match=True)
            )

        head_key = self.layout.head(thread_id, ns)
        expected = self.memory.expected_head(thread_id, ns, parent_id)
        if expected is not None and parent_id is not None and checkpoint_id <= parent_id:
            expected = None  # not a descendant by id order: treat like a fork
        fenced = expected is not None
        head_obj: Obj | None = None
        if prerequisites or not fenced:
            replies = yield [*prerequisites] + ([] if fenced else [Get(head_key)])
            head_obj = None if fenced else replies[-1]

        for attempt in range(JOIN_ATTEMPTS):
            previous = parent_id if expected not in (None, ABSENT) else None
            if not fenced:
                previous, expected = None, ABSENT
                if head_obj is not None:
                    previous = self.codec.peek_head_id(head_key, head_obj.body)
                    if stored_metadata.get("source") == "loop" and parent_id is not None and previous != parent_id:
                        # A step continues its parent, which must still be the head: this is a
                        # straggler whose saver no longer remembers the head it read (the memory
                        # is bounded), not a fork (forks are "update", "fork" or "input").
                        raise CheckpointConflictError(thread_id, ns)
                    if checkpoint_id < previous:
                        # An older checkpoint does not move the head: its record alone is the commit.
                        yield [Put(record_key, encode(None, detached=True))]
                        break
                    expected = head_obj.etag
            # The record names the head it replaces, so readers can tell committed records (a chain
            # from the head) from records of puts that died before their head PUT. The head is a
            # full copy of the record, so both go out together: if only the head lands, the next
            # read restores the record from it (see get_tuple).
            body = encode(previous)
            assert expected is not None
            _, reply = yield [Put(record_key, body), _head_put(head_key, body, expected)]
            if isinstance(reply, Stored):
                self.memory.saw_head(thread_id, ns, checkpoint_id, reply.etag)
                break
            # The condition failed. If the head now holds this very checkpoint, an earlier attempt of
            # this request was applied and only its response was lost: that is success.
            head_obj = yield from _one(Get(head_key))
            if head_obj is not None and self.codec.peek_head_id(head_key, head_obj.body) == checkpoint_id:
                self.memory.saw_head(thread_id, ns, checkpoint_id, head_obj.etag)
                break
            if fenced or attempt == JOIN_ATTEMPTS - 1:
                yield [Delete((record_key,))]
                raise CheckpointConflictError(thread_id, ns)
        self.memory.add_blobs(thread_id, ns, blobs)
        self.memory.add_blobs(thread_id, ns, renewed, now)
        if run_id is not None:
            self.memory.record_run(str(run_id), thread_id, ns)
        return checkpoint_config(thread_id, ns, checkpoint_id)

    def _names(self, thread_id: str, ns: str) -> list[Request]:
        """``name`` objects for ids too long to be key segments (written once per saver)."""
        puts: list[Request] = []
        for value, key in ((thread_id, self.layout.thread_name(thread_id)), (ns, self.layout.ns_name(thread_id, ns))):
            if is_digest(escape(value)) and not self.memory.name_recorded(key):
                puts.append(Put(key, value.encode("utf-8", "surrogatepass"), if_none_match=True, expires=False))
                self.memory.record_name(key)
        return puts

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> Plan[None]:
        t = parse_config(config, need_checkpoint_id=True)
        assert t.checkpoint_id is not None
        if not writes:
            return
        indexed = [(WRITES_IDX_MAP.get(ch, i), ch, value) for i, (ch, value) in enumerate(writes)]
        if all(ch in WRITES_IDX_MAP for ch, _ in writes):
            # Special channels (errors, interrupts, resume values) replace what is stored.
            puts: list[Request] = [
                Put(
                    self.layout.write(t.thread_id, t.checkpoint_ns, t.checkpoint_id, task_id, idx),
                    self.codec.encode_writes(task_id, task_path, [(idx, ch, value)]),
                )
                for idx, ch, value in indexed
            ]
        else:
            # Regular writes: the first call for a task wins; retries are no-ops (If-None-Match).
            key = self.layout.write(t.thread_id, t.checkpoint_ns, t.checkpoint_id, task_id, indexed[0][0])
            puts = [Put(key, self.codec.encode_writes(task_id, task_path, indexed), if_none_match=True)]
        yield puts

    # -- deleting and copying -----------------------------------------------------------------------
    def delete_thread(self, thread_id: str) -> Plan[None]:
        # Heads first: once they are gone the thread reads as empty, so a crash part-way through
        # never leaves a half-deleted thread that looks alive.
        root = self.layout.namespaces(thread_id)
        pages: list[Page] = []
        yield from collect(_pages(root, delimiter="/"), pages)
        heads = [f"{p}head" for page in pages for p in page.prefixes]
        if heads:
            yield _deletes(heads)
        thread_prefix = self.layout.thread(thread_id)
        thread_segment = escape(thread_id)
        run_prefix = f"{thread_prefix}r/"

        def delete_page(page: Page) -> Plan[None]:
            keys = list(page.keys)
            keys += [self.layout.global_run_entry_of(k, thread_segment) for k in keys if k.startswith(run_prefix)]
            if keys:
                yield _deletes(keys)

        yield from each(_pages(thread_prefix), delete_page)
        self.memory.forget_thread(thread_id)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> Plan[None]:
        source_ns = self.layout.namespaces(source_thread_id)
        target_ns = self.layout.namespaces(target_thread_id)
        src_pages: list[Page] = []
        yield from collect(_pages(source_ns, delimiter="/"), src_pages)
        prefixes = [p for page in src_pages for p in page.prefixes]
        if not prefixes:
            return
        # Only a committed checkpoint (a head) makes the target exist. Objects of a copy that died
        # before committing, and the emptied folders some servers (SeaweedFS) keep listing after a
        # delete, must not block a new copy: it overwrites the former and ignores the latter.
        target_pages: list[Page] = []
        yield from collect(_pages(target_ns, delimiter="/"), target_pages)
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
            for chunk in _chunks(requests, READ_BATCH * 2):
                yield list(chunk)

        yield from each(_pages(source_prefix), copy_page)
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
            raise TypeError("prune() takes a sequence of thread ids, not a single string; wrap it in a list")
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'")
        for thread_id in thread_ids:
            if strategy == "delete":
                yield from self.delete_thread(thread_id)
                continue
            for ns in (yield from self._namespaces(thread_id)):
                yield from self._keep_latest(thread_id, ns)

    def _keep_latest(self, thread_id: str, ns: str) -> Plan[None]:
        head_key = self.layout.head(thread_id, ns)
        head = yield from _one(Get(head_key))
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
                obj = yield from _one(Get(key))
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
        # to commit would lose them. Superseded records and their writes go whatever their age.
        young = datetime.now(timezone.utc) - PRUNE_GRACE
        head_id = record.checkpoint["id"] if head is not None else None
        records_prefix = self.layout.records(thread_id, ns)

        blobs_prefix = self.layout.blobs(thread_id, ns)
        head_versions = (
            {ch: _version_order(str(v)) for ch, v in record.checkpoint["channel_versions"].items()}
            if head is not None
            else {}
        )

        def in_flight(key: str) -> bool:
            if key.startswith(records_prefix):
                return head_id is None or Layout.checkpoint_id_of(key) > head_id
            if key.startswith(blobs_prefix):
                channel, version = Layout.blob_of(key)
                current = head_versions.get(channel)
                return current is None or _version_order(version) > current
            return True

        def prune_page(page: Page) -> Plan[None]:
            victims = [
                k
                for k, modified in zip(page.keys, page.modified, strict=True)
                if k not in keep
                and not any(k.startswith(p) for p in keep_prefixes)
                and not (modified > young and in_flight(k))
            ]
            if victims:
                yield _deletes(victims)

        # Records (with their writes) before blobs: a crash in between must not leave a record whose
        # blobs are gone, which list() would fail on until the prune runs again.
        for part in (records_prefix, blobs_prefix):
            yield from each(_pages(part), prune_page)

    def delete_for_runs(self, run_ids: Sequence[str]) -> Plan[None]:
        if isinstance(run_ids, str):
            raise TypeError("delete_for_runs() takes a sequence of run ids, not a single string")
        for run_id in run_ids:
            index = self.layout.run_index(run_id)
            entries: list[Page] = []
            yield from collect(_pages(index), entries)
            keys = [k for page in entries for k in page.keys]
            if not keys:
                continue
            markers = yield [Get(k) for k in keys]
            for key, marker in zip(keys, markers, strict=True):
                thread_seg, ns_seg = key[len(index) :].split("/")
                thread_id = yield from self._name_of(thread_seg, f"{self.layout.threads_root}{thread_seg}/")
                ns = yield from self._name_of(ns_seg, f"{self.layout.namespaces(thread_id)}{ns_seg}/")
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
        """Delete one namespace's checkpoints of a run; False if the run itself moved the head meanwhile."""
        records = self.layout.records(thread_id, ns)
        head_key = self.layout.head(thread_id, ns)
        head = yield from _one(Get(head_key))
        head_id = self.codec.peek_head_id(head_key, head.body) if head is not None else None
        # Checkpoints of the run are no older than its first one: walk the newest-first listing
        # down to it (a rollback of the latest run reads only that run's records).
        doomed: list[str] = []
        doomed_ids: set[str] = set()
        survivor: Obj | None = None
        token: str | None = None
        done = False
        while not done:
            page: Page = yield from _one(ListKeys(records, token=token))
            record_keys = [k for k in page.keys if Layout.is_record(k)]
            objs = yield [Get(k) for k in record_keys]
            for key, obj in zip(record_keys, objs, strict=True):
                if obj is None:
                    continue
                cid = Layout.checkpoint_id_of(key)
                if self._run_of(key, obj) == run_id:
                    doomed_ids.add(cid)
                elif head_id is not None and cid <= head_id and survivor is None:
                    survivor = obj
                if cid < first_id and survivor is not None:
                    done = True
                    break
            # A record's writes follow it in the listing; they go with it.
            doomed += [k for k in page.keys if Layout.checkpoint_id_of(k) in doomed_ids]
            token = page.token
            done = done or token is None
        if not doomed:
            return True
        if head is not None and head_id in doomed_ids:
            # Both are conditional on the head read above: a writer that committed on top of the run
            # meanwhile must not lose its checkpoint to the rollback.
            if survivor is not None:
                reply = yield from _one(Put(head_key, survivor.body, if_match=head.etag))
            else:
                reply = yield from _one(DeleteIfMatch(head_key, head.etag))
            if reply is PRECONDITION_FAILED:
                # The head moved since it was read: to the survivor (a retried PUT whose first attempt
                # was applied, answer lost), or to another run's checkpoint, which stays the head; the
                # run's own records go either way. If the run itself committed again, start over to
                # take that checkpoint too.
                now = yield from _one(Get(head_key))
                if now is not None and self._run_of(head_key, now) == run_id:
                    return False
        yield _deletes(doomed)
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
                yield from collect(_pages(f"{prefix}ns/", delimiter="/"), namespaces)
                ns_prefixes = [p for ns_page in namespaces for p in ns_page.prefixes]
                # "head" is the only key of a namespace that starts with "h": this LIST returns it alone.
                heads = yield [ListKeys(f"{p}h", max_keys=1) for p in ns_prefixes]
                newest = max((m for head_page in heads for m in head_page.modified), default=None)
                if newest is not None and newest >= cutoff:
                    continue
                thread_id = yield from self._name_of(self.layout.segment_after(prefix, root), prefix)
                if not dry_run:
                    yield from self.delete_thread(thread_id)
                yield Emit(thread_id)

        yield from each(_pages(root, delimiter="/"), expire_page)

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
        exists = yield from _one(BucketExists())
        if not exists:
            if not create_bucket:
                raise BucketNotFoundError(
                    f"Bucket {bucket!r} does not exist. Create it, or pass create_bucket=True to the saver."
                )
            yield [CreateBucket()]
        if self.ttl is not None:
            yield [EnsureExpiryRule(f"langgraph-s3-ttl:{self.layout.prefix}", self.layout.prefix, self.ttl.days)]
        probe = self.layout.probe(token)
        yield [Put(probe, b"1", if_none_match=True)]
        second = yield from _one(Put(probe, b"2", if_none_match=True))
        third = yield from _one(Put(probe, b"3", if_match='"00000000000000000000000000000000"'))
        yield [Delete((probe,))]
        if (second is not PRECONDITION_FAILED or third is not PRECONDITION_FAILED) and require_conditional_writes:
            raise ConditionalWritesUnsupportedError(
                f"The S3 server behind bucket {bucket!r} ignores conditional writes "
                "(If-None-Match / If-Match), so concurrent writers could silently fork a thread's history. "
                "Use a server that supports them (AWS S3, SeaweedFS, recent MinIO, R2), or pass "
                "require_conditional_writes=False if only one process ever writes each thread."
            )


def _version_order(version: str) -> tuple[int, str]:
    """Order of channel versions: LangGraph's ``{n:032}.{random}`` strings and plain numbers alike."""
    counter, _, rest = version.partition(".")
    try:
        return int(counter), rest
    except ValueError:
        return -1, version


def _head_put(head_key: str, body: bytes, expected: str | None) -> Put:
    if expected == ABSENT:
        return Put(head_key, body, if_none_match=True)
    return Put(head_key, body, if_match=expected)


def _after(checkpoint_id: str) -> str:
    """A ``before`` bound that includes ``checkpoint_id`` itself (the smallest id greater than it)."""
    return checkpoint_id + "\x00"


def matches(metadata: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    return not filter or all(metadata.get(k) == v for k, v in filter.items())


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
