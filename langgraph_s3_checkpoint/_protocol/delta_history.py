"""The history a ``DeltaChannel`` is rebuilt from: ``get_delta_channel_history`` walks a checkpoint's ancestors, by
their records' parent links, reading each ancestor's record with its writes objects, until every channel asked for
has met its seed (its nearest stored value). An internal read: it remembers nothing, so it cannot change how a later
put is fenced."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import DeltaChannelHistory, PendingWrite

from ..errors import CorruptObjectError
from .codec import Record, WriteBatch
from .keys import Layout
from .plans import all_of, one, two
from .reading import CheckpointAddress, Pager, Reading, merge_writes, parse_config
from .requests import Get, Page, Plan


class DeltaHistoryReading(Reading):
    """Plans that read the history of ``DeltaChannel`` values."""

    def get_delta_channel_history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Plan[Mapping[str, DeltaChannelHistory]]:
        """Each channel's writes since its last stored value (its seed), walking the target checkpoint's parents
        as InMemorySaver does (only the target's own line of history counts).

        An internal read: it remembers nothing (no head seen, no fork point, no age of a large value), so it
        cannot change how a later put is fenced. The target is read with the first page of the namespace's
        listing below it; then each ancestor, from the target's parent down, in one round trip with its
        writes objects (each read with the ETag its listing showed: one already read costs nothing), until
        every channel has met its seed. Reading an ancestor is what names the next one, so no record is read
        that the answer does not need; the listing goes on only where the next ancestor's folder is.
        """
        if not channels:
            return {}
        t = parse_config(config)
        walk = _Ancestry(prefix=self.layout.records(t.thread_id, t.checkpoint_ns))
        target = yield from self._delta_target(t, walk)
        history = _DeltaHistory(channels, target.parent_id if target is not None else None)
        yield from self._walk_ancestors(t, walk, history)
        return history.result()

    def _delta_target(self, t: CheckpointAddress, walk: _Ancestry) -> Plan[Record | None]:
        """The checkpoint whose history is asked for (the head's, without an id), read in parallel with the
        first page of the listing below it."""
        head_key = self.layout.head(t.thread_id, t.checkpoint_ns)
        if t.checkpoint_id is None:
            head, page = yield from two(Get(head_key), walk.request())
            walk.accept(page)
            return None if head is None else self.codec.decode_record(head_key, head.body)
        key = self.layout.record(t.thread_id, t.checkpoint_ns, t.checkpoint_id)
        walk.start_after = key
        obj, page = yield from two(Get(key), walk.request())
        walk.accept(page)
        if obj is None:
            # A head-only commit (its record PUT was lost): the head holds the record.
            head = yield from one(Get(head_key))
            if head is None or not self._head_holds(head_key, head, t.checkpoint_id):
                return None
            obj, key = head, head_key
        return self.codec.decode_record(key, obj.body)

    def _walk_ancestors(self, t: CheckpointAddress, walk: _Ancestry, history: _DeltaHistory) -> Plan[None]:
        """Offer ``history`` the ancestors from the target's parent down until it has found every seed.

        Each round trip reads the next ancestor's record and writes objects, with the large values holding
        the seeds the ancestor before it stored. An ancestor whose record is gone (pruned, rolled back) ends
        the walk, as in InMemorySaver.
        """
        # channel, the reads of its large values (its base, then its parts), the record storing it, the record's key
        large: list[tuple[str, list[Get], Record, str]] = []
        while True:
            ancestor = history.next_ancestor if history.remaining else None
            reads = (yield from walk.folder(ancestor)) if ancestor is not None else []
            if not reads and not large:
                return
            value_reads = [read for _, channel_reads, _, _ in large for read in channel_reads]
            replies = yield from all_of([*value_reads, *reads])
            values = iter(replies[: len(value_reads)])
            for channel, channel_reads, holder, holder_key in large:
                decoded = []
                for read in channel_reads:
                    blob = next(values)
                    if blob is None:
                        raise CorruptObjectError(read.key, "a channel value the checkpoint references is missing")
                    decoded.append((read.key, self.codec.decode_blob(read.key, blob.body)))
                base, *parts = decoded
                history.seeds[channel] = self.codec.extended(*base, holder, channel, holder_key, parts)
            found = replies[len(value_reads) :]
            if not reads or found[0] is None:
                return  # no further ancestor (its record is gone)
            record = self.codec.decode_record(reads[0].key, found[0].body)
            batches = [
                self._writes_to(read.key, obj.body, history.remaining)
                for read, obj in zip(reads[1:], found[1:], strict=True)
                if obj is not None
            ]
            large = [
                (
                    channel,
                    [
                        self._large_value(self.layout.blob(t.thread_id, t.checkpoint_ns, name, record.blobs[name]))
                        for name in record.entries_of(channel)
                    ],
                    record,
                    reads[0].key,
                )
                for channel in history.take(record, merge_writes(batches))
            ]

    def _writes_to(self, key: str, body: bytes, channels: set[str]) -> WriteBatch:
        """A writes object's visible writes to ``channels`` (the others are not deserialized)."""
        task = self.codec.peek_task_writes(key, body)
        return WriteBatch(
            task.task_id,
            [
                (w.idx, w.channel, self.codec.load(key, w.typed), w.path)
                for w in task.visible()
                if w.channel in channels
            ],
        )


@dataclass(kw_only=True)
class _Ancestry(Pager):
    """The listing of a namespace's records, newest first, consumed from a checkpoint down to its ancestors:
    it hands out each ancestor's folder (record and writes keys, with the ETags listed) and lists further only
    when the folder asked for is past the page it has. Keeps one page at most."""

    listed: deque[tuple[str, bool, Get]] = field(default_factory=deque)
    """(checkpoint id, whether it is the record, its read) of the keys listed and not yet passed."""

    def accept(self, page: Page) -> None:
        self.turn(page)
        for read in page.reads():
            parsed = Layout.parse_checkpoint_key(self.prefix, read.key)
            if parsed is not None:  # not a folder marker, not a foreign object
                self.listed.append((parsed.checkpoint_id, parsed.is_record, read))

    def folder(self, checkpoint_id: str) -> Plan[list[Get]]:
        """The reads of a checkpoint's record and then its writes objects, or ``[]`` if no record of it is
        listed. Checkpoints are asked for newest first; the keys of newer ones (other branches) are passed."""
        found: list[tuple[bool, Get]] = []
        while True:
            # Listed newest first: the order of checkpoint ids is the order of their folders.
            while self.listed and self.listed[0][0] > checkpoint_id:
                self.listed.popleft()
            while self.listed and self.listed[0][0] == checkpoint_id:
                found.append(self.listed.popleft()[1:])
            if self.listed or self.exhausted:
                break  # an older checkpoint's key follows, or nothing: the folder is complete
            self.accept((yield from one(self.request())))
        records = [read for is_record, read in found if is_record]
        return [*records, *(read for is_record, read in found if not is_record)] if records else []


@dataclass
class _DeltaHistory:
    """What ``get_delta_channel_history`` has gathered so far while walking a checkpoint's ancestors."""

    channels: Sequence[str]
    next_ancestor: str | None
    """The id of the next ancestor to take (``None``: the walk is over)."""
    collected: dict[str, list[PendingWrite]] = field(default_factory=dict)
    """Each channel's writes since its seed, newest first."""
    seeds: dict[str, Any] = field(default_factory=dict)
    remaining: set[str] = field(default_factory=set)
    """Channels whose seed (a stored value) has not been met yet."""

    def __post_init__(self) -> None:
        self.collected = {c: [] for c in self.channels}
        self.remaining = set(self.channels)

    def take(self, ancestor: Record, writes: Sequence[PendingWrite]) -> list[str]:
        """Take the next ancestor: its writes to channels without a seed yet (the seed's own writes too: they
        made its child), and the values it stores as seeds. Returns the channels whose seed is a large value,
        which the caller reads into :attr:`seeds`."""
        for write in reversed(writes):
            if write[1] in self.remaining:
                self.collected[write[1]].append(write)
        large = []
        for ch in sorted(self.remaining):
            if ch in ancestor.inline:
                self.seeds[ch] = ancestor.inline[ch]
                self.remaining.discard(ch)
            elif ch in ancestor.blobs:
                large.append(ch)
                self.remaining.discard(ch)
        self.next_ancestor = ancestor.parent_id
        return large

    def result(self) -> dict[str, DeltaChannelHistory]:
        """Each channel's writes oldest first, with its seed when one was found."""
        result: dict[str, DeltaChannelHistory] = {}
        for ch in self.channels:
            entry: DeltaChannelHistory = {"writes": list(reversed(self.collected[ch]))}
            if ch in self.seeds:
                entry["seed"] = self.seeds[ch]
            result[ch] = entry
        return result
