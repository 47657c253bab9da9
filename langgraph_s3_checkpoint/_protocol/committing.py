"""Committing: ``put`` (the commit protocol, in one place) and ``put_writes``."""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, NoReturn

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
)

from ..errors import (
    CheckpointConflictError,
    ClockSkewError,
    CorruptObjectError,
    InvalidConfigError,
    ParentNotCommittedError,
)
from .chain import Standing
from .codec import Appended, elements_digest, is_part_name, part_name, part_owners, serialized_bytes
from .fencing import (
    COMMIT_TABLE,
    SUPERSEDED,
    AgainOnHead,
    ClockBehindHead,
    CommitDetached,
    CommitOutcome,
    Committed,
    HeadNow,
    HeadSeen,
    MoveHead,
    Refusal,
    Rule,
    Step,
    Swap,
    Travelling,
    Withdraw,
    attempt_meets,
    head_seen,
    refused_write_meets,
    rule_for,
    settle,
)
from .keys import MAX_KEY_BYTES, escape, has_lone_surrogate, is_digest, key_bytes
from .plans import all_of, one
from .reading import Reading, checkpoint_config, parse_config, seen_in
from .requests import (
    CREATE,
    DeleteObjects,
    Get,
    Plan,
    PreconditionFailed,
    Put,
    PutMode,
    StoredObject,
    Update,
    Written,
    same_etag,
)
from .writes import TaskWrites

WRITE_ATTEMPTS = 8
"""How often ``put_writes`` merges into a task's writes object that another call changed meanwhile."""
ON_HEAD_ATTEMPTS = 5
"""How often a forking ``put`` re-reads a head that moved under it before giving up."""


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

        0. *Rule*: how the caller read the parent and the put's ``source`` pick a :class:`~.fencing.Rule` from
           :data:`~.fencing.FENCING_TABLE`: continue the parent (commit only if the head still holds it),
           create the namespace, or fork (commit on top of whatever the head is).
        1. *Prerequisites*, in parallel: large values the new record references that are not known to exist,
           run-index entries on a run's first put in the namespace, ``name`` objects for ids too long to be
           key segments, and, unless the saver remembers the head the put continues, a GET of the head.
        2. *Commit*: the record ``c/{R}/checkpoint`` and the head are sent together. The head is a full copy
           of the record, replaced conditionally: ``If-Match`` on the ETag of the head that holds the parent (or
           of the head just read, for a fork), ``If-None-Match: *`` when there is none. That conditional PUT is
           the commit and the point where a second writer loses. The record names the head it replaces
           (``previous_head``), which is what makes the committed records a chain (:mod:`.chain`).
        3. *Outcome* of a refused head PUT: the saver reads the head and settles the rule again on what it holds
           (:func:`~.fencing.settle`): this checkpoint or one on top of it means an earlier attempt was applied
           and only its answer was lost (committed); a fork commits on the new head; otherwise the record is
           deleted (provably never committed) and the put raises the refusal's error. A head that names the put's
           run as rolled back (``delete_for_runs`` of a run still running) refuses it whatever its rule. Each
           attempt's step, and this outcome, is a row of :data:`~.fencing.COMMIT_TABLE`.
        """
        t = parse_config(config)
        thread_id, ns = t.thread_id, t.checkpoint_ns
        parent_id = None if t.checkpoint_id is None else str(t.checkpoint_id)
        checkpoint_id = _checked_id(checkpoint["id"])
        stored_metadata = get_checkpoint_metadata(config, metadata)
        run_id = run_of(stored_metadata)
        travelling = Travelling.with_put(config, self.recall, thread_id, ns)
        read, read_etag = travelling.parent_read(self.recall, thread_id, ns, parent_id)
        rule = rule_for(parent_id, read, stored_metadata.get("source"))
        if parent_id is not None and checkpoint_id <= parent_id and _carries_time(checkpoint_id, parent_id):
            raise ClockSkewError(thread_id, ns, checkpoint_id, parent_id, "its parent")
        head_key = self.layout.head(thread_id, ns)
        record_key = self.layout.record(thread_id, ns, checkpoint_id)
        c = _Commit(thread_id, ns, checkpoint_id, parent_id, run_id, rule, head_key, record_key)
        basis = yield from self._basis(c, read_etag)
        if basis.parent is not None and parent_id is not None and checkpoint_id <= parent_id:
            # It would continue the head with an id that sorts before it, where no reader looks for the latest.
            raise ClockSkewError(thread_id, ns, checkpoint_id, parent_id, "its parent")
        now = datetime.now(timezone.utc)
        values = self._split_values(thread_id, ns, checkpoint, new_versions, basis.parent, now)
        names = [] if basis.parent is not None else self._names(thread_id, ns)  # its head proves them
        # Before anything is sent: S3 refusing the record's key while the head sent with it lands would leave a
        # head whose record can never be restored.
        entry_keys = [] if run_id is None else [self.layout.run_entry(run_id, thread_id, ns)]
        other_keys = [p.key for p in [*values.puts, *names]]
        _refuse_long_keys(f"checkpoint {reprlib.repr(checkpoint_id)}", [record_key, *entry_keys, *other_keys])
        run_entries = self._run_entries(run_id, thread_id, ns, checkpoint_id, basis.parent)
        prerequisites = [*values.puts, *run_entries, *names]
        if prerequisites or basis.unread:
            # Heterogeneous: the prerequisites' replies (ignored), then the head's when it is still to be read.
            replies: list[Any] = yield [*prerequisites, *([Get(head_key)] if basis.unread else [])]
            if basis.unread:
                basis = _Basis(head=replies[-1])
                if self._run_rolled_back(c, basis.head):
                    self._refuse_rolled_back(c)

        def record(previous_head: str | None, detached: bool, deleted: Mapping[str, str | None]) -> bytes:
            return self.codec.encode_record(
                checkpoint,
                stored_metadata,
                parent_id,
                values.inline,
                values.blobs,
                previous_head=previous_head,
                detached=detached,
                deleted=deleted,
                appended=values.appended,
            )

        def reoffered() -> list[Put]:
            """What a put offers again, create-only, before it commits on a head other than the one it first stood on:
            every large value its record references (sent before, or left out because the parent's head vouched for
            them: a prune, a rollback or a delete of the thread may have removed them since) and the run-index
            entries of its run (a rollback or a delete may have removed them: without them, the run's next rollback
            would not find this checkpoint)."""
            sent = {put.key: put for put in values.puts}
            live = checkpoint["channel_values"]
            blobs = [
                sent.get(key)
                or Put(
                    key,
                    self.codec.encode_blob(self.codec.encode_value(channel, values.stored(live, channel))),
                    mode=CREATE,
                )
                for channel, version in values.blobs.items()
                if (key := self.layout.blob(thread_id, ns, channel, version)) in sent
                or values.channel_of(channel) in live
            ]
            entries = [] if run_id is None else self._index_entries(run_id, thread_id, ns, checkpoint_id)
            return [*blobs, *entries]

        committed_etag, deleted = yield from self._commit(c, basis, record, reoffered)
        if names:
            # Offered again once committed: gc may have deleted a name it found alone (a thread or namespace left
            # with nothing else) after the first offer was refused as existing, and before the commit. gc puts
            # back a name it deleted if it then finds the thread in use; between the two, one of them sees the
            # other (docs/design.md, "name objects").
            yield [*names]
        if committed_etag is not None:
            versions = checkpoint["channel_versions"]
            seen = head_seen(
                checkpoint_id,
                committed_etag,
                values.blobs,
                run_id,
                versions,
                values.inline,
                deleted=deleted,
                appended=values.appended,
            )
            self.recall.saw_head(thread_id, ns, seen)
        self.recall.wrote_blobs(thread_id, ns, values.renewed, now)
        own_etag = None if committed_etag == SUPERSEDED else committed_etag
        returned = travelling.committed(self.recall, thread_id, ns, checkpoint_id, own_etag)
        return checkpoint_config(thread_id, ns, returned)

    def _basis(self, c: _Commit, read_etag: str | None) -> Plan[_Basis]:
        """What the first commit attempt stands on, read only when nothing known settles it.

        A continuing put whose head the saver remembers (it read or committed it) sends no GET, and none is
        sent to create a namespace the caller found empty. Otherwise the head is read: first and alone when the
        put would continue it (the values it carries over come from the head's record), together with the
        prerequisites for a fork. A head that does not hold the parent settles the rule at once, so a refused put
        writes nothing.
        """
        if c.rule is Rule.CREATE:
            return _Basis()
        if c.rule is Rule.FORK:
            return _Basis(unread=True)
        assert c.parent_id is not None
        known = self.recall.head(c.thread_id, c.ns, c.parent_id)
        if known is not None and read_etag is not None and not same_etag(known.etag, read_etag):
            known = None  # the caller read another version of this head than the one remembered: look
        if known is not None and c.run_id is not None and c.run_id in known.rolled_back:
            self._refuse_rolled_back(c)  # read by another caller of this process: the same head, the same refusal
        if known is not None and known.etag != SUPERSEDED:
            return _Basis(parent=known)
        if known is not None and c.rule in (Rule.CONTINUE, Rule.CONTINUE_UNREAD, Rule.CONTINUE_OWN):
            self._refuse(c, Refusal.MOVED)
        head = yield from one(Get(c.head_key))
        if self._run_rolled_back(c, head):
            self._refuse_rolled_back(c)
        holding = self._holding(c, head)
        if holding is not None:
            step = settle(c.rule, HeadNow.PARENT)
        else:
            step = yield from self._settle(c, head)
        if step.refused is not None:
            self._refuse(c, step.refused, head)
        return _Basis(parent=holding) if step.on_parent else _Basis(head=head)

    def _holding(self, c: _Commit, head: StoredObject | None) -> HeadSeen | None:
        """The head as a :class:`HeadSeen`, if it holds the parent.

        In whatever bytes: a head rewritten while holding the parent (a rollback of another run naming that run, or
        recording a gap it opened below; a rollback that moved the head back here) still holds the state the put
        continues, and nothing moved past it. A rollback of the put's own run names the run in the head it leaves
        (:meth:`_run_rolled_back`, checked first), which is what keeps a rolled-back step from committing again."""
        if head is None or c.parent_id is None or self.codec.peek_head_id(c.head_key, head.body) != c.parent_id:
            return None
        seen = seen_in(head, self.codec.decode_record(c.head_key, head.body))
        self.recall.saw_head(c.thread_id, c.ns, seen)
        return seen

    def _settle(self, c: _Commit, head: StoredObject | None, mine: bytes | None = None) -> Plan[Step]:
        """:func:`~.fencing.settle` on the head as read: before the first attempt, a head that does not hold the parent
        (``_holding``); after a refused attempt (``mine``: the record it sent), any. A head naming the put's run as
        rolled back refuses it first. After a refused attempt this checkpoint counts as committed when it is on the
        head's chain (the attempt was applied and its answer lost), and a head that holds the parent, whatever its
        bytes, is committed on again: the attempt was not applied (had it been and been rolled back, the rollback
        would have named the run)."""
        if head is None:
            return settle(c.rule, HeadNow.NONE)
        if self._run_rolled_back(c, head):
            return settle(c.rule, HeadNow.NAMES_THIS_RUN_ROLLED_BACK)
        head_id = self.codec.peek_head_id(c.head_key, head.body)
        if head_id == c.checkpoint_id:
            return settle(c.rule, HeadNow.THIS)
        if c.parent_id is not None and head_id == c.parent_id:
            return settle(c.rule, HeadNow.PARENT)
        if mine is not None:
            # On the head's chain by links written as links: a gap no deleter named is no proof this put landed.
            mine_decoded = self.codec.decode_record(c.record_key, mine)
            ours = yield from self._standing(c.thread_id, c.ns, mine_decoded, head, by_links=True)
            if ours is Standing.COMMITTED:
                return settle(c.rule, HeadNow.THIS)
        step = settle(c.rule, HeadNow.OTHER)
        if step.refused is Refusal.MOVED and c.parent_id is not None:
            standing, detached = yield from self._parent_standing(c, head)
            if standing is Standing.COMMITTED and detached:
                return settle(c.rule, HeadNow.OTHER_BESIDE_A_DETACHED_PARENT)
            step = settle(c.rule, HeadNow.OTHER, parent_committed=standing is Standing.COMMITTED)
        return step

    def _run_rolled_back(self, c: _Commit, head: StoredObject | None) -> bool:
        """Whether the head names the put's run as rolled back while it was the head: the run's step must not commit,
        whatever its rule (a rollback of a run that is still running, as the Agent Server does on a new run's
        ``multitask_strategy="rollback"``)."""
        return (
            head is not None and c.run_id is not None and c.run_id in self.codec.rolled_back_runs(c.head_key, head.body)
        )

    def _refuse_rolled_back(self, c: _Commit) -> NoReturn:
        step = settle(c.rule, HeadNow.NAMES_THIS_RUN_ROLLED_BACK)
        assert step.refused is not None
        self._refuse(c, step.refused)

    def _parent_standing(self, c: _Commit, head: StoredObject) -> Plan[tuple[Standing, bool]]:
        """Whether the parent is a committed checkpoint, and whether it is a detached one (a fork committed beside
        a newer head): read only where a rule would refuse, to tell a moved head from these two."""
        assert c.parent_id is not None
        stored = yield from one(Get(self.layout.record(c.thread_id, c.ns, c.parent_id)))
        if stored is None:
            return Standing.ORPHAN, False
        parent = self.codec.decode_record(self.layout.record(c.thread_id, c.ns, c.parent_id), stored.body)
        return (yield from self._standing(c.thread_id, c.ns, parent, head)), parent.detached

    def _refuse(self, c: _Commit, refusal: Refusal, head: StoredObject | None = None) -> NoReturn:
        self.recall.forget_namespace(c.thread_id, c.ns)
        raise refusal_error(refusal, c.thread_id, c.ns, c.parent_id, self._head_id(c, head))

    def _head_id(self, c: _Commit, head: StoredObject | None) -> str | None:
        """The checkpoint a head holds, for an error message (``None`` if there is none or it cannot be read)."""
        try:
            return None if head is None else self.codec.peek_head_id(c.head_key, head.body)
        except CorruptObjectError:
            return None

    def _commit(
        self,
        c: _Commit,
        basis: _Basis,
        record: Callable[[str | None, bool, Mapping[str, str | None]], bytes],
        reoffered: Callable[[], list[Put]],
    ) -> Plan[tuple[str | None, Mapping[str, str | None]]]:
        """Send the record and the head until the head PUT lands or :data:`~.fencing.COMMIT_TABLE` says otherwise; the
        committed head's ETag (``None`` for a detached commit, :data:`~.fencing.SUPERSEDED` if another writer
        already continued it) and the deleted links it names."""
        for _ in range(ON_HEAD_ATTEMPTS):
            head_id = None if basis.head is None else self.codec.peek_head_id(c.head_key, basis.head.body)
            built = COMMIT_TABLE[attempt_meets(basis.parent is not None, head_id, c.checkpoint_id, c.parent_id)]
            if not isinstance(built, MoveHead):
                return (yield from self._without_moving_the_head(c, basis, built, head_id, record))
            # The record carries the deleted links the head it replaces names (chain.py): as the next head, it must
            # name them too.
            deleted = self._deleted_of(c, basis)
            body = record(c.parent_id if built.swap is Swap.ON_PARENT else head_id, False, deleted)
            reply = yield from self._move_head(c, basis, built.swap, head_id, body)
            if isinstance(reply, Written):
                return reply.etag, deleted
            settled, head_now, refusal = yield from self._after_refused_head(c, body)
            match settled:
                case Committed(superseded):
                    assert head_now is not None
                    return (SUPERSEDED if superseded else head_now.etag), deleted
                case Withdraw():
                    assert refusal is not None
                    error = refusal_error(refusal, c.thread_id, c.ns, c.parent_id, self._head_id(c, head_now))
                    yield from self._withdraw(c, error)
                case AgainOnHead():
                    basis = yield from self._join_again(head_now, reoffered)
                case _:
                    raise AssertionError(f"{settled!r} is no outcome of a refused head PUT (COMMIT_TABLE)")
        # Meets.ATTEMPTS_SPENT
        detail = (
            f" under each of {ON_HEAD_ATTEMPTS} attempts to commit on top of its latest checkpoint. This checkpoint "
            "was not committed"
        )
        return (yield from self._withdraw(c, CheckpointConflictError(c.thread_id, c.ns, detail)))

    def _without_moving_the_head(
        self,
        c: _Commit,
        basis: _Basis,
        built: CommitOutcome,
        head_id: str | None,
        record: Callable[[str | None, bool, Mapping[str, str | None]], bytes],
    ) -> Plan[tuple[str | None, Mapping[str, str | None]]]:
        """An attempt that moves no head (:data:`~.fencing.COMMIT_TABLE`): done already, refused for the clock, or a
        detached commit by the record alone."""
        match built:
            case Committed():  # this very put already committed (a retry through a new saver)
                assert basis.head is not None
                return basis.head.etag, self._deleted_of(c, basis)
            case ClockBehindHead():
                assert head_id is not None
                raise ClockSkewError(c.thread_id, c.ns, c.checkpoint_id, head_id, "the head")
            case CommitDetached():
                yield [Put(c.record_key, record(None, True, {}))]
                return None, {}
            case _:
                raise AssertionError(f"{built!r} is no outcome of building an attempt (COMMIT_TABLE)")

    def _deleted_of(self, c: _Commit, basis: _Basis) -> Mapping[str, str | None]:
        """The deleted links the head an attempt stands on names (none when there is no head)."""
        if basis.parent is not None:
            return basis.parent.deleted
        return {} if basis.head is None else self.codec.peek_chain(c.head_key, basis.head.body)[2]

    def _move_head(
        self, c: _Commit, basis: _Basis, swap: Swap, head_id: str | None, body: bytes
    ) -> Plan[Written | PreconditionFailed]:
        """Send the record and the head together (:class:`~.fencing.MoveHead`); the head PUT's reply."""
        restore: list[Put] = []
        if swap is Swap.ON_PARENT:
            assert basis.parent is not None
            mode: PutMode = Update(basis.parent.etag)
        elif swap is Swap.CREATE:
            mode = CREATE
        else:
            assert basis.head is not None and head_id is not None
            mode = Update(basis.head.etag)
            # The head may be a head-only commit (its record PUT failed): make sure its record exists before the
            # head moves on, or it would be lost from history.
            restore.append(Put(self.layout.record(c.thread_id, c.ns, head_id), basis.head.body, mode=CREATE))
        replies = yield from all_of([Put(c.record_key, body), Put(c.head_key, body, mode=mode), *restore])
        return replies[1]

    def _after_refused_head(
        self, c: _Commit, body: bytes
    ) -> Plan[tuple[CommitOutcome, StoredObject | None, Refusal | None]]:
        """After a refused head PUT (``body``: the record it sent), read the head and settle the rule again on what it
        holds: what :data:`~.fencing.COMMIT_TABLE` says then, the head read, and the refusal (if the rule refuses)."""
        head_now = yield from one(Get(c.head_key))
        step = yield from self._settle(c, head_now, mine=body)
        head_is_this = head_now is not None and self.codec.peek_head_id(c.head_key, head_now.body) == c.checkpoint_id
        return COMMIT_TABLE[refused_write_meets(step, head_is_this)], head_now, step.refused

    def _join_again(self, head_now: StoredObject | None, reoffered: Callable[[], list[Put]]) -> Plan[_Basis]:
        """:class:`~.fencing.AgainOnHead`: the next attempt stands on the head read now, after offering again what the
        record references (the head moved: whatever moved it may have deleted them)."""
        if offers := reoffered():
            yield [*offers]
        return _Basis(head=head_now)

    def _withdraw(self, c: _Commit, error: CheckpointConflictError) -> Plan[NoReturn]:
        """:class:`~.fencing.Withdraw`: delete the record, which never committed and never can, and raise."""
        yield [DeleteObjects((c.record_key,))]
        self.recall.forget_namespace(c.thread_id, c.ns)
        raise error

    def _split_values(
        self,
        thread_id: str,
        ns: str,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
        parent: HeadSeen | None,
        now: datetime,
    ) -> _Values:
        """Inline the small channel values; store the large ones once per (channel, version).

        A channel whose version did not move since the parent (``parent``: the head holding it, when the put
        continues it) keeps the value the parent stored at
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
        result = _Values()
        # Parts are named after their channel with PART_MARK (no LangGraph channel's name holds it): where one does,
        # no list of this checkpoint is stored in parts, so no part's name can be a channel's.
        in_parts = not any(is_part_name(channel) for channel in checkpoint["channel_versions"])
        for channel, raw_version in checkpoint["channel_versions"].items():
            version = str(raw_version)
            kept = _kept_from_parent(parent, channel, version, new_versions)
            if kept is _NO_VALUE or (kept is None and channel not in values):
                continue
            if isinstance(kept, list):
                result.inline[channel] = kept
                continue
            if kept is _PARENTS_BLOB and parent is not None and channel in parent.appended:
                if (self.ttl is None and (in_parts or not parent.appended[channel].parts)) or channel not in values:
                    result.carry(parent, channel, parent.appended[channel])
                    continue
                # With a lifecycle rule the base's age is unknown here, and beside a channel named with PART_MARK its
                # parts could not be named: the list is stored anew.
                kept = None
            listed = kept is None and self.ttl is None and type(values[channel]) is list
            stored_as_list = listed and self._store_list(
                result, thread_id, ns, channel, version, values[channel], parent, now, in_parts
            )
            if stored_as_list:
                continue
            typed = None if kept is _PARENTS_BLOB else self.codec.encode_value(channel, values[channel])
            if typed is not None and len(typed[1]) <= self.inline_threshold:
                result.inline[channel] = typed
                continue
            result.blobs[channel] = version
            vouched = parent is not None and parent.blobs.get(channel) == version
            self._store_blob(result, thread_id, ns, channel, version, typed, vouched, values, now)
        return result

    def _store_list(
        self,
        result: _Values,
        thread_id: str,
        ns: str,
        channel: str,
        version: str,
        value: list[Any],
        parent: HeadSeen | None,
        now: datetime,
        in_parts: bool,
    ) -> bool:
        """Store a list as what was appended to what the parent stored (:class:`~.codec.Appended`), when its first
        elements serialize to the bytes the parent's base and parts hold: with no request while the rest fits
        :attr:`~.reading.PlansState.appended_tail_bytes`, else with the rest sent as a new part (and parts merged).
        Else, when it is large, as a new base, the whole list as a large value. ``False``: stored as any other value
        (small now after being large, or a serializer that never writes the same bytes twice,
        :meth:`~.codec.Codec.encodes_alike`).

        Only on a base the fenced parent references (its head is there, so its large values are), and without a
        lifecycle rule (which expires a base by its own age, while the records extending it live on); parts only
        ``in_parts`` (see ``_split_values``)."""
        if not value or not self.codec.encodes_alike(channel, value[0]):
            return False  # stored as any value: inline if small, else whole
        base = None if parent is None or channel not in parent.blobs else parent.appended.get(channel)
        if base is not None and base.parts and not in_parts:
            base = None
        whole = None
        if base is None:
            # No base to extend: the whole list's bytes decide, as any value's, and most lists stay small and inline
            # without each element serialized as well.
            whole = self.codec.encode_value(channel, value)
            if len(whole[1]) <= self.inline_threshold:
                result.inline[channel] = whole
                return True
        elements = [self.codec.encode_value(channel, element) for element in value]
        if base is not None:
            assert parent is not None
            if serialized_bytes(elements) <= self.inline_threshold:
                return False
            extends = base.count <= len(elements) and elements_digest(elements[: base.count]) == base.digest
            if extends:
                tail = elements[base.count :]
                if serialized_bytes(tail) <= self.appended_tail_bytes:
                    result.carry(parent, channel, replace(base, tail=tuple(tail)))
                    return True
                if self.appended_tail_bytes > 0 and in_parts:
                    # The tail goes out as a part (merged with others maybe): a large value at this version, its
                    # elements serialized as one list, as any large value (a reader decodes it alone).
                    appended = base.sent_out(len(elements), elements_digest(elements), self.parts_merged)
                    result.carry(parent, channel, appended)
                    new = appended.parts[-1]
                    name = part_name(channel, new.start)
                    result.blobs[name] = version
                    typed = self.codec.encode_value(channel, value[new.start : new.start + new.count])
                    key = self.layout.blob(thread_id, ns, name, version)
                    result.puts.append(Put(key, self.codec.encode_blob(typed), mode=CREATE))
                    return True
        result.blobs[channel] = version
        result.appended[channel] = Appended(len(elements), elements_digest(elements))
        vouched = parent is not None and parent.blobs.get(channel) == version
        typed = whole or self.codec.encode_value(channel, value)
        self._store_blob(result, thread_id, ns, channel, version, typed, vouched, {}, now)
        return True

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
                result.puts.append(Put(key, self.codec.encode_blob(typed), mode=CREATE))
            return
        written = self.recall.blob_written(thread_id, ns, channel, version)
        if vouched and written is not None and now - written <= self.ttl / 2:
            return
        if typed is None and channel in values:
            # Renewed from the live value: the stored bytes are not at hand (a value LangGraph changed in place
            # without a new version is the one case where the two differ).
            typed = self.codec.encode_value(channel, values[channel])
        if typed is not None:
            result.puts.append(Put(key, self.codec.encode_blob(typed)))
            result.renewed[channel] = version

    def _run_entries(
        self, run_id: str | None, thread_id: str, ns: str, checkpoint_id: str, parent: HeadSeen | None
    ) -> list[Put]:
        """The run-index entry (the run's first checkpoint id here), unless the parent the put continues is the run's.
        What the saver remembers of entries it sent does not spare it: a rollback in another process may have deleted
        the entry since, and a put is what commits a checkpoint that a rollback must find."""
        if run_id is None or (parent is not None and parent.run_id == run_id):
            return []
        return self._index_entries(run_id, thread_id, ns, checkpoint_id)

    def _index_entries(self, run_id: str, thread_id: str, ns: str, checkpoint_id: str) -> list[Put]:
        """The create-only entry that indexes a run in a namespace, naming the oldest checkpoint it touched there (as
        far as the first writer knows: an entry that exists is not changed), remembered as sent (so the run's writes
        need not send it again, :meth:`_writes_run_entries`). One PUT: the per-thread twin that 0.1.x also wrote is
        gone (docs/design.md, "Which runs wrote where")."""
        self.recall.sent_index_entry(thread_id, ns, run_id, checkpoint_id)
        return [Put(self.layout.run_entry(run_id, thread_id, ns), checkpoint_id.encode(), mode=CREATE)]

    def _names(self, thread_id: str, ns: str) -> list[Put]:
        """``name`` objects for ids too long to be key segments (create-only: a rewrite is refused)."""
        named = ((thread_id, self.layout.thread_name(thread_id)), (ns, self.layout.ns_name(thread_id, ns)))
        return [
            Put(key, value.encode("utf-8", "surrogatepass"), mode=CREATE, expires=False)
            for value, key in named
            if is_digest(escape(value))
        ]

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> Plan[None]:
        """Store a task's writes with InMemorySaver's rule, per (task, idx): the first write of a regular
        channel wins, a special channel (error, interrupt, resume, scheduled) replaces.

        One object per task holds all its writes (:mod:`langgraph_s3_checkpoint._protocol.writes`), each with the run
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
        entry_keys = [] if run_id is None else [self.layout.run_entry(run_id, t.thread_id, t.checkpoint_ns)]
        _refuse_long_keys(f"the writes of task {reprlib.repr(task_id)}", [key, *entry_keys])
        entries = self._writes_run_entries(run_id, t.thread_id, t.checkpoint_ns, t.checkpoint_id)
        if entries:
            # Index first, as put does: writes that landed without their entry could not be rolled back.
            # Its reply does not matter (refused: the run is indexed here already).
            yield from all_of(entries)
        first = TaskWrites.of_call(task_id, task_path, run_id, new)
        put = Put(key, self.codec.encode_task_writes(first), mode=CREATE)
        for _ in range(WRITE_ATTEMPTS):
            if isinstance((yield from one(put)), Written):
                return
            stored = yield from one(Get(key))
            if stored is None:  # deleted meanwhile (a rollback): create it again
                put = Put(key, self.codec.encode_task_writes(first), mode=CREATE)
                continue
            merged = self.codec.peek_task_writes(key, stored.body).merge(task_path, run_id, new)
            if merged is None:
                return  # nothing new: a retry, or writes that lost to earlier ones of the same run
            put = Put(key, self.codec.encode_task_writes(merged), mode=Update(stored.etag))
        raise CheckpointConflictError(
            t.thread_id, t.checkpoint_ns, f" (task {task_id!r} kept changing its writes object {key!r})"
        )

    def _writes_run_entries(self, run_id: str | None, thread_id: str, ns: str, checkpoint_id: str) -> list[Put]:
        """The run-index entry for writes to ``checkpoint_id``, unless the run's entry in the namespace is known to
        name a checkpoint no newer than it (:meth:`.fencing.Recall.indexed_from`): the head this saver last saw there
        is the run's and not newer, or this saver sent the entry (a run's writes to its own checkpoints, the hot path,
        even while the put of that checkpoint is still in flight). Otherwise (a run resuming another run's
        checkpoint, a saver that knows nothing of the namespace) the entry is offered create-only, naming this
        checkpoint; an entry that exists already stays, and a rollback walks down to the checkpoint it names, and to
        each parent its checkpoints have.
        """
        if run_id is None or not self.recall.claim_index_entry(thread_id, ns, run_id, checkpoint_id):
            return []
        return [Put(self.layout.run_entry(run_id, thread_id, ns), checkpoint_id.encode(), mode=CREATE)]


def _checked_id(checkpoint_id: Any) -> str:
    if not isinstance(checkpoint_id, str) or not checkpoint_id or has_lone_surrogate(checkpoint_id):
        # "" would be filed where no reader finds it, and LangGraph reads an empty id as "the latest"
        raise InvalidConfigError(
            "checkpoint['id'] must be a non-empty string of valid Unicode (LangGraph makes uuid6 ids), "
            f"got {checkpoint_id!r}"
        )
    return checkpoint_id


def _refuse_long_keys(what: str, keys: Sequence[str]) -> None:
    for key in keys:
        size = key_bytes(key)
        if size > MAX_KEY_BYTES:
            raise InvalidConfigError(
                f"{what} would be stored under a key of {size} bytes; S3 allows {MAX_KEY_BYTES}. Nothing was "
                f"written. Use a shorter checkpoint id (LangGraph's are 36 characters) or a shorter prefix (key: "
                f"{reprlib.repr(key)})"
            )


def _carries_time(*checkpoint_ids: str) -> bool:
    """Whether ids are uuid6 like LangGraph's, whose order is the order of the writers' clocks (ids a caller
    chose itself, such as "2" in tests, say nothing of time)."""
    return all(len(i) == 36 and i[14] == "6" and i.count("-") == 4 for i in checkpoint_ids)


def refusal_error(
    refusal: Refusal, thread_id: str, ns: str, parent_id: str | None, head_id: str | None = None
) -> CheckpointConflictError:
    """The error a refused put raises (``head_id``: the checkpoint the head holds now, when known): it says what
    happened, and never blames a writer that may not exist (the thread may have moved by another run of the same
    process, or the same caller's earlier put)."""
    not_committed = ". This checkpoint was not committed"
    now = "" if head_id is None else f" (the latest is now {head_id!r})"
    if refusal is Refusal.PARENT_NOT_COMMITTED:
        assert parent_id is not None
        return ParentNotCommittedError(thread_id, ns, parent_id)
    if refusal is Refusal.RUN_ROLLED_BACK:
        return CheckpointConflictError(
            thread_id,
            ns,
            f": this put's run was rolled back by delete_for_runs while it ran{not_committed}; start a new run",
        )
    if refusal is Refusal.CREATED:
        return CheckpointConflictError(thread_id, ns, f" since it was read as empty{now}{not_committed}")
    if parent_id is None:
        return CheckpointConflictError(thread_id, ns, f"{now}{not_committed}")
    return CheckpointConflictError(
        thread_id,
        ns,
        f": checkpoint {parent_id!r}, which this put continues, is no longer the latest{now}{not_committed}",
    )


@dataclass(frozen=True)
class _Commit:
    """The checkpoint a ``put`` is committing, as its commit attempts need it."""

    thread_id: str
    ns: str
    checkpoint_id: str
    parent_id: str | None
    run_id: str | None
    rule: Rule
    head_key: str
    record_key: str


@dataclass(frozen=True)
class _Basis:
    """What a commit attempt stands on: the head that holds the parent (commit on it), or the head as read
    (commit on top of it; ``None``: there is none), or nothing read yet (``unread``: a fork reads it with the
    prerequisites)."""

    parent: HeadSeen | None = None
    head: StoredObject | None = None
    unread: bool = False


@dataclass
class _Values:
    """A checkpoint's channel values as ``put`` stores them."""

    inline: dict[str, list[Any]] = field(default_factory=dict)
    blobs: dict[str, str] = field(default_factory=dict)
    appended: dict[str, Appended] = field(default_factory=dict)
    """Lists stored as the large value at ``blobs[channel]`` and what was appended since."""
    puts: list[Put] = field(default_factory=list)
    """Large values to store before the commit."""
    renewed: dict[str, str] = field(default_factory=dict)
    """Large values rewritten now (their age restarts, for the lifecycle rule)."""

    def carry(self, parent: HeadSeen, channel: str, appended: Appended) -> None:
        """Store ``channel``'s list as ``appended``, on the base the parent references and the parts of it that the
        parent references too (new parts are added by the caller)."""
        self.blobs[channel] = parent.blobs[channel]
        for name in appended.part_names(channel):
            if name in parent.blobs:
                self.blobs[name] = parent.blobs[name]
        self.appended[channel] = appended

    def channel_of(self, name: str) -> str:
        """The channel whose value the large value ``blobs[name]`` holds (all or part of)."""
        return part_owners(self.appended).get(name, name)

    def stored(self, live: Mapping[str, Any], name: str) -> Any:
        """What the large value ``blobs[name]`` holds, from the live value: a list's base is its first elements and a
        part the elements it begins at (their bytes matched what was stored)."""
        channel = self.channel_of(name)
        appended = self.appended.get(channel)
        return live[channel] if appended is None else live[channel][appended.span_of(channel, name)]


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
