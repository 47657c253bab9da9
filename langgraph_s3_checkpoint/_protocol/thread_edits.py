"""ThreadEdits: ``delete_thread``, ``copy_thread``, ``prune``, ``expire_threads`` and ``setup`` (``delete_for_runs``
is :mod:`.rollback`'s). Whatever deletes committed records follows the rules of
:mod:`langgraph_s3_checkpoint._protocol.chain` so that no reader is ever shown a record that never committed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from itertools import zip_longest

from ..errors import (
    CREATE_BUCKET_ADVICE,
    BucketNotFoundError,
    CheckpointConflictError,
    InvalidArgumentTypeError,
    InvalidConfigError,
    TargetThreadExistsError,
)
from .chain import Chain, Standing
from .codec import Record
from .keys import (
    COPIED,
    EXPIRY_TAG,
    RULE_PREFIX,
    KeyKind,
    Layout,
    classify,
    classify_in_namespace,
    escape,
    is_own_segment,
)
from .plans import (
    READ_BATCH,
    FolderEnd,
    FolderKeys,
    all_of,
    any_under,
    chunks,
    deletes,
    folder_by_folder,
    for_each_emitted,
    landed,
    mark,
    one,
    own_folders_under,
    pages,
)
from .requests import (
    CREATE,
    PRECONDITION_FAILED,
    BucketExists,
    Copy,
    CreateBucket,
    DeleteIfMatch,
    Emit,
    EnsureExpiryRule,
    Get,
    ListKeys,
    Page,
    Plan,
    ProbeConditionalWrites,
    Put,
    RemoveExpiryRule,
    StoredObject,
    Update,
    same_etag,
)
from .rollback import Rollbacks
from .run_index import CARRYING, CarriedRuns

PRUNE_NAMING_ATTEMPTS = 5
"""How often ``prune`` reads the head again to name what it deletes when the head moved meanwhile."""
DELETE_PASSES = 3
"""How often ``delete_thread`` goes over a thread that objects reappeared in (a racing first put)."""
COPY_ATTEMPTS = 3
"""How often ``copy_thread`` takes a new snapshot of the source when a large value its heads reference
was deleted (a prune, a rollback) before it could be copied."""
PRUNE_GRACE = timedelta(minutes=10)
"""prune(keep_latest) leaves unreferenced objects younger than this alone (they may be an in-flight put's)."""


class ThreadEdits(Rollbacks):
    """Plans that delete, copy, prune, expire and set up (and, through :class:`~.rollback.Rollbacks`, roll back)."""

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
        written by ``copy_thread`` for the target), then the target's run index (:mod:`.run_index`: the runs the
        copied records, writes and 0.1.x twins name, read beside the copies). Returns which of the ``needed``
        source keys were copied."""
        source_prefix = self.layout.thread(source_thread_id)
        carried = CarriedRuns(self.codec)
        copied: set[str] = set()

        def copy_page(page: Page) -> Plan[None]:
            copies: list[Copy] = []
            reads: list[tuple[str, KeyKind]] = []
            for key in page.keys:
                kind = classify(key[len(source_prefix) :])
                if kind in COPIED:
                    copies.append(Copy(key, self.layout.retarget_thread(key, source_thread_id, target_thread_id)))
                if kind in CARRYING:
                    reads.append((key, kind))
            for copy_chunk, read_chunk in zip_longest(chunks(copies, READ_BATCH), chunks(reads, READ_BATCH)):
                copy_chunk, read_chunk = copy_chunk or [], read_chunk or []
                replies = yield from all_of([*copy_chunk, *(Get(key) for key, _ in read_chunk)])
                existed, bodies = replies[: len(copy_chunk)], replies[len(copy_chunk) :]
                copied.update({c.source for c, there in zip(copy_chunk, existed, strict=True) if there} & needed)
                for (key, kind), obj in zip(read_chunk, bodies, strict=True):
                    if obj is not None:  # else deleted since the listing: nothing of it was copied either
                        carried.note(key, key[len(source_prefix) :], kind, obj.body)

        yield from for_each_emitted(pages(source_prefix), copy_page)
        entries = carried.entries(self.layout, escape(target_thread_id))
        for chunk in chunks(entries, READ_BATCH):
            yield from all_of(chunk)
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
        for _ in range(PRUNE_NAMING_ATTEMPTS):
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

    # -- retention ------------------------------------------------------------------------------------
    def expire_threads(self, older_than: timedelta, *, dry_run: bool) -> Plan[None]:
        """Delete (or, dry, only name) every thread none of whose heads was written in the last ``older_than``.

        Emits each expired thread id. Age is judged by the server's clock (the ``Date`` of the listing
        that showed the heads), like gc's and prune's, so a machine whose clock is ahead cannot take a
        live thread for an idle one. An idle thread's heads are deleted first, each only if it still
        has the ETag it was listed with (the root namespace's first): a thread written since it was
        judged idle keeps its heads and is left alone (:meth:`_delete_idle_heads`). Cost: one flat LIST of
        every thread per 1,000 keys (:func:`.plans.folder_by_folder`: each head's LastModified and ETag are in
        it), nothing per thread; then, for an idle one, the GET of its ``name`` if its id is a digest, one GET
        and one conditional delete per head, and ``delete_thread``, thread after thread in key order.
        """
        root = self.layout.threads_root
        heads: list[tuple[str, str, datetime]] = []
        served: list[datetime] = []

        def walk(item: FolderKeys | FolderEnd) -> Plan[None]:
            if item.segment is None or not is_own_segment(item.segment):
                return  # keys in no thread's folder, or in a folder no thread id escapes to
            prefix = f"{root}{item.segment}/"
            if isinstance(item, FolderKeys):
                page = item.page
                for key, etag, modified in zip(page.keys, page.etags, page.modified, strict=False):
                    if classify(key[len(prefix) :]) is KeyKind.HEAD:
                        heads.append((key, etag, modified))
                        if page.served is not None:
                            served.append(page.served)
                return
            idle = _idle(heads[:], max(served, default=None), older_than)
            del heads[:], served[:]
            if idle is not None:
                yield from self._expire(item.segment, prefix, idle, dry_run)

        yield from for_each_emitted(folder_by_folder(root), walk)

    def _expire(self, segment: str, prefix: str, heads: list[tuple[str, str, datetime]], dry_run: bool) -> Plan[None]:
        """Delete the idle thread at ``prefix`` (or, dry, only name it) unless a head changed since it was listed;
        emits its id if it goes."""
        thread_id = yield from self._name_of(segment, prefix)
        if thread_id is None:
            return
        if not dry_run:
            unmark = yield from self._delete_idle_heads(thread_id, heads)
            if unmark is None:
                return  # written since it was listed: alive
            yield from self._finish_delete(thread_id, unmark)
        yield Emit(thread_id)

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


def _idle(
    heads: list[tuple[str, str, datetime]], served: datetime | None, older_than: timedelta
) -> list[tuple[str, str, datetime]] | None:
    """A thread's heads (key, ETag, LastModified) if none was written in the last ``older_than`` by the server's clock
    (``served``: the ``Date`` of the listing that showed them), else ``None``; ``None`` too for a thread with no head
    at all (a leftover that gc collects): nothing to expire."""
    newest = max((modified for _, _, modified in heads), default=None)
    if newest is None or newest > (served or datetime.now(timezone.utc)) - older_than:
        return None
    return heads


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
