"""Maintenance: ``delete_thread``, ``copy_thread``, ``prune``, ``delete_for_runs`` (rollback),
``expire_threads`` and ``setup``. Whatever deletes committed records follows the rules of
:mod:`langgraph_s3_checkpoint._protocol.chain` so that no reader is ever shown a record that never committed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from ..errors import (
    CREATE_BUCKET_ADVICE,
    BucketNotFoundError,
    CheckpointConflictError,
    CorruptObjectError,
    InvalidArgumentTypeError,
    InvalidConfigError,
    TargetThreadExistsError,
)
from .chain import Chain, Standing
from .codec import Record
from .committing import WRITE_ATTEMPTS, Committing
from .keys import (
    COPIED,
    EXPIRY_TAG,
    RULE_PREFIX,
    CheckpointKey,
    KeyKind,
    Layout,
    classify,
    classify_in_namespace,
    escape,
    is_digest,
    is_own_segment,
)
from .plans import (
    READ_BATCH,
    SIDE_BY_SIDE,
    all_of,
    any_under,
    chunks,
    collect_emitted,
    deletes,
    exists,
    for_each_emitted,
    for_each_group,
    landed,
    list_all,
    mark,
    one,
    own_folders_under,
    pages,
    side_by_side,
)
from .requests import (
    CREATE,
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
    Page,
    Plan,
    PreconditionFailed,
    ProbeConditionalWrites,
    Put,
    RemoveExpiryRule,
    StoredObject,
    Update,
    Written,
    same_etag,
)
from .writes import TaskWrites

ROLLBACK_ATTEMPTS = 5
"""How often ``delete_for_runs`` starts over when the run it deletes commits again meanwhile."""
DELETE_PASSES = 3
"""How often ``delete_thread`` goes over a thread that objects reappeared in (a racing first put)."""
COPY_ATTEMPTS = 3
"""How often ``copy_thread`` takes a new snapshot of the source when a large value its heads reference
was deleted (a prune, a rollback) before it could be copied."""
PRUNE_GRACE = timedelta(minutes=10)
"""prune(keep_latest) leaves unreferenced objects younger than this alone (they may be an in-flight put's)."""


class Maintenance(Committing):
    """Plans that delete, copy, roll back, expire and set up."""

    # -- deleting and copying -----------------------------------------------------------------------
    def delete_thread(self, thread_id: str) -> Plan[None]:
        # A thread with no object at all (never written, or already deleted) needs no marker: writing and
        # removing one would cost two requests and, on filer-backed servers (SeaweedFS), leave an empty folder.
        # A first put racing this LIST is ordered after the delete, as it would be after the whole delete.
        if not (yield from any_under(self.layout.thread(thread_id))):
            self.recall.forget_thread(thread_id)
            return
        marker = yield from mark(self.layout.deleting(thread_id), "delete_thread")
        yield from self._finish_delete(thread_id, marker)

    def _finish_delete(self, thread_id: str, unmark: DeleteIfMatch) -> Plan[None]:
        marker = unmark.key
        for _ in range(DELETE_PASSES):
            yield from self._delete_thread_once(thread_id)
            # The first put of a new thread racing this delete has no head to be fenced on: its large
            # values may have gone in this pass and its head landed after the heads were deleted. Another
            # pass deletes that head too, instead of leaving one whose values are missing.
            left = yield from one(ListKeys(self.layout.thread(thread_id), max_keys=2))
            if not [key for key in left.keys if key != marker]:
                break
        yield [unmark]
        self.recall.forget_thread(thread_id)

    def _delete_thread_once(self, thread_id: str) -> Plan[None]:
        # Heads first: once they are gone the thread reads as empty, so a crash part-way through
        # never leaves a half-deleted thread that looks alive.
        heads = [Layout.head_in(p) for p in (yield from own_folders_under(self.layout.namespaces(thread_id)))]
        if heads:
            yield deletes(heads)
        thread_prefix = self.layout.thread(thread_id)
        thread_segment = escape(thread_id)

        marker = self.layout.deleting(thread_id)

        def delete_page(page: Page) -> Plan[None]:
            keys = [key for key in page.keys if key != marker]
            keys += [
                self.layout.global_run_entry_of(k, thread_segment)
                for k in keys
                if classify(k[len(thread_prefix) :]) is KeyKind.RUN_ENTRY
            ]
            if keys:
                yield deletes(keys)

        yield from for_each_emitted(pages(thread_prefix), delete_page)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> Plan[None]:
        prefixes = yield from own_folders_under(self.layout.namespaces(source_thread_id))
        if not prefixes:
            return
        yield from self._refuse_existing_target(target_thread_id)
        if (yield from any_under(self.layout.thread(target_thread_id))):
            # Objects without a head: a copy, a put or a delete that died. Nothing there is committed, but
            # left in place its records could show through the copy: below a link the source has pruned, the
            # commit chain takes the next record down for committed (chain.py).
            yield from self.delete_thread(target_thread_id)
        # Kept if the copy does not commit (it died, the source kept changing, another writer took the
        # target): the copied records are nobody's history, and repair must not make them so.
        unmark = yield from mark(self.layout.copying(target_thread_id), "copy_thread")
        for _ in range(COPY_ATTEMPTS):
            # Snapshot the heads before copying anything: records newer than a snapshot head stay
            # invisible in the copy, exactly as they would in the source.
            heads = yield from all_of([Get(Layout.head_in(p)) for p in prefixes])
            needed = {
                self.layout.blob_in(prefix, channel, version)
                for prefix, head in zip(prefixes, heads, strict=True)
                if head is not None
                for channel, version in self.codec.peek_blobs(Layout.head_in(prefix), head.body).items()
            }
            copied = yield from self._copy_history(source_thread_id, target_thread_id, needed)
            if copied == needed:
                break
            # A large value a snapshot head references was gone before it could be copied: the source
            # moved on and a prune (or rollback) removed it. Committing these heads would make the
            # target unreadable; take a new snapshot (objects already copied are overwritten or, if
            # no head references them, left to gc).
        else:
            raise CheckpointConflictError(
                source_thread_id,
                "",
                f" (copy_thread to {target_thread_id!r}: large values its heads reference kept being deleted "
                f"while it copied, {COPY_ATTEMPTS} times; nothing was committed to the target)",
            )
        names = self._names(target_thread_id, "")
        if names:
            yield from all_of(names)
        # The heads last (If-None-Match): until they land the target reads as empty, never half-copied.
        commits: list[Put] = []
        for prefix, head in zip(prefixes, heads, strict=True):
            if head is not None:
                target = self.layout.retarget_thread(Layout.head_in(prefix), source_thread_id, target_thread_id)
                commits.append(Put(target, head.body, mode=CREATE))
        replies = (yield from all_of(commits)) if commits else []
        applied = yield from landed(commits, replies)
        refused = [put.key for put, ours in zip(commits, applied, strict=True) if not ours]
        if refused:
            # Another writer created the target meanwhile (a second copy, a first put): its heads stand.
            raise TargetThreadExistsError(
                f"copy_thread: another writer gave target thread {target_thread_id!r} checkpoints while it was "
                f"being copied; {len(refused)} of the copy's {len(commits)} heads were refused and theirs kept "
                f"({', '.join(refused)}). Delete the target and copy again, or choose a new thread id"
            )
        yield [unmark]

    def _refuse_existing_target(self, target_thread_id: str) -> Plan[None]:
        """Raise :class:`TargetThreadExistsError` if the copy's target has a committed checkpoint.

        Only a committed checkpoint (a head) makes the target exist. Objects of a copy that died before
        committing, and the emptied folders some servers (SeaweedFS) keep listing after a delete, must
        not block a new copy: it deletes the former first and ignores the latter.
        """
        target_heads = [
            Layout.head_in(p) for p in (yield from own_folders_under(self.layout.namespaces(target_thread_id)))
        ]
        found = (yield from all_of([Get(k) for k in target_heads])) if target_heads else []
        if any(obj is not None for obj in found):
            raise TargetThreadExistsError(
                f"copy_thread: target thread {target_thread_id!r} already has checkpoints; "
                "delete it first or choose a new thread id"
            )

    def _copy_history(self, source_thread_id: str, target_thread_id: str, needed: set[str]) -> Plan[set[str]]:
        """Server-side copies of every object of the source thread except its heads and its ``name`` (both
        written by ``copy_thread`` for the target), with the global run-index twin of each run entry.
        Returns which of the ``needed`` source keys were copied."""
        source_prefix = self.layout.thread(source_thread_id)
        target_segment = escape(target_thread_id)
        copied: set[str] = set()

        def copy_page(page: Page) -> Plan[None]:
            requests: list[Copy] = []
            for key in page.keys:
                kind = classify(key[len(source_prefix) :])
                if kind not in COPIED:
                    continue
                requests.append(Copy(key, self.layout.retarget_thread(key, source_thread_id, target_thread_id)))
                if kind is KeyKind.RUN_ENTRY:
                    requests.append(Copy(key, self.layout.global_run_entry_of(key, target_segment)))
            for chunk in chunks(requests, READ_BATCH * 2):
                replies = yield from all_of(chunk)
                existing = {c.source for c, existed in zip(chunk, replies, strict=True) if existed}
                copied.update(existing & needed)

        yield from for_each_emitted(pages(source_prefix), copy_page)
        return copied

    def prune(self, thread_ids: Sequence[str], strategy: str) -> Plan[None]:
        if isinstance(thread_ids, str):
            raise InvalidArgumentTypeError(
                f"prune() takes a sequence of thread ids, not a str: wrap it in a list, prune([{thread_ids!r}])"
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
        scope = yield from self._prune_scope(thread_id, ns)
        yield from self._name_pruned(thread_id, ns, scope)
        # Records (with their writes) oldest first: an interrupted prune then leaves the head's chain
        # contiguous down to where it stopped, never a gap with an orphan below it (see chain.py). That
        # needs the namespace's victim keys in memory (keys only, one namespace at a time).
        doomed: list[str] = []

        def take(page: Page) -> Plan[None]:
            doomed.extend(scope.victims_of(page))
            yield from ()

        yield from for_each_emitted(pages(scope.records), take)
        for request in deletes(doomed[::-1]):
            yield [request]
        del doomed[:]

        # A fork committed meanwhile may reference an older large value that it found existing and did
        # not rewrite (a young one is spared anyway): keep what the head references now too.
        head_key = self.layout.head(thread_id, ns)
        head_now = yield from one(Get(head_key))
        if head_now is not None:
            now_referenced = self.codec.peek_blobs(head_key, head_now.body).items()
            scope.keep.update(self.layout.blob(thread_id, ns, ch, v) for ch, v in now_referenced)

        # Blobs after records: a crash in between must not leave a record whose blobs are gone, which
        # list() would fail on until the prune runs again.
        def prune_blobs(page: Page) -> Plan[None]:
            victims = scope.victims_of(page)
            if victims:
                yield deletes(victims)

        yield from for_each_emitted(pages(scope.blobs), prune_blobs)
        self.recall.forget_thread(thread_id)

    def _name_pruned(self, thread_id: str, ns: str, scope: _PruneScope) -> Plan[None]:
        """Before prune deletes the history below the head it kept, the head names the kept head's link as deleted
        with nothing below it (:mod:`.chain`, "Deleted links"): a record landing below it later (a put held in the
        network) is never judged committed. Names of links below that one are dropped (nothing is left there); the
        head is rewritten ``If-Match``, read again when it moved (a put committed on top keeps the kept head on its
        chain, so the same name holds)."""
        if scope.head_previous is None:
            return  # the kept head created the namespace: nothing below it was ever on its chain
        floor = scope.head_previous
        head_key = self.layout.head(thread_id, ns)
        for _ in range(ROLLBACK_ATTEMPTS):
            head = yield from one(Get(head_key))
            if head is None:
                return  # deleted meanwhile: nothing is committed here any more
            named = self.codec.peek_chain(head_key, head.body)[2]
            if named.get(floor, "") is None and all(link > floor for link in named if link != floor):
                return
            kept = {link: below for link, below in named.items() if link > floor}
            body = self.codec.with_deleted(head_key, head.body, {**kept, floor: None}, replace=True)
            if (yield from one(Put(head_key, body, mode=Update(head.etag)))) is not PRECONDITION_FAILED:
                return
        raise CheckpointConflictError(thread_id, ns, " while prune named what it deletes (the head kept moving)")

    def _prune_scope(self, thread_id: str, ns: str) -> Plan[_PruneScope]:
        """What ``prune(keep_latest)`` keeps in a namespace: the head, its record, writes and large values,
        and those of the ancestors its DeltaChannel values are rebuilt from."""
        head_key = self.layout.head(thread_id, ns)
        head = yield from one(Get(head_key))
        scope = _PruneScope(
            namespace=self.layout.ns(thread_id, ns),
            head_id=None,
            keep={head_key, self.layout.ns_name(thread_id, ns)},
        )
        if head is None:
            return scope
        record = self.codec.decode_record(head_key, head.body)
        scope.head_id = record.checkpoint["id"]
        scope.head_previous = record.previous_head
        for kept in [record, *(yield from self._delta_ancestors(thread_id, ns, record))]:
            cid = kept.checkpoint["id"]
            scope.keep.add(self.layout.record(thread_id, ns, cid))
            scope.keep_prefixes.append(self.layout.writes(thread_id, ns, cid))
            scope.keep.update(self.layout.blob(thread_id, ns, ch, v) for ch, v in kept.blobs.items())
        return scope

    def _delta_ancestors(self, thread_id: str, ns: str, head: Record) -> Plan[list[Record]]:
        """The ancestors of the head that its DeltaChannel values are rebuilt from, newest first.

        DeltaChannel values absent from the head are rebuilt from ancestors' writes back to the nearest
        ancestor that stores the channel: keep that chain, or the channel reads empty. LangGraph names
        those channels in this metadata field; other channels without a stored value (triggers such as
        "branch:to:x") are simply empty and need no ancestor.
        """
        delta_channels = set(head.metadata.get("counters_since_delta_snapshot") or ())
        missing = delta_channels - set(head.inline) - set(head.blobs)
        ancestors: list[Record] = []
        cursor = head.parent_id
        while missing and cursor is not None:
            key = self.layout.record(thread_id, ns, cursor)
            obj = yield from one(Get(key))
            if obj is None:
                break
            ancestor = self.codec.decode_record(key, obj.body)
            ancestors.append(ancestor)
            missing -= set(ancestor.inline) | set(ancestor.blobs)
            cursor = ancestor.parent_id
        return ancestors

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
            entries: list[Page] = []
            yield from collect_emitted(pages(index), entries)
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
                yield [Delete((key, self.layout.thread_run_entry(run_id, thread_id, ns)))]
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

    # -- retention ------------------------------------------------------------------------------------
    def expire_threads(self, older_than: timedelta, *, dry_run: bool) -> Plan[None]:
        """Delete (or, dry, only name) every thread none of whose heads was written in the last ``older_than``.

        Emits each expired thread id. Age is judged by the server's clock (the ``Date`` of the listing
        that showed the heads), like gc's and prune's, so a machine whose clock is ahead cannot take a
        live thread for an idle one. An idle thread's heads are deleted first, each only if it still
        has the ETag it was listed with (the root namespace's first): a thread written since it was
        judged idle keeps its heads and is left alone (:meth:`_delete_idle_heads`). Cost: one LIST of
        the thread index per 1,000 threads, and per thread one LIST of its namespaces and one LIST per
        namespace (returning just its head), then, for an idle one, one GET and one conditional delete
        per head, and ``delete_thread``. Threads are judged :data:`.plans.SIDE_BY_SIDE` at a time (their
        listings share round trips); the idle ones of a group are then deleted one after another, in order.
        """
        root = self.layout.threads_root

        def expire_group(prefixes: list[str]) -> Plan[None]:
            judged = yield from side_by_side([self._idle_heads(prefix, older_than) for prefix in prefixes])
            for prefix, heads in zip(prefixes, judged, strict=True):
                if heads is None:
                    continue
                thread_id = yield from self._name_of(self.layout.segment_after(prefix, root), prefix)
                if thread_id is None:
                    continue
                if not dry_run:
                    unmark = yield from self._delete_idle_heads(thread_id, heads)
                    if unmark is None:
                        continue  # written since it was listed: alive
                    yield from self._finish_delete(thread_id, unmark)
                yield Emit(thread_id)

        def own_thread_folders(page: Page) -> Plan[None]:
            for prefix in page.prefixes:
                if is_own_segment(self.layout.segment_after(prefix, root)):  # else a folder no thread id escapes to
                    yield Emit(prefix)

        thread_folders = for_each_emitted(pages(root, delimiter="/"), own_thread_folders)
        yield from for_each_group(thread_folders, SIDE_BY_SIDE, expire_group)

    def _idle_heads(self, prefix: str, older_than: timedelta) -> Plan[list[tuple[str, str, datetime]] | None]:
        """The heads (key, ETag, last modified) of the thread at ``prefix`` if none was written in the last
        ``older_than`` by the server's clock, else ``None``; ``None`` too for a thread with no head at all (an
        emptied folder some servers keep listing, or a leftover that gc collects): nothing to expire."""
        ns_prefixes = yield from own_folders_under(f"{prefix}ns/")
        # A LIST of the prefix "head" returns the head first if it exists ("head" sorts before
        # every longer key it starts, a foreign "head-notes" included); only that key is taken.
        pages_ = yield from all_of([ListKeys(Layout.head_in(p), max_keys=1) for p in ns_prefixes])
        heads = [
            (key, etag, modified)
            for p, page in zip(ns_prefixes, pages_, strict=True)
            for key, etag, modified in zip(page.keys, page.etags, page.modified, strict=False)
            if key == Layout.head_in(p)
        ]
        newest = max((modified for _, _, modified in heads), default=None)
        served = max((page.served for page in pages_ if page.served is not None), default=None)
        if newest is None or newest > (served or datetime.now(timezone.utc)) - older_than:
            return None
        return heads

    def _delete_idle_heads(self, thread_id: str, heads: list[tuple[str, str, datetime]]) -> Plan[DeleteIfMatch | None]:
        """Mark the thread as being deleted and delete its heads if none changed since they were listed
        (returns the request that removes the marker, for the end of the delete); ``None``, with every head
        in place and no marker, if one did (the thread is in use).

        The root namespace goes first: every step of the graph moves it, so a step that starts after its
        delete fails loudly at its first checkpoint instead of writing into a thread being deleted. A
        subgraph's head can still move after that (a subgraph checkpoints inside its parent's step, before
        the parent's own checkpoint): then the heads already deleted are put back, from the bytes read
        before deleting them, with ``If-None-Match`` so that a head a writer created meanwhile wins."""
        listed = [(key, etag) for key, etag, _ in heads]
        root_head = self.layout.head(thread_id, "")
        listed.sort(key=lambda head: head[0] != root_head)
        now = yield from all_of([Get(key) for key, _ in listed])
        if any(obj is None or not same_etag(obj.etag, etag) for (_, etag), obj in zip(listed, now, strict=True)):
            return None
        unmark = yield from mark(self.layout.deleting(thread_id), "expire_threads")
        deleted: list[tuple[str, StoredObject]] = []
        for (key, _), obj in zip(listed, now, strict=True):
            assert obj is not None  # checked above
            refused = (yield from one(DeleteIfMatch(key, obj.etag))) is PRECONDITION_FAILED
            # Refused: the head moved, unless it is gone (a retry whose first attempt deleted it and lost
            # its answer is refused by SeaweedFS, a missing object failing If-Match).
            if refused and (yield from one(Get(key))) is not None:
                yield [Put(deleted_key, head.body, mode=CREATE) for deleted_key, head in deleted]
                yield [unmark]
                return None
            deleted.append((key, obj))
        return unmark

    # -- setup ------------------------------------------------------------------------------------
    def setup(self, *, create_bucket: bool, bucket: str) -> Plan[None]:
        """The bucket (created with ``create_bucket``), then the conditional-write probe (run by the shell once per
        process, :mod:`.._transport.probe`: it refuses a server that does not enforce them unless the saver was told
        otherwise), then, with a TTL, the lifecycle rule, read back: a server that stored it without its tag filter
        (Garage) would expire everything under the prefix, the store's items included, so the rule is removed again
        and ``ttl_days`` refused."""
        exists = yield from one(BucketExists())
        if not exists:
            if not create_bucket:
                raise BucketNotFoundError(f"Bucket {bucket!r} does not exist. {CREATE_BUCKET_ADVICE}")
            yield [CreateBucket()]
        yield [ProbeConditionalWrites()]
        if self.ttl is None:
            return
        rule = EnsureExpiryRule(f"{RULE_PREFIX}{self.layout.prefix}", self.layout.prefix, self.ttl.days, EXPIRY_TAG)
        kept = yield from one(rule)
        if kept is None or not kept.matches(rule):
            yield [RemoveExpiryRule(rule.rule_id)]
            answer = "no rule by that id" if kept is None else kept.answer
            raise InvalidConfigError(
                f"ttl_days={self.ttl.days} cannot be honoured on bucket {bucket!r}: the server did not keep the "
                f"lifecycle rule {rule.rule_id!r} as sent (prefix {rule.prefix!r}, tag {EXPIRY_TAG}, "
                f"{rule.days} days); it reported {answer}. Without the tag filter it would expire every object "
                "under the prefix, live threads and the store's items included, so the rule was removed. Drop "
                "ttl_days and expire idle threads with expire_threads() instead (docs/operations.md, Retention)."
            )


@dataclass
class _PruneScope:
    """What ``prune(keep_latest)`` keeps in one namespace, and which of the other keys it deletes now.

    A put still in flight writes its blobs and its record (newer than the head) before its head; such
    objects are spared while younger than the grace period, or the checkpoint it is about to commit
    would lose them. Any unreferenced large value may be one (a fork numbers its versions from an older
    checkpoint, so a version below the head's proves nothing). Records not newer than the head can never
    commit again (see chain.py) and go whatever their age. Age is judged by the server's clock (the
    listing's Date), never by this machine's.
    """

    namespace: str
    """The namespace's prefix (``threads/{T}/ns/{N}/``)."""
    head_id: str | None
    keep: set[str]
    """Keys that stay."""
    head_previous: str | None = None
    """The kept head's link: from it down, the chain is deleted."""
    keep_prefixes: list[str] = field(default_factory=list)
    """Prefixes whose keys stay (the kept records' writes)."""

    @property
    def records(self) -> str:
        return Layout.records_in(self.namespace)

    @property
    def blobs(self) -> str:
        return Layout.blobs_in(self.namespace)

    def standing(self, key: str) -> Standing | None:
        """The chain's standing of a record or writes prune does not keep (PRUNABLE, or PENDING for a put in flight);
        PENDING for a large value no kept record references (a put in flight may); None: not ours."""
        parsed = Layout.parse_checkpoint_key(self.records, key)  # what classify_in_namespace calls a record or write
        if parsed is not None:
            return Chain.from_head(self.head_id, None).unkept(parsed.checkpoint_id)
        return Standing.PENDING if classify_in_namespace(key[len(self.namespace) :]) is KeyKind.BLOB else None

    def victims_of(self, page: Page) -> list[str]:
        """The keys of a listing page to delete: not kept, and orphaned or pending past the grace period."""
        young = (page.served or datetime.now(timezone.utc)) - PRUNE_GRACE
        victims = []
        for key, modified in zip(page.keys, page.modified, strict=True):
            if key in self.keep or any(key.startswith(p) for p in self.keep_prefixes):
                continue
            found = self.standing(key)
            if found is Standing.PRUNABLE or (found is Standing.PENDING and modified <= young):
                victims.append(key)
        return victims


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
