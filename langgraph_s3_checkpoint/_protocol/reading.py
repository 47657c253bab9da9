"""Reading: ``get_tuple`` (latest and by id), ``list`` and the DeltaChannel history, all through the commit
chain (:mod:`langgraph_s3_checkpoint._protocol.chain`): a record is shown only if it was committed."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointTuple,
    PendingWrite,
    writes_sort_key,
)

from ..errors import (
    CorruptObjectError,
    InvalidConfigError,
)
from .chain import Chain, Standing
from .codec import APPENDED_TAIL_BYTES, PARTS_MERGED, Codec, Record, WriteBatch
from .fencing import (
    ABSENT,
    HeadSeen,
    ParentRead,
    ReadChain,
    ReadId,
    Recall,
    Seen,
    chain_of,
    head_seen,
    run_of_config,
    written_here,
)
from .keys import Layout
from .plans import (
    MAX_PAGE,
    READ_BATCH,
    all_of,
    all_pages,
    chunks,
    for_each_emitted,
    id_behind,
    list_all,
    one,
    pages,
    three,
)
from .requests import (
    CREATE,
    Emit,
    Get,
    ListKeys,
    Page,
    Plan,
    Put,
    Request,
    StoredObject,
)


@dataclass(frozen=True)
class CheckpointAddress:
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str | None


def parse_config(config: RunnableConfig | None, *, need_checkpoint_id: bool = False) -> CheckpointAddress:
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
    return CheckpointAddress(str(thread_id), ns, checkpoint_id)


def checkpoint_config(
    thread_id: str, checkpoint_ns: str | None = None, checkpoint_id: str | None = None
) -> RunnableConfig:
    """The config naming a thread and, when given, a namespace and a checkpoint in it (the saver's replies, the
    CLI's and the migration's calls of any checkpointer)."""
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_ns is not None:
        configurable["checkpoint_ns"] = checkpoint_ns
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


@dataclass
class _Budget:
    remaining: int | None
    replay_of: object | None = None
    """The run whose replay lookup this listing is (``list(before=..., limit=1)`` with a run's config: LangGraph
    finding a subgraph's state below a replay point), which reads what it finds by id."""
    asked: int | None = field(init=False)
    """The ``limit`` the listing was given."""

    def __post_init__(self) -> None:
        self.asked = self.remaining

    @property
    def done(self) -> bool:
        return self.remaining is not None and self.remaining <= 0

    def take(self) -> None:
        if self.remaining is not None:
            self.remaining -= 1


@dataclass(kw_only=True)
class Pager:
    """Pages of one listing, from ``start_after``: small at first and doubling up to :data:`MAX_PAGE`, so that a walk
    that stops early (a page of history, an ancestor) lists and parses only a little more than it uses."""

    prefix: str
    start_after: str | None = None
    page_size: int = 100
    token: str | None = None
    exhausted: bool = False

    def request(self) -> ListKeys:
        return ListKeys(
            self.prefix,
            start_after=None if self.token else self.start_after,
            max_keys=self.page_size,
            token=self.token,
        )

    def turn(self, page: Page) -> None:
        """The page came: the next one is twice as large, and there is none after a page without a token."""
        self.page_size = min(MAX_PAGE, self.page_size * 2)
        self.token = page.token
        self.exhausted = page.token is None


@dataclass(kw_only=True)
class _NsCursor(Pager):
    """Newest-first stream of one namespace's committed records, each with its writes keys.

    One LIST of ``c/`` returns every record followed by the keys of its pending writes, so the cursor
    groups them as they come; a record is complete once the next record (or the end) has been seen.
    Which records are committed is the :class:`~langgraph_s3_checkpoint._protocol.chain.Chain`'s decision.
    """

    checkpoint_ns: str
    use_cache: bool = True
    """Whether reads carry the ETag the listing showed (so the I/O shell may answer them from its read cache)."""
    chain: Chain = field(default_factory=Chain.without_head)
    buffer: list[tuple[Get, list[Get]]] = field(default_factory=list)
    _current: str | None = None
    """Checkpoint id of the record the writes being listed belong to (``None``: skip them)."""
    head_key: str | None = None
    """The namespace's head, read in place of the head's record when the listing lacks it (:meth:`_head_met`)."""
    _head_record_key: str | None = None
    """Where the head's record is listed (and where the head, read in its place, sorts)."""
    _head_due: bool = False
    """The listing starts above the head's record and has not reached it yet."""

    def place(self, chain: Chain, head_key: str) -> None:
        """Put the cursor on the chain of the head at ``head_key`` (read in the same round trip as its first page)."""
        self.chain, self.head_key = chain, head_key
        ns_folder = self.prefix[: -len("c/")]
        self._head_record_key = None if chain.head_id is None else Layout.record_in(ns_folder, chain.head_id)
        self._head_due = self._head_record_key is not None and (
            self.start_after is None or self.start_after < self._head_record_key
        )

    def restart(self) -> None:
        """List from the newest record: the chain must be walked from the head."""
        self.start_after, self.token, self.exhausted, self._current = None, None, False, None
        self._head_due = self._head_record_key is not None
        self.buffer.clear()

    def order(self, read: Get) -> str:
        """Where a buffered read sorts among the namespace's records (inverted ids: the smallest is the newest)."""
        key = self._head_record_key if read.key == self.head_key and self._head_record_key else read.key
        return key[len(self.prefix) :]

    def admit(self, record: Record) -> bool:
        """Whether a record (met in newest-first order) was committed."""
        standing = self.chain.standing(
            record.checkpoint["id"], record.previous_head, record.detached, undecodable=record.undecodable
        )
        return standing is Standing.COMMITTED

    def accept(self, page: Page) -> None:
        self.turn(page)  # scans start at the full page size
        head_id = self.chain.head_id
        # Without a head nothing in the namespace is committed.
        self.exhausted = self.exhausted or head_id is None
        if head_id is None:
            return
        for read in page.reads(with_etags=self.use_cache):
            parsed = Layout.parse_checkpoint_key(self.prefix, read.key)
            if parsed is None:
                continue  # not ours (a folder marker, a foreign object)
            pending = self.chain.pending(parsed.checkpoint_id)
            if self._head_due and not pending:
                self._head_met(head_id, record_listed=parsed.is_record and parsed.checkpoint_id == head_id)
            if parsed.is_record:
                # A pending record (a put in flight, or one that died) is never shown: not even read.
                self._current = None if pending else parsed.checkpoint_id
                if self._current is not None:
                    self.buffer.append((read, []))
            elif parsed.checkpoint_id == self._current:
                # Writes belong to the record listed just before them, and only to it: writes whose
                # record is missing (a cancelled run's, a loser's) are nobody's.
                self.buffer[-1][1].append(read)
        if self.exhausted and self._head_due:
            self._head_met(head_id, record_listed=False)

    def _head_met(self, head_id: str, *, record_listed: bool) -> None:
        """The listing reached the head's place. A head-only commit (the record PUT was lost, the head landed) has
        no record there: the head, a copy of it, is read in its place, and the writes listed next are its own."""
        self._head_due = False
        if not record_listed and self.head_key is not None:
            self.buffer.append((Get(self.head_key), []))
            self._current = head_id

    def ready(self) -> int:
        """How many buffered records are complete (their writes fully listed)."""
        return len(self.buffer) if self.exhausted else max(0, len(self.buffer) - 1)


@dataclass
class PlansState:
    """What every plan of the core works with: one bucket prefix, its codec, and the saver's recall."""

    layout: Layout
    codec: Codec
    inline_threshold: int = 4096
    appended_tail_bytes: int = APPENDED_TAIL_BYTES
    """Bytes of a list's elements appended since its base and parts that a record carries before they go out as a
    part (:class:`~.codec.Appended`); 0: every version of a large list is stored whole, as a new base."""
    parts_merged: int = PARTS_MERGED
    """Parts of one size merged into one (:class:`~.codec.Appended`)."""
    ttl: timedelta | None = None
    """With a lifecycle TTL, objects expire this long after they were written (see ``setup``)."""
    recall: Recall = field(default_factory=Recall)


class Reading(PlansState):
    """Plans that read a thread."""

    def get_tuple(self, config: RunnableConfig) -> Plan[CheckpointTuple | None]:
        """LangGraph's ``get_tuple``, as a caller's read: how it read the checkpoint (the latest, or by id) is what a
        put of the same run, or on the id it returns, is fenced by (:mod:`.fencing`)."""
        return (yield from self._read_tuple(config, caller=config))

    def _read_tuple(self, config: RunnableConfig, *, caller: RunnableConfig | None) -> Plan[CheckpointTuple | None]:
        """``get_tuple``; a read the saver makes for itself (``caller=None``) records nothing of anyone."""
        t = parse_config(config)
        if t.checkpoint_id is None:
            return (yield from self._get_latest(t.thread_id, t.checkpoint_ns, caller))
        return (yield from self._get_by_id(t.thread_id, t.checkpoint_ns, t.checkpoint_id, caller))

    def _caller_read(
        self, caller: RunnableConfig | None, thread_id: str, ns: str, seen: Seen, tup: CheckpointTuple | None = None
    ) -> None:
        """What a caller's read leaves for its puts: the run's first read of the namespace (when the call is a run's),
        and the read chain of the id it returns (the chain of the id it was given, or a new one: :class:`ReadChain`).
        """
        if caller is None:
            return
        if (run := run_of_config(caller)) is not None:
            self.recall.runs.read(run, thread_id, ns, seen)
        chain = chain_of(caller, self.recall, thread_id, ns)
        if chain is not None:
            chain.note(seen)
        if tup is not None:
            chain = chain or ReadChain(self.recall, thread_id, ns, seen)
            configurable = tup.config["configurable"]
            configurable["checkpoint_id"] = ReadId(configurable["checkpoint_id"], chain)

    def _get_latest(self, thread_id: str, ns: str, caller: RunnableConfig | None) -> Plan[CheckpointTuple | None]:
        head_key = self.layout.head(thread_id, ns)
        head = yield from one(Get(head_key))
        if head is None:
            self._caller_read(caller, thread_id, ns, Seen(ParentRead.LATEST, ABSENT))
            return None
        record = self.codec.decode_record(head_key, head.body)
        checkpoint_id = record.checkpoint["id"]
        self.recall.saw_head(thread_id, ns, seen_in(head, record))
        folder = self.layout.checkpoint_dir(thread_id, ns, checkpoint_id)
        # The large values the head names are read with the listing of its writes: a latest read without pending
        # writes (a run that ended) takes two round trips, large values or not.
        blob_keys = [self.layout.blob(thread_id, ns, ch, v) for ch, v in record.blobs.items()]  # one per channel
        listing, *blobs = yield [ListKeys(folder), *map(self._large_value, blob_keys)]
        key = self.layout.record(thread_id, ns, checkpoint_id)
        # The head was committed but its record was not (a crash between the two parallel PUTs):
        # restore the record from the head, which is a copy of it.
        repair = [] if key in listing.keys else [Put(key, head.body, mode=CREATE)]
        write_reads = yield from self._writes_reads(thread_id, ns, checkpoint_id, listing)
        fetched = dict(zip(blob_keys, blobs, strict=True))
        tuples = yield from self._assemble(thread_id, [(ns, record, write_reads)], repair, fetched)
        self._caller_read(caller, thread_id, ns, Seen(ParentRead.LATEST, checkpoint_id, head.etag), tuples[0])
        return tuples[0]

    def _get_by_id(
        self, thread_id: str, ns: str, checkpoint_id: str, caller: RunnableConfig | None
    ) -> Plan[CheckpointTuple | None]:
        key = self.layout.record(thread_id, ns, checkpoint_id)
        head_key = self.layout.head(thread_id, ns)
        obj, listing, head = yield from three(
            Get(key),
            ListKeys(self.layout.checkpoint_dir(thread_id, ns, checkpoint_id)),
            Get(head_key),
        )
        holds = head is not None and self._head_holds(head_key, head, checkpoint_id)
        # The latest, asked for by id (a UI showing the current state, a resume addressed at it), is read as the
        # latest: a put on top of it continues the thread. Any other checkpoint asked for by id is where forks,
        # replays and updates of an older checkpoint start: a put on top of it forks. Also when it is not there
        # at all: ``update_state`` on such an id stores a new branch, as InMemorySaver does.
        read = (
            Seen(ParentRead.LATEST, checkpoint_id, head.etag)
            if holds and head
            else Seen(ParentRead.BY_ID, checkpoint_id)
        )
        repair: list[Request] = []
        if obj is None:
            if not holds:
                self._caller_read(caller, thread_id, ns, read)
                return None
            assert head is not None
            # A head-only commit (see _get_latest): the head holds the record.
            obj, key = head, head_key
            repair.append(Put(self.layout.record(thread_id, ns, checkpoint_id), head.body, mode=CREATE))
        record = self.codec.decode_record(key, obj.body)
        if (yield from self._standing(thread_id, ns, record, head)) is not Standing.COMMITTED:
            self._caller_read(caller, thread_id, ns, read)
            return None  # a put that never committed (or has not yet): not part of the thread
        if holds:
            assert head is not None
            self.recall.saw_head(thread_id, ns, seen_in(head, record))
        write_reads = yield from self._writes_reads(thread_id, ns, checkpoint_id, listing)
        tuples = yield from self._assemble(thread_id, [(ns, record, write_reads)], repair)
        self._caller_read(caller, thread_id, ns, read, tuples[0])
        return tuples[0]

    def _head_holds(self, head_key: str, head: StoredObject, checkpoint_id: str) -> bool:
        """Whether the head holds this checkpoint (a damaged head holds none: ``repair_thread`` rebuilds it)."""
        try:
            return self.codec.peek_head_id(head_key, head.body) == checkpoint_id
        except CorruptObjectError:
            return False

    def _writes_reads(self, thread_id: str, ns: str, checkpoint_id: str, listing: Page) -> Plan[builtins.list[Get]]:
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

    def _standing(
        self, thread_id: str, ns: str, record: Record, head: StoredObject | None, *, by_links: bool = False
    ) -> Plan[Standing]:
        """Whether ``record`` is committed, by :mod:`.chain`'s rule, walking down from ``head``. ``by_links``: only by
        links written as links (a verdict reached through a gap no deleter named counts as an orphan)."""
        standing, chain = yield from self._standing_on(thread_id, ns, record, head)
        if by_links and standing is Standing.COMMITTED and chain.resumed:
            return Standing.ORPHAN
        return standing

    def _standing_on(
        self, thread_id: str, ns: str, record: Record, head: StoredObject | None
    ) -> Plan[tuple[Standing, Chain]]:
        try:
            chain = (
                Chain.without_head()
                if head is None
                else Chain.from_head(*self.codec.peek_chain(self.layout.head(thread_id, ns), head.body))
            )
        except CorruptObjectError:
            chain = Chain.of_damaged_head()
        checkpoint_id = record.checkpoint["id"]
        if record.detached or record.undecodable:
            standing = chain.standing(
                checkpoint_id, record.previous_head, record.detached, undecodable=record.undecodable
            )
            return standing, chain
        if (known := chain.decided(checkpoint_id)) is not None:
            return known, chain
        assert chain.head_id is not None  # decided() settles every id without a head
        return (yield from self._walk_down_to(thread_id, ns, chain, chain.head_id, record)), chain

    def _walk_down_to(self, thread_id: str, ns: str, chain: Chain, head_id: str, record: Record) -> Plan[Standing]:
        """The standing of a record the head alone cannot place: the records between the head and it are
        read newest first, and each, naming the head it replaced, moves the chain down until it decides."""
        prefix = self.layout.records(thread_id, ns)
        checkpoint_id = record.checkpoint["id"]
        pager = Pager(prefix=prefix, start_after=self.layout.record(thread_id, ns, head_id))
        while True:
            page = yield from one(pager.request())
            pager.turn(page)
            for chunk in chunks(_records_between(prefix, page, checkpoint_id, head_id), READ_BATCH):
                objs = yield from all_of([read for _, read in chunk])
                if (known := self._follow_links(chain, chunk, objs, record)) is not None:
                    return known
            if pager.exhausted:
                return chain.standing(checkpoint_id, record.previous_head, record.detached)

    def _follow_links(
        self, chain: Chain, chunk: Sequence[tuple[str, Get]], objs: Sequence[StoredObject | None], record: Record
    ) -> Standing | None:
        """Feed a batch of records (newest first, above ``record`` or ``record`` itself) to the chain; the
        standing of ``record`` once the chain has decided it, ``None`` while it has not."""
        checkpoint_id = record.checkpoint["id"]
        for (cid, read), obj in zip(chunk, objs, strict=True):
            if cid == checkpoint_id:
                return chain.standing(cid, record.previous_head, record.detached)
            if obj is None:
                continue  # deleted since the listing: a missing link
            try:
                previous, detached = self.codec.peek_link(read.key, obj.body)
            except CorruptObjectError:
                # reported when it is read itself; here it leaves the link where it is, as a missing one
                chain.standing(cid, None, False, undecodable=True)
                continue
            chain.standing(cid, previous, detached)
            if (known := chain.decided(checkpoint_id)) is not None:
                return known
        return None

    def _assemble(
        self,
        thread_id: str,
        items: Sequence[tuple[str, Record, builtins.list[Get]]],
        extra: Sequence[Request] = (),
        fetched: Mapping[str, StoredObject | None] | None = None,
    ) -> Plan[builtins.list[CheckpointTuple]]:
        """Fetch the blobs and writes of several records (ns, record, writes reads) in one parallel batch, each large
        value once (records that extend one list's base share it: :class:`~.codec.Appended`), none already
        ``fetched``."""
        blobs: dict[str, StoredObject | None] = dict(fetched or {})
        blob_keys = builtins.list(
            dict.fromkeys(
                key
                for ns, record, _ in items
                for ch, v in record.blobs.items()
                if (key := self.layout.blob(thread_id, ns, ch, v)) not in blobs
            )
        )
        requests: list[Request] = [self._large_value(key) for key in blob_keys]
        for _, _, write_reads in items:
            requests.extend(write_reads)
        requests.extend(extra)
        # Heterogeneous: the replies of the blob and writes reads (StoredObject | None), then the extra's (ignored).
        replies: Iterator[Any] = iter((yield requests) if requests else [])
        blobs.update((key, next(replies)) for key in blob_keys)
        tuples = []
        for ns, record, write_reads in items:
            values = dict(record.inline)
            record_key = self.layout.record(thread_id, ns, record.checkpoint["id"])
            for ch in record.large_channels():
                base, *parts = (self._decoded(thread_id, ns, record, name, blobs) for name in record.entries_of(ch))
                values[ch] = self.codec.extended(*base, record, ch, record_key, parts)
            batches = []
            for read in write_reads:
                obj = next(replies)
                if obj is not None:
                    batches.append(self.codec.decode_writes(read.key, obj.body))
            tuples.append(self._tuple(thread_id, ns, record, values, batches))
        return tuples

    def _decoded(
        self, thread_id: str, ns: str, record: Record, name: str, fetched: Mapping[str, StoredObject | None]
    ) -> tuple[str, Any]:
        """The key and the decoded body of the large value ``record.blobs[name]``, from what was ``fetched``.
        Decoded for each record: two checkpoints never share an object, as with InMemorySaver."""
        key = self.layout.blob(thread_id, ns, name, record.blobs[name])
        blob = fetched[key]
        if blob is None:
            raise CorruptObjectError(key, "a channel value the checkpoint references is missing")
        written = written_here(blob.modified, blob.served, datetime.now(timezone.utc))
        self.recall.wrote_blobs(thread_id, ns, {name: record.blobs[name]}, written)
        return key, self.codec.decode_blob(key, blob.body)

    def _large_value(self, key: str) -> Get:
        """The read of a large value: answered from the read cache when this process read it before, as what a
        large value's key holds never changes (:attr:`~.requests.Get.settled`); not with a lifecycle TTL, whose
        renewal dates each value by the reply that brings it."""
        return Get(key, settled=self.ttl is None)

    def _tuple(
        self, thread_id: str, ns: str, record: Record, values: dict[str, Any], batches: builtins.list[WriteBatch]
    ) -> CheckpointTuple:
        checkpoint = cast(Checkpoint, {**record.checkpoint, "channel_values": values})
        return CheckpointTuple(
            config=checkpoint_config(thread_id, ns, checkpoint["id"]),
            checkpoint=checkpoint,
            metadata=record.metadata,
            parent_config=checkpoint_config(thread_id, ns, record.parent_id) if record.parent_id else None,
            pending_writes=merge_writes(batches),
        )

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Plan[None]:
        """Stream matching tuples newest first within each thread (threads in key order)."""
        # An empty id bounds nothing, as in InMemorySaver (it tests the id for truth).
        before_id = ((before or {}).get("configurable") or {}).get("checkpoint_id") or None
        budget = _Budget(limit, run_of_config(config) if before_id is not None and limit == 1 else None)
        if budget.done:
            return
        if config is None:
            root = self.layout.threads_root

            def threads(page: Page) -> Plan[bool]:
                for prefix in page.prefixes:
                    thread_id = yield from self._name_of(self.layout.segment_after(prefix, root), prefix)
                    if thread_id is None:
                        continue  # a folder we did not make
                    yield from self._list_thread(thread_id, None, filter, before_id, budget)
                    if budget.done:
                        return False
                return True

            yield from for_each_emitted(pages(root, delimiter="/"), threads)
            return
        t = parse_config(config)
        configurable = config.get("configurable") or {}
        ns = t.checkpoint_ns if "checkpoint_ns" in configurable else None
        if t.checkpoint_id is not None:
            yield from self._list_one(t.thread_id, ns, t.checkpoint_id, filter, before_id, budget)
            return
        yield from self._list_thread(t.thread_id, ns, filter, before_id, budget)
        if budget.replay_of is not None and not budget.done and ns is not None:
            # LangGraph's replay lookup found nothing below the replay point: the subgraph starts over with a
            # parentless put, a new root beside what the namespace holds (a fork, not a second creator).
            self.recall.runs.read(budget.replay_of, t.thread_id, ns, Seen(ParentRead.BY_ID, ABSENT))

    def _list_one(
        self,
        thread_id: str,
        ns: str | None,
        checkpoint_id: str,
        filter: dict[str, Any] | None,
        before_id: str | None,
        budget: _Budget,
    ) -> Plan[None]:
        """``list`` of a config naming a checkpoint: that checkpoint, in each namespace that has it."""
        if before_id is not None and checkpoint_id >= before_id:
            return
        for name in [ns] if ns is not None else (yield from self._namespaces(thread_id)):
            tup = yield from self._read_tuple(checkpoint_config(thread_id, name, checkpoint_id), caller=None)
            if tup is not None and matches(tup.metadata, filter):
                yield Emit(tup)
                budget.take()
                if budget.done:
                    return

    def _name_of(self, segment: str, prefix: str) -> Plan[str | None]:
        """The real id behind a thread or namespace folder's segment (:func:`.plans.id_behind`): one method that the
        core's readers and maintenance all go through, and a test can interpose on."""
        return (yield from id_behind(segment, prefix))

    def _namespaces(self, thread_id: str) -> Plan[builtins.list[str]]:
        root = self.layout.namespaces(thread_id)
        found = yield from all_pages(root, delimiter="/")
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
        filter: dict[str, Any] | None,
        before_id: str | None,
        budget: _Budget,
    ) -> Plan[None]:
        """Stream a thread's committed tuples newest first.

        Only bounded listings read through the read cache: a walk over a whole history is a scan, which
        would evict what is worth keeping and make the listing's memory grow with the history.
        """
        namespaces = [ns] if ns is not None else (yield from self._namespaces(thread_id))
        page_size = _first_page_size(budget, filter)
        cursors = [
            _NsCursor(
                checkpoint_ns=name,
                prefix=self.layout.records(thread_id, name),
                start_after=self.layout.record(thread_id, name, before_id) if before_id else None,
                page_size=page_size,
                use_cache=budget.remaining is not None,
            )
            for name in namespaces
        ]
        if not cursors:
            return
        yield from self._open_cursors(thread_id, cursors, before_id)
        yield from self._stream(thread_id, cursors, filter, before_id, budget)

    def _open_cursors(self, thread_id: str, cursors: builtins.list[_NsCursor], before_id: str | None) -> Plan[None]:
        """Place each namespace's cursor on its commit chain, in one round trip for all of them: its head,
        its first page and, when paging, the record the page starts below (whose ``previous_head`` says
        where the chain continues).

        The replies are dropped when this returns: the cursors keep what they need of the first pages,
        where holding the replies would keep each namespace's first page (up to 1,000 keys with their
        stamps) alive for the whole listing.
        """
        first: builtins.list[Request] = []
        for c in cursors:
            start = [Get(self.layout.record(thread_id, c.checkpoint_ns, before_id))] if before_id else []
            first.extend([Get(self.layout.head(thread_id, c.checkpoint_ns)), c.request(), *start])
        # Heterogeneous: per cursor, the head's reply, the first page and (with before_id) the bound's.
        replies: Iterator[Any] = iter((yield first))
        for c in cursors:
            head: StoredObject | None = next(replies)
            page: Page = next(replies)
            head_key = self.layout.head(thread_id, c.checkpoint_ns)
            chain = (
                Chain.without_head() if head is None else Chain.from_head(*self.codec.peek_chain(head_key, head.body))
            )
            c.place(chain, head_key)
            if before_id:
                bound: StoredObject | None = next(replies)
                if not (yield from self._continue_below(thread_id, c, head, bound)):
                    # The bound is not a record on this namespace's chain (another namespace's id, a
                    # detached, deleted or never committed checkpoint): walk the chain from the head.
                    c.restart()
                    continue
            c.accept(page)

    def _continue_below(
        self, thread_id: str, cursor: _NsCursor, head: StoredObject | None, bound: StoredObject | None
    ) -> Plan[bool]:
        """Whether a listing paged with ``before`` can continue the chain right below the bound's record
        (it is committed on this namespace's chain, so its ``previous_head`` is the next link); if so,
        the cursor's chain resumes there."""
        record = None if bound is None else self.codec.decode_record(cursor.start_after or "", bound.body)
        if record is None or record.detached:
            return False
        if (yield from self._standing(thread_id, cursor.checkpoint_ns, record, head)) is not Standing.COMMITTED:
            return False
        cursor.chain = cursor.chain.below(record.previous_head)
        return True

    def _stream(
        self,
        thread_id: str,
        cursors: builtins.list[_NsCursor],
        filter: dict[str, Any] | None,
        before_id: str | None,
        budget: _Budget,
    ) -> Plan[None]:
        """Emit the tuples the opened cursors show, newest first across namespaces, a batch at a time."""
        while not budget.done:
            batch = yield from self._next_batch(cursors, budget, filter)
            if not batch:
                return
            objs = yield from all_of([read for _, read, _ in batch])
            chosen = self._shown(batch, objs, filter, before_id)
            if budget.remaining is not None:
                chosen = chosen[: budget.remaining]
            # One parallel round trip for the values and writes of every chosen record.
            tuples = yield from self._assemble(thread_id, [(c.checkpoint_ns, r, w) for c, r, w in chosen])
            for tup in tuples:
                if budget.replay_of is not None:
                    # Reading the one checkpoint below a bound is how LangGraph finds a subgraph's state for a
                    # replay (``_replay.py``): the run's put on top of it forks. Pages of history (any other limit,
                    # or no run) are not fork points.
                    found_in = tup.config["configurable"]["checkpoint_ns"]
                    self.recall.runs.read(
                        budget.replay_of, thread_id, found_in, Seen(ParentRead.BY_ID, tup.checkpoint["id"])
                    )
                yield Emit(tup)
                budget.take()

    def _shown(
        self,
        batch: Sequence[tuple[_NsCursor, Get, builtins.list[Get]]],
        objs: Sequence[StoredObject | None],
        filter: dict[str, Any] | None,
        before_id: str | None,
    ) -> builtins.list[tuple[_NsCursor, Record, builtins.list[Get]]]:
        """The records of a batch the listing shows: committed (each cursor's chain judges its records in
        order, so every record is offered to it), below the ``before`` bound, and matching the filter."""
        chosen: builtins.list[tuple[_NsCursor, Record, builtins.list[Get]]] = []
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
        return chosen

    def _next_batch(
        self, cursors: builtins.list[_NsCursor], budget: _Budget, filter: dict[str, Any] | None
    ) -> Plan[builtins.list[tuple[_NsCursor, Get, builtins.list[Get]]]]:
        """Up to READ_BATCH complete records (record and writes reads), merged newest first across namespaces."""
        want = READ_BATCH if filter or budget.remaining is None else min(READ_BATCH, budget.remaining)
        batch: list[tuple[_NsCursor, Get, list[Get]]] = []
        while len(batch) < want:
            starving = [c for c in cursors if not c.ready() and not c.exhausted]
            if starving:
                listed = yield from all_of([c.request() for c in starving])
                for c, page in zip(starving, listed, strict=True):
                    c.accept(page)
                continue
            live = [c for c in cursors if c.ready()]
            if not live:
                break
            # Inverted ids: the smallest key is the newest checkpoint.
            best = min(live, key=lambda c: c.order(c.buffer[0][0]))
            read, write_reads = best.buffer.pop(0)
            batch.append((best, read, write_reads))
        return batch

    # -- DeltaChannel support -----------------------------------------------------------------------


def _records_between(prefix: str, page: Page, oldest: str, newest: str) -> list[tuple[str, Get]]:
    """Reads of the records of a listing page from ``oldest`` (included) up to ``newest`` (excluded)."""
    reads = []
    for read in page.reads():
        parsed = Layout.parse_checkpoint_key(prefix, read.key)
        if parsed is not None and parsed.is_record and oldest <= parsed.checkpoint_id < newest:
            reads.append((parsed.checkpoint_id, read))
    return reads


def _first_page_size(budget: _Budget, filter: dict[str, Any] | None) -> int:
    """Keys of a listing's first page. Records and their writes share one listing, so a bounded listing
    asks for a generous page (one LIST for a small ``limit``); a scan (no limit, or a filter) takes full
    pages, so that its peak memory is the same at any history length."""
    if budget.remaining is None or filter:
        return MAX_PAGE
    return min(MAX_PAGE, max(100, 10 * budget.remaining + 10))


def seen_in(head: StoredObject, record: Record) -> HeadSeen:
    """What a saver remembers of a head it read (``record`` is the head's body decoded)."""
    run_id = None if record.metadata.get("run_id") is None else str(record.metadata["run_id"])
    versions = record.checkpoint["channel_versions"]
    return head_seen(
        record.checkpoint["id"],
        head.etag,
        record.blobs,
        run_id,
        versions,
        record.encoded,
        record.rolled_back,
        record.deleted,
        record.appended,
    )


def matches(metadata: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    return not filter or all(metadata.get(k) == v for k, v in filter.items())


def merge_writes(batches: Iterable[WriteBatch]) -> list[PendingWrite]:
    """Pending writes of one checkpoint, one per (task, idx), in ``writes_sort_key`` order, each write by
    its own ``task_path`` (as InMemorySaver orders them).

    A task's object already holds one write per index. Earlier releases stored one object per call
    (``w/{task}/{idx}``): there a standalone special write (an error, interrupt or resume value) replaces
    the same index from a combined call.
    """
    chosen: dict[tuple[str, int], tuple[str, str, Any]] = {}
    for batch in sorted(batches, key=lambda b: len(b.writes) == 1 and b.writes[0][0] < 0):
        for idx, channel, value, path in batch.writes:
            chosen[(batch.task_id, idx)] = (path, channel, value)
    ordered = sorted(chosen.items(), key=lambda kv: writes_sort_key(kv[1][0], kv[0][0], kv[0][1]))
    return [(task_id, channel, value) for (task_id, _), (_, channel, value) in ordered]
