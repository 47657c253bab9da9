"""Maintenance: ``delete_thread``, ``copy_thread``, ``prune``, ``delete_for_runs`` (rollback),
``expire_threads`` and ``setup``. Whatever deletes committed records follows the rules of
:mod:`langgraph_s3_checkpoint.chain` so that no reader is ever shown a record that never committed."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from .chain import Chain, Standing
from .committing import Committing
from .errors import (
    CREATE_BUCKET_ADVICE,
    BucketNotFoundError,
    CheckpointConflictError,
    ConditionalWritesUnsupportedError,
    CorruptObjectError,
    InvalidArgumentTypeError,
    InvalidConfigError,
    TargetThreadExistsError,
)
from .keys import Layout, escape
from .plans import READ_BATCH, chunks, collect, deletes, each, one, pages
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
)

ROLLBACK_ATTEMPTS = 5
"""How often ``delete_for_runs`` starts over when the run it deletes commits again meanwhile."""
PRUNE_GRACE = timedelta(minutes=10)
"""prune(keep_latest) leaves unreferenced objects younger than this alone (they may be an in-flight put's)."""


class Maintenance(Committing):
    """Plans that delete, copy, roll back, expire and set up."""

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


def _is_pair(relative: str) -> bool:
    parts = relative.split("/")
    return len(parts) == 2 and all(parts)
