"""Committing: ``put`` (the commit protocol, in one place) and ``put_writes``."""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
)

from .chain import Standing
from .errors import (
    CheckpointConflictError,
    ClockSkewError,
    InvalidConfigError,
)
from .fencing import Fence, Fenced, HeadSeen, Join, head_seen
from .keys import MAX_KEY_BYTES, escape, has_lone_surrogate, is_digest, key_bytes
from .plans import all_of, one
from .reading import Reading, checkpoint_config, parse_config
from .requests import (
    Delete,
    Get,
    Plan,
    Put,
    StoredObject,
    Written,
)
from .writes import TaskWrites

WRITE_ATTEMPTS = 8
"""How often ``put_writes`` merges into a task's writes object that another call changed meanwhile."""
JOIN_ATTEMPTS = 5
"""How often an unfenced ``put`` re-reads a head that moved under it before giving up."""
SUPERSEDED = "<superseded>"
"""ETag of a head this saver committed that another writer has already continued: its next put loses."""


class Committing(Reading):
    """Plans that write a thread's checkpoints and pending writes."""

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
        if not isinstance(checkpoint_id, str) or not checkpoint_id or has_lone_surrogate(checkpoint_id):
            # "" would be filed where no reader finds it, and LangGraph reads an empty id as "the latest"
            raise InvalidConfigError(
                "checkpoint['id'] must be a non-empty string of valid Unicode (LangGraph makes uuid6 ids), "
                f"got {checkpoint_id!r}"
            )
        stored_metadata = get_checkpoint_metadata(config, metadata)
        run_id = run_of(stored_metadata)
        fence = self.memory.fence(thread_id, ns, parent_id)
        if (
            parent_id is not None
            and checkpoint_id <= parent_id
            and (isinstance(fence, Fenced) or (_carries_time(checkpoint_id) and _carries_time(parent_id)))
        ):
            raise ClockSkewError(thread_id, ns, checkpoint_id, parent_id, "its parent")
        if isinstance(fence, Fenced) and fence.seen.etag == SUPERSEDED:
            raise CheckpointConflictError(thread_id, ns)
        now = datetime.now(timezone.utc)
        values = self._split_values(thread_id, ns, checkpoint, new_versions, fence, now)
        prerequisites = [*values.puts, *self._run_entries(run_id, thread_id, ns, checkpoint_id, fence)]
        names = [] if isinstance(fence, Fenced) else self._names(thread_id, ns)  # a fenced parent's head proves them
        prerequisites += names
        head_key = self.layout.head(thread_id, ns)
        record_key = self.layout.record(thread_id, ns, checkpoint_id)
        # Before anything is sent: S3 refusing the record's key while the head sent with it lands would leave a
        # head whose record can never be restored.
        _refuse_long_keys(f"checkpoint {reprlib.repr(checkpoint_id)}", [record_key, *(p.key for p in prerequisites)])
        joining = isinstance(fence, Join)
        head_now: StoredObject | None = None
        if prerequisites or joining:
            # Heterogeneous: the prerequisites' replies (ignored), then the head's when joining.
            replies: list[Any] = yield [*prerequisites, *([Get(head_key)] if joining else [])]
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
        if names:
            # Offered again once committed: gc may have deleted a name it found alone (a thread or namespace left
            # with nothing else) after the first offer was refused as existing, and before the commit. gc puts
            # back a name it deleted if it then finds the thread in use; between the two, one of them sees the
            # other (docs/design.md, "name objects").
            yield [*names]
        if committed_etag is not None:
            seen = head_seen(committed_etag, values.blobs, run_id, checkpoint["channel_versions"], values.inline)
            self.memory.saw_head(thread_id, ns, checkpoint_id, seen)
        self.memory.wrote_blobs(thread_id, ns, values.renewed, now)
        return checkpoint_config(thread_id, ns, checkpoint_id)

    def _commit(
        self, c: _Commit, fence: Fence, head_now: StoredObject | None, record: Callable[[str | None, bool], bytes]
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
            replies = yield from all_of([Put(c.record_key, body), dataclasses.replace(head_put, body=body), *extra])
            head_reply = replies[1]
            if isinstance(head_reply, Written):
                return head_reply.etag
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

    def _attempt(self, c: _Commit, fence: Fence, head_now: StoredObject | None) -> _HeadSwap | str | None:
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
        straggler = isinstance(fence, Join) and not fence.fork and c.source != "fork"
        if straggler and c.parent_id not in (None, head_id):
            # LangGraph puts on top of the checkpoint it just read as the latest (a step, an input, an
            # update), so a parent that is no longer the head means another writer moved the thread
            # meanwhile: through another saver, through this one (two requests of one conversation), or
            # before this saver's bounded memory forgot the head. Joining would commit a second child
            # of that parent and silently drop the other writer's. The forks are exempt: a replay or
            # update of an older checkpoint read it explicitly (``fence.fork``), and ``__copy__``
            # (source "fork") puts on top of the latest checkpoint's parent by design.
            raise CheckpointConflictError(c.thread_id, c.ns)
        if c.checkpoint_id < head_id:
            if c.parent_id == head_id:
                raise ClockSkewError(c.thread_id, c.ns, c.checkpoint_id, head_id, "the head")
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

        A channel whose version did not move since the fenced parent keeps the value the parent stored at
        that version, as it was stored (or no value, if the parent had none), as InMemorySaver and
        PostgresSaver keep one value per (channel, version) written when the version moved. Why: LangGraph
        hands over live channel objects, and some change in place (a join's set of nodes seen); with
        ``durability="async"`` a put runs after the previous one finished, when the next step may already
        have changed such an object. Serializing it then stored the next step's value under this version.
        It also spares serializing what did not change.

        A large value is sent unless the fenced parent references the same version (its head is still
        there, so its values are). Anything else is offered with ``If-None-Match``, which the server
        refuses without storing if it exists. With a lifecycle TTL, values are rewritten once they are
        older than half of it: the rule expires objects by their own age, and a live thread must not lose
        a value it still references.
        """
        values = checkpoint["channel_values"]
        parent = fence.seen if isinstance(fence, Fenced) else None
        result = _Values()
        for channel, raw_version in checkpoint["channel_versions"].items():
            version = str(raw_version)
            kept = _kept_from_parent(parent, channel, version, new_versions)
            if kept is _NO_VALUE or (kept is None and channel not in values):
                continue
            if isinstance(kept, list):
                result.inline[channel] = kept
                continue
            typed = None if kept is _PARENTS_BLOB else self.codec.encode_value(channel, values[channel])
            if typed is not None and len(typed[1]) <= self.inline_threshold:
                result.inline[channel] = typed
                continue
            result.blobs[channel] = version
            vouched = parent is not None and parent.blobs.get(channel) == version
            self._store_blob(result, thread_id, ns, channel, version, typed, vouched, values, now)
        return result

    def _store_blob(
        self,
        result: _Values,
        thread_id: str,
        ns: str,
        channel: str,
        version: str,
        typed: list[Any] | None,
        vouched: bool,
        values: Mapping[str, Any],
        now: datetime,
    ) -> None:
        """Send a large value unless it is known to exist (``vouched``), or renew it for the lifecycle rule.
        ``typed`` is ``None`` for a value carried over from the parent, whose blob exists."""
        key = self.layout.blob(thread_id, ns, channel, version)
        if self.ttl is None:
            if not vouched and typed is not None:
                result.puts.append(Put(key, self.codec.encode_blob(typed), if_none_match=True))
            return
        written = self.memory.blob_written(thread_id, ns, channel, version)
        if vouched and written is not None and now - written <= self.ttl / 2:
            return
        if typed is None and channel in values:
            # Renewed from the live value: the stored bytes are not at hand (a value LangGraph changed in place
            # without a new version is the one case where the two differ).
            typed = self.codec.encode_value(channel, values[channel])
        if typed is not None:
            result.puts.append(Put(key, self.codec.encode_blob(typed)))
            result.renewed[channel] = version

    def _run_entries(self, run_id: str | None, thread_id: str, ns: str, checkpoint_id: str, fence: Fence) -> list[Put]:
        """Run-index entries (the run's first checkpoint id here), unless the fenced parent is the run's."""
        if run_id is None or (isinstance(fence, Fenced) and fence.seen.run_id == run_id):
            return []
        return self._index_entries(run_id, thread_id, ns, checkpoint_id)

    def _index_entries(self, run_id: str, thread_id: str, ns: str, checkpoint_id: str) -> list[Put]:
        """The two create-only entries that index a run in a namespace, naming the oldest checkpoint it touched
        there (as far as the first writer knows: an entry that exists is not changed)."""
        marker = checkpoint_id.encode()
        return [
            Put(self.layout.run_entry(run_id, thread_id, ns), marker, if_none_match=True),
            Put(self.layout.thread_run_entry(run_id, thread_id, ns), marker, if_none_match=True),
        ]

    def _names(self, thread_id: str, ns: str) -> list[Put]:
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

        One object per task holds all its writes (:mod:`langgraph_s3_checkpoint.writes`), each with the run
        that wrote it (the config's ``run_id``, as ``put`` records it) so that a rollback can take one run's
        writes out. The first call creates it (``If-None-Match``: one PUT, and a retried PUT changes
        nothing). A later call for the same task — a node that interrupts and then completes, a task retried
        after a crash, another run resuming it — reads it and replaces it with the merge, conditional on the
        ETag it read, so concurrent calls cannot drop each other's writes.

        A run writing to a checkpoint that is not its own (the one it resumes) is first indexed there, as
        ``put`` indexes a run's first checkpoint (see :meth:`_writes_run_entries`), so that
        ``delete_for_runs`` finds these writes even when the run never commits a checkpoint.
        """
        t = parse_config(config, need_checkpoint_id=True)
        assert t.checkpoint_id is not None
        if not isinstance(task_id, str) or has_lone_surrogate(task_id):
            raise InvalidConfigError(f"task_id must be a string of valid Unicode (no lone surrogates), got {task_id!r}")
        if has_lone_surrogate(t.checkpoint_id):  # no put can store that checkpoint (see put)
            raise InvalidConfigError(
                f"checkpoint_id must be valid Unicode (no lone surrogates), got {t.checkpoint_id!r}"
            )
        if not writes:
            return
        run_id = run_of(get_checkpoint_metadata(config, {}))
        new = [
            (WRITES_IDX_MAP.get(channel, i), channel, self.codec.dump(f"the write to channel {channel!r}", value))
            for i, (channel, value) in enumerate(writes)
        ]
        key = self.layout.task_writes(t.thread_id, t.checkpoint_ns, t.checkpoint_id, task_id)
        entries = self._writes_run_entries(run_id, t.thread_id, t.checkpoint_ns, t.checkpoint_id)
        _refuse_long_keys(f"the writes of task {reprlib.repr(task_id)}", [key, *(e.key for e in entries)])
        if entries:
            # Index first, as put does: writes that landed without their entries could not be rolled back.
            # Their replies do not matter (refused: the run is indexed here already).
            yield from all_of(entries)
        first = TaskWrites.of_call(task_id, task_path, run_id, new)
        put = Put(key, self.codec.encode_task_writes(first), if_none_match=True)
        for _ in range(WRITE_ATTEMPTS):
            if isinstance((yield from one(put)), Written):
                return
            stored = yield from one(Get(key))
            if stored is None:  # deleted meanwhile (a rollback): create it again
                put = Put(key, self.codec.encode_task_writes(first), if_none_match=True)
                continue
            merged = self.codec.peek_task_writes(key, stored.body).merge(task_path, run_id, new)
            if merged is None:
                return  # nothing new: a retry, or writes that lost to earlier ones of the same run
            put = Put(key, self.codec.encode_task_writes(merged), if_match=stored.etag)
        raise CheckpointConflictError(
            t.thread_id, t.checkpoint_ns, f" (task {task_id!r} kept changing its writes object {key!r})"
        )

    def _writes_run_entries(self, run_id: str | None, thread_id: str, ns: str, checkpoint_id: str) -> list[Put]:
        """Run-index entries for writes to ``checkpoint_id``, unless the run's entry in the namespace is known
        to name a checkpoint no newer than it: the head this saver last saw there is the run's and not newer
        (a run's writes to its own checkpoints, the hot path, even while the put of that checkpoint is still
        in flight). Otherwise (a run resuming another run's checkpoint, a saver that knows nothing of the
        namespace) the entries are offered create-only, naming this checkpoint; an entry that exists already
        stays, and a rollback walks down to the checkpoint it names, and to each parent its checkpoints have.
        """
        if run_id is None:
            return []
        head = self.memory.head_written_by(thread_id, ns)
        if head is not None and head[1] == run_id and head[0] <= checkpoint_id:
            return []
        return self._index_entries(run_id, thread_id, ns, checkpoint_id)


def _refuse_long_keys(what: str, keys: Sequence[str]) -> None:
    for key in keys:
        size = key_bytes(key)
        if size > MAX_KEY_BYTES:
            raise InvalidConfigError(
                f"{what} would be stored under a key of {size} bytes; S3 allows {MAX_KEY_BYTES}. Nothing was "
                f"written. Use a shorter checkpoint id (LangGraph's are 36 characters) or a shorter prefix (key: "
                f"{reprlib.repr(key)})"
            )


def _carries_time(checkpoint_id: str) -> bool:
    """Whether an id is a uuid6 like LangGraph's, whose order is the order of the writers' clocks (ids a
    caller chose itself, such as "2" in tests, say nothing of time)."""
    return len(checkpoint_id) == 36 and checkpoint_id[14] == "6" and checkpoint_id.count("-") == 4


class Outcome(Enum):
    COMMITTED = "committed"
    """The checkpoint is the head, or on the head's chain: an earlier attempt landed, its answer was lost."""
    RETRY = "retry"
    """A join found a newer head: commit on top of it."""
    CONFLICT = "conflict"
    """Another writer moved the head this put was fenced on: it loses."""


def refused_outcome(
    fence: Fence,
    head_now: StoredObject | None,
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


_HeadSwap = tuple[str | None, Put, list[Put]]
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
    puts: list[Put] = field(default_factory=list)
    """Large values to store before the commit."""
    renewed: dict[str, str] = field(default_factory=dict)
    """Large values rewritten now (their age restarts, for the lifecycle rule)."""


_NO_VALUE = object()
"""The fenced parent stored no value at the channel's version."""
_PARENTS_BLOB = object()
"""The fenced parent's value at the channel's version is a large value (its blob exists)."""


def _kept_from_parent(parent: HeadSeen | None, channel: str, version: str, new_versions: ChannelVersions) -> Any:
    """What the fenced parent stored for a channel whose version did not move (see ``_split_values``): its inline
    value as stored, :data:`_PARENTS_BLOB` or :data:`_NO_VALUE`; ``None`` when the value must be serialized
    (the version moved, or there is no fenced parent whose values are remembered)."""
    if parent is None or parent.inline is None or channel in new_versions or parent.versions.get(channel) != version:
        return None
    if channel in parent.inline:
        return parent.inline[channel]
    return _PARENTS_BLOB if channel in parent.blobs else _NO_VALUE


def run_of(metadata: Mapping[str, Any]) -> str | None:
    """The run a checkpoint's metadata (or, for writes, the config's, by LangGraph's rule) names, as a str:
    LangGraph copies a ``run_id`` from the config as given (an int, a UUID), and the run index is keyed by
    text, as PostgresSaver matches it."""
    run_id = metadata.get("run_id")
    if run_id is None:
        return None
    if has_lone_surrogate(str(run_id)):
        # the serializer stores it altered ("?"), so the run index would name a run no record has
        raise InvalidConfigError(f"run_id must be valid Unicode (no lone surrogates), got {str(run_id)!r}")
    return str(run_id)
