"""Rollback: ``delete_for_runs`` takes one run out of a thread, as the Agent Server's ``multitask_strategy="rollback"``
asks: its checkpoints, the writes it made on other runs' checkpoints, and its run-index entries. Whatever it deletes
of the commit chain it first names in the head it leaves (:mod:`.chain`, "Deleted links"), so that no reader is ever
shown a record that never committed, or one it deleted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import CheckpointConflictError, CorruptObjectError, InvalidArgumentTypeError
from .chain import Chain, Standing
from .committing import WRITE_ATTEMPTS, Committing
from .keys import CheckpointKey, Layout, is_digest, is_own_segment
from .plans import READ_BATCH, all_of, all_pages, chunks, deletes, exists, list_all, mark, one
from .requests import (
    PRECONDITION_FAILED,
    DeleteIfMatch,
    DeleteObjects,
    Get,
    ListKeys,
    Plan,
    PreconditionFailed,
    Put,
    StoredObject,
    Update,
    Written,
)
from .writes import TaskWrites

ROLLBACK_ATTEMPTS = 5
"""How often ``delete_for_runs`` starts over when the run it deletes commits again meanwhile."""


class Rollbacks(Committing):
    """Plans that roll runs back."""

    def delete_for_runs(self, run_ids: Sequence[str]) -> Plan[None]:
        if isinstance(run_ids, str):
            raise InvalidArgumentTypeError(
                f"delete_for_runs() takes a sequence of run ids, not a str: wrap it in a list, "
                f"delete_for_runs([{run_ids!r}])"
            )
        # A run id is indexed as put() stores it, as a str: LangGraph copies a run_id from the config into
        # the metadata as given (an int, a UUID), and PostgresSaver matches it as text too.
        unnamed: CorruptObjectError | None = None
        for run_id in map(str, run_ids):
            index = self.layout.run_index(run_id)
            entries = yield from all_pages(index)
            # Only "{thread}/{namespace}" entries are ours (not folder markers or foreign objects).
            keys = [k for page in entries for k in page.keys if _is_pair(k[len(index) :])]
            if not keys:
                continue
            markers = yield from all_of([Get(k) for k in keys])
            for key, marker in zip(keys, markers, strict=True):
                thread_seg, ns_seg = key[len(index) :].split("/")
                thread_id = yield from self._name_of(thread_seg, f"{self.layout.threads_root}{thread_seg}/")
                ns = None
                if thread_id is not None:
                    ns = yield from self._name_of(ns_seg, f"{self.layout.namespaces(thread_id)}{ns_seg}/")
                if thread_id is None or ns is None:
                    found = yield from self._unnamed(run_id, thread_seg, ns_seg, thread_unnamed=thread_id is None)
                    unnamed = unnamed or found
                    continue
                first_id = _first_checkpoint_of_run(marker)
                yield from self._delete_run_in_ns(run_id, thread_id, ns, first_id)
                yield [DeleteObjects((key, self.layout.thread_run_entry(run_id, thread_id, ns)))]
        if unnamed is not None:
            raise unnamed  # after every other namespace of the runs was rolled back

    def _unnamed(
        self, run_id: str, thread_seg: str, ns_seg: str, *, thread_unnamed: bool
    ) -> Plan[CorruptObjectError | None]:
        """A run-index entry whose thread (or namespace) id cannot be read back. For a foreign segment, or what a
        finished delete left, there is nothing to roll back. But a long id whose ``name`` object is missing or
        damaged, in a namespace that still has a head, would leave the run's checkpoints in place while the
        rollback reports success: the error to raise, naming the ``name`` object."""
        unnamed = thread_seg if thread_unnamed else ns_seg
        if not (is_own_segment(unnamed) and is_digest(unnamed)):
            return None
        thread_prefix = f"{self.layout.threads_root}{thread_seg}/"
        ns_prefix = f"{thread_prefix}ns/{ns_seg}/"
        if (yield from one(Get(Layout.head_in(ns_prefix)))) is None:
            return None
        what = "thread" if thread_unnamed else "namespace"
        return CorruptObjectError(
            f"{thread_prefix if thread_unnamed else ns_prefix}name",
            f"it should hold the id of a {what} that run {run_id!r} wrote to (an id too long to be a key "
            "segment), and it is missing or holds another; that namespace was not rolled back",
            "Run repair_thread with the thread's id to write its name again, then delete_for_runs again."
            if thread_unnamed
            else "Put the namespace's id back in it (as UTF-8 text), then run delete_for_runs again.",
        )

    def _delete_run_in_ns(self, run_id: str, thread_id: str, ns: str, first_id: str) -> Plan[None]:
        # A run being cancelled may still commit a checkpoint while its rollback runs (the Agent Server
        # cancels and rolls back concurrently); that checkpoint is the run's too, so start over.
        for _ in range(ROLLBACK_ATTEMPTS):
            if (yield from self._try_delete_run_in_ns(run_id, thread_id, ns, first_id)):
                return
        raise CheckpointConflictError(thread_id, ns, f" while run {run_id!r} was being deleted (it kept committing)")

    def _run_of(self, key: str, obj: StoredObject) -> str | None:
        """The run id a record (or head) was written by, as a str (as put() indexes it)."""
        return self._made_by(key, obj)[0]

    def _made_by(self, key: str, obj: StoredObject) -> tuple[str | None, str | None]:
        """The run a record (or head) was written by, as a str (as put() indexes it), and its parent's id."""
        metadata, parent_id, _ = self.codec.peek_record(key, obj.body)
        run_id = metadata.get("run_id")
        return None if run_id is None else str(run_id), parent_id

    def _try_delete_run_in_ns(self, run_id: str, thread_id: str, ns: str, first_id: str) -> Plan[bool]:
        """Delete one namespace's checkpoints of a run; False if the run itself moved the head meanwhile.

        The records are walked newest first down to the run's first checkpoint and on to the next
        committed record below it, classified by the commit chain. The run's records all go, committed
        or not. If the head is the run's, it moves back to the newest committed record of another run
        (the *survivor*: a record on the chain, never a leftover that was never committed). The run's links of
        the chain below the head it leaves are named as deleted in that head first, so no record landing in the gap
        they leave is ever judged committed (see :mod:`langgraph_s3_checkpoint._protocol.chain`); orphans met on the
        way are deleted too.
        """
        head_key = self.layout.head(thread_id, ns)
        head = yield from one(Get(head_key))
        found = self._below_head(head_key, head, run_id, first_id)
        head_is_run = found.wants_survivor
        yield from self._find_run_records(self.layout.records(thread_id, ns), found)
        if not (yield from self._fence_and_name(head_key, head, found)):
            return False  # the head moved meanwhile (maybe the run's own put landing): start over
        # Before anything of the run goes: the checkpoints it started from are found through its own (their
        # parents), so a rollback that dies after deleting those can still be finished by running it again.
        yield from self._take_out_writes(run_id, thread_id, ns, found.started_from(), found.listed_writes)
        if not found.doomed_ids and not head_is_run:
            return True
        if found.orphans:
            yield deletes(found.orphans)
        marker = Layout.deleting_in(self.layout.ns(thread_id, ns))
        doomed = yield from self._rolled_back(found, head is None, head_is_run, marker)
        unmark: DeleteIfMatch | None = None
        if (head is None or (head_is_run and found.survivor is None)) and doomed:
            # Left without a head (the run held the namespace's only committed checkpoints, or the head
            # was already gone), the namespace's remaining records are a headless namespace's, which
            # repair_thread must not bring back: the namespace is marked until they are gone (a marker a
            # dead rollback left is replaced, and so removed at the end).
            unmark = yield from mark(marker, f"delete_for_runs {run_id}")
        if head is not None and head_is_run:
            moved = yield from self._move_head_back(head_key, head, found, run_id)
            if not moved:  # the run committed again meanwhile: start over
                if unmark is not None:
                    yield [unmark]
                return False
        if doomed:
            yield deletes(doomed)
        if unmark is not None:
            yield [unmark]
        self.recall.forget_namespace(thread_id, ns)
        return True

    def _below_head(self, head_key: str, head: StoredObject | None, run_id: str, first_id: str) -> _RunRecords:
        """Where a rollback's walk starts: the head's chain, and whether the head is the run's (then it must move
        back to a survivor, and its parent is where the run started; counted from the head itself, since a
        head-only commit of the run has no record to find)."""
        if head is None:
            return _RunRecords(run_id, first_id, Chain.without_head(), wants_survivor=False)
        chain = Chain.from_head(*self.codec.peek_chain(head_key, head.body))
        head_run, head_parent = self._made_by(head_key, head)
        found = _RunRecords(run_id, first_id, chain, wants_survivor=head_run == run_id)
        if found.wants_survivor and head_parent is not None:
            found.parents.add(head_parent)
        return found

    def _fence_and_name(self, head_key: str, head: StoredObject | None, found: _RunRecords) -> Plan[bool]:
        """Rewrite a head that stays (it is not the run's) ``If-Match`` the ETag read, when the run's put may still
        move it or the rollback deletes links below it: False if the head moved meanwhile (start over).

        *Fence.* When a put of the run may still move the head (:meth:`_RunRecords.may_commit_later`), the head is
        rewritten with the same checkpoint in new bytes (so a new ETag) naming the run as rolled back
        (:meth:`~.codec.Codec.rolled_back_on`; readers ignore it). A put of the run still on its way (its record
        stored, its head PUT not yet applied; or only its run-index entries stored) holds ``If-Match`` on the ETag of
        the head it continues, this one. Deleting the run's records alone would not stop it: its head PUT would land
        after the rollback returned, and the thread would show the step of a run that was rolled back, holding a head
        whose record is gone. With the ETag changed, that head PUT is refused, and the put, reading the head again,
        finds it naming its run and is refused (``committing._settle``) and withdraws its record; so is a put of the
        run that reads the head only now, never having seen the old ETag.

        *Names.* The run's links below the head are named as deleted (:meth:`_RunRecords.deleted_links`), so that a
        record landing in the gap they leave, after they are gone, is never judged committed (:mod:`.chain`).

        A put landing before this PUT makes it fail, and the rollback starts over on the run's head.
        """
        if head is None or found.wants_survivor:
            return True
        body = head.body
        if found.may_commit_later() and found.run_id not in self.codec.rolled_back_runs(head_key, body):
            # (not named already: a rollback of this run that died, or whose rewrite's answer was lost)
            body = self.codec.rolled_back_on(head_key, body, found.run_id)
        names = found.deleted_links()
        if names and not names.items() <= self.codec.peek_chain(head_key, body)[2].items():
            body = self.codec.with_deleted(head_key, body, names)
        if body is head.body:
            return True
        reply = yield from one(Put(head_key, body, mode=Update(head.etag)))
        return reply is not PRECONDITION_FAILED

    def _rolled_back(self, found: _RunRecords, headless: bool, head_is_run: bool, marker: str) -> Plan[list[str]]:
        """The keys a rollback deletes: the run's records and writes and, when the namespace is left without
        a head by this rollback or by one that died (its marker is there), other runs' records that
        continued the head, which can never commit then. Not when the head was lost otherwise (deleted by
        hand): those may be committed history that ``repair_thread`` can still rebuild the head from."""
        emptied = head_is_run and found.survivor is None
        if headless and found.stranded:
            emptied = yield from exists(marker)
        return found.doomed + found.stranded if emptied else found.doomed

    def _find_run_records(self, records: str, found: _RunRecords) -> Plan[None]:
        """Walk a namespace's records newest first, down to the first committed record older than the
        run's first checkpoint, sorting their keys (records and writes) into ``found``."""
        token: str | None = None
        while True:
            page = yield from one(ListKeys(records, token=token))
            parsed = [(key, Layout.parse_checkpoint_key(records, key)) for key in page.keys]
            record_keys = [(key, p.checkpoint_id) for key, p in parsed if p is not None and p.is_record]
            for chunk in chunks(record_keys, READ_BATCH):
                objs = yield from all_of([Get(key) for key, _ in chunk])
                for (key, cid), obj in zip(chunk, objs, strict=True):
                    if obj is not None and not found.reached_below:
                        self._place_for_rollback(found, key, cid, obj)
                if found.reached_below:
                    break  # the records below are not read: a long history costs what the run wrote
            found.take_keys(parsed, complete=page.token is None)
            token = page.token
            if token is None or found.reached_below:
                return

    def _place_for_rollback(self, found: _RunRecords, key: str, cid: str, obj: StoredObject) -> None:
        """Decide one record met by the walk: the run's (doomed, committed or not), an orphan (deleted
        first), or committed; the first committed one is the survivor, and one older than the run's first
        checkpoint ends the walk."""
        try:
            previous, detached = self.codec.peek_link(key, obj.body)
            run_of, parent_id = self._made_by(key, obj)
        except CorruptObjectError:
            return  # whose it is cannot be told: left alone (verify reports it), a missing link here
        standing = found.chain.standing(cid, previous, detached)
        if standing is Standing.COMMITTED and not detached:
            found.links.append((cid, previous, run_of == found.run_id))
        if run_of == found.run_id:
            found.doomed_ids.add(cid)
            if parent_id is not None:
                found.parents.add(parent_id)
        elif standing is Standing.ORPHAN:
            found.orphan_ids.add(cid)
        elif standing is Standing.PENDING and previous is not None:
            found.stranded_ids.add(cid)
        elif standing is Standing.COMMITTED:
            found.others.add(cid)
            if found.survivor is None and found.wants_survivor:
                # A detached survivor (a fork older than the head was) becomes an ordinary head: its
                # chain continues at the link below it, or everything older would be orphaned.
                found.survivor = (
                    obj if not detached else StoredObject(self.codec.relink(key, obj.body, found.chain.link), "")
                )
                found.survivor_id = cid
            # The run's entry names its first checkpoint here, or the checkpoint of another run it wrote to
            # first (the one it resumed): reaching that one is reaching below the run.
            found.reached_below = cid <= found.first_id

    def _take_out_writes(
        self, run_id: str, thread_id: str, ns: str, checkpoint_ids: set[str], listed: dict[str, list[str]]
    ) -> Plan[None]:
        """Take the run's writes out of the writes objects of checkpoints that are not its own (the ones it
        resumed or otherwise wrote to), so that they read as before the run began
        (:meth:`~langgraph_s3_checkpoint._protocol.writes.TaskWrites.without_run`). Each object is replaced
        ``If-Match`` the ETag just read (deleted, when nothing else is left in it), so a concurrent
        ``put_writes`` of another run is merged again, never lost; a refused one is read again. Objects
        without runs (written before writes recorded them) stay as they are. ``listed``: the writes keys the
        walk has already listed, per checkpoint; the others' folders are listed here.
        """
        records = self.layout.records(thread_id, ns)
        keys = [key for cid in sorted(checkpoint_ids) for key in listed.get(cid, [])]
        unlisted = [self.layout.writes(thread_id, ns, cid) for cid in sorted(checkpoint_ids) if cid not in listed]
        pages_ = (yield from all_of([ListKeys(folder) for folder in unlisted])) if unlisted else []
        for folder, page in zip(unlisted, pages_, strict=True):
            more = (yield from list_all(folder, page.token)) if page.token is not None else []
            for key in [*page.keys, *more]:
                parsed = Layout.parse_checkpoint_key(records, key)
                if parsed is not None and not parsed.is_record:
                    keys.append(key)
        for chunk in chunks(keys, READ_BATCH):
            pending = list(chunk)
            for _ in range(WRITE_ATTEMPTS):
                objs = yield from all_of([Get(key) for key in pending])
                changes: list[Put | DeleteIfMatch] = []
                for key, obj in zip(pending, objs, strict=True):
                    rest = None if obj is None else self._without_run(key, obj, run_id)
                    if rest is not None and obj is not None:
                        changes.append(
                            Put(key, self.codec.encode_task_writes(rest), mode=Update(obj.etag))
                            if rest.stored
                            else DeleteIfMatch(key, obj.etag)
                        )
                replies = (yield from all_of(changes)) if changes else []
                pending = [c.key for c, reply in zip(changes, replies, strict=True) if reply is PRECONDITION_FAILED]
                if not pending:
                    break
            else:
                raise CheckpointConflictError(
                    thread_id, ns, f" while run {run_id!r} was being deleted (its writes objects kept changing)"
                )

    def _without_run(self, key: str, obj: StoredObject, run_id: str) -> TaskWrites | None:
        """A writes object without the run's writes; ``None`` if it holds none (or cannot be read: verify
        reports it, and a rollback does not stop at it)."""
        try:
            return self.codec.peek_task_writes(key, obj.body).without_run(run_id)
        except CorruptObjectError:
            return None

    def _move_head_back(self, head_key: str, head: StoredObject, found: _RunRecords, run_id: str) -> Plan[bool]:
        """Move the head off the run: to the survivor, or, when the run holds the namespace's only
        committed records, delete it. False if the run itself committed again meanwhile (start over).

        Both are conditional on the head read before the walk: a writer that committed on top of the
        run meanwhile must not lose its checkpoint to the rollback. The survivor, as the head, names the run as
        rolled back (:meth:`~.codec.Codec.rolled_back_on`): a put of the run whose head PUT was refused, or is still
        on its way, reads a head holding its parent again and would otherwise commit on it once more.
        """
        reply: Written | PreconditionFailed | None
        if found.survivor is not None:
            # The survivor's record names the deleted links it knew when it was committed; the head names those
            # found since, and this rollback's own below the survivor (:meth:`_RunRecords.deleted_links`).
            body = self.codec.rolled_back_on(head_key, found.survivor.body, run_id)
            names = {**self.codec.peek_chain(head_key, head.body)[2], **found.deleted_links()}
            body = self.codec.with_deleted(head_key, body, names)
            reply = yield from one(Put(head_key, body, mode=Update(head.etag)))
        else:
            reply = yield from one(DeleteIfMatch(head_key, head.etag))
        if reply is not PRECONDITION_FAILED:
            return True
        # The head moved since it was read: to the survivor (a retried PUT whose first attempt was
        # applied, answer lost), or to another run's checkpoint, which stays the head; the run's own
        # records go either way. If the run itself committed again, start over to take that checkpoint too.
        now = yield from one(Get(head_key))
        return not (now is not None and self._run_of(head_key, now) == run_id)


@dataclass
class _RunRecords:
    """What ``delete_for_runs`` found in one namespace while walking down to below a run."""

    run_id: str
    first_id: str
    """The run's first checkpoint in the namespace (from the run index)."""
    chain: Chain
    wants_survivor: bool
    """Whether the head is the run's, so that it must move back to a survivor."""
    doomed_ids: set[str] = field(default_factory=set)
    orphan_ids: set[str] = field(default_factory=set)
    doomed: list[str] = field(default_factory=list)
    """Keys of the run's records and their writes."""
    orphans: list[str] = field(default_factory=list)
    """Keys of the orphans met (records and writes), deleted before the run's so the gap opens onto a
    committed record."""
    stranded_ids: set[str] = field(default_factory=set)
    stranded: list[str] = field(default_factory=list)
    """Keys of other runs' records newer than the head that continue a checkpoint (puts that died or lost):
    they can never commit once the head is gone, and go with the run's when the namespace is left
    without one (``repair_thread`` would otherwise take the newest for a lost head)."""
    parents: set[str] = field(default_factory=set)
    """Parents of the run's records (and of its head): where the run started."""
    others: set[str] = field(default_factory=set)
    """Committed records of other runs met by the walk (the run may have written to them)."""
    listed_writes: dict[str, list[str]] = field(default_factory=dict)
    """The writes keys of the checkpoints :meth:`started_from` may name whose folder the walk listed to its end."""
    _writes_of: dict[str, list[str]] = field(default_factory=dict)
    """Writes keys of a checkpoint whose folder may continue on the next page."""
    survivor: StoredObject | None = None
    """The newest committed record of another run: the head's new body."""
    survivor_id: str | None = None
    links: list[tuple[str, str | None, bool]] = field(default_factory=list)
    """The links of the chain met, newest first: (checkpoint id, its previous head, whether it is the run's)."""
    reached_below: bool = False
    """Whether a committed record older than the run's first checkpoint was met (the walk ends there)."""

    def started_from(self) -> set[str]:
        """The checkpoints of other runs the run may have written to: the committed ones between the head and
        the checkpoint its entry names (the first it touched here: its own, or the one it resumed), and the
        parents of its own (where it started, below that range when it forked from an older checkpoint).
        Its writes on its own checkpoints go with them."""
        return (self.others | self.parents | {self.first_id}) - self.doomed_ids - {""}

    def may_commit_later(self) -> bool:
        """Whether a put of the run may still move the head, which is not the run's: the run has a record newer than
        the head (a put whose head PUT has not landed, or one that died), or its entry names the head or a newer
        checkpoint (its first put here may be between its entries and its commit, or it resumed the head and
        its next step is on its way). A run whose checkpoints all lie below the head has been continued by
        others, and nothing of it can move the head any more."""
        if self.wants_survivor or self.chain.head_id is None or self.chain.head_damaged:
            return False
        head_id = self.chain.head_id
        return self.first_id >= head_id or any(self.chain.pending(cid) for cid in self.doomed_ids)

    def deleted_links(self) -> dict[str, str | None]:
        """The links of the chain this rollback deletes below the head it leaves (the head, or the survivor), each
        stretch of them named by its newest with the link below it (:mod:`.chain`, "Deleted links"): what the head
        must name before they go. The run's links above the survivor need no name: above the head, they are
        between two links once the thread goes on."""
        top = self.survivor_id if self.wants_survivor else self.chain.head_id
        names: dict[str, str | None] = {}
        stretch: str | None = None
        for cid, previous, doomed in self.links:
            if top is None or cid >= top:
                continue
            if doomed and stretch is None:
                stretch = cid
            if doomed:
                names[stretch or cid] = previous
            else:
                stretch = None
        return names

    def take_keys(self, parsed: Sequence[tuple[str, CheckpointKey | None]], *, complete: bool) -> None:
        """Sort a page's keys (records and writes) by their checkpoint's verdict, and keep the writes keys of
        the other checkpoints met (the one the run started from then needs no listing of its own). A
        checkpoint's keys are listed together, so every folder of the page but its last is complete, and the
        last too at the end of the listing (``complete``)."""
        last: str | None = None
        wanted = self.others | self.parents | {self.first_id}
        for key, p in parsed:
            if p is None:
                continue
            last = p.checkpoint_id
            verdict = self._verdict(p.checkpoint_id)
            if verdict is not None:
                verdict.append(key)
            elif p.checkpoint_id in wanted:
                self._writes_of.setdefault(p.checkpoint_id, []).extend([] if p.is_record else [key])
        for cid in [c for c in self._writes_of if complete or c != last]:
            self.listed_writes[cid] = self._writes_of.pop(cid)

    def _verdict(self, checkpoint_id: str) -> list[str] | None:
        """Where the keys of a checkpoint go: the run's, the orphans', the stranded; ``None``: they stay."""
        if checkpoint_id in self.doomed_ids:
            return self.doomed
        if checkpoint_id in self.orphan_ids:
            return self.orphans
        if checkpoint_id in self.stranded_ids:
            return self.stranded
        return None


def _is_pair(relative: str) -> bool:
    parts = relative.split("/")
    return len(parts) == 2 and all(parts)


def _first_checkpoint_of_run(entry: StoredObject | None) -> str:
    """The run's first checkpoint id from its run-index entry, or "" (walk the whole namespace) when the
    entry is gone or damaged: the id only bounds the walk; which records are the run's is read from them."""
    try:
        return entry.body.decode() if entry is not None else ""
    except UnicodeDecodeError:
        return ""
