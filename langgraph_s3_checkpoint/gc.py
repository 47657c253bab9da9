"""Garbage collection: delete objects that no committed checkpoint needs.

The commit protocol never needs cleanup to stay correct, but interrupted or losing operations leave
objects behind. :func:`gc` (and :func:`agc`, its asyncio twin) finds them, by category:

``orphan_record``
    A record (and its writes) that the commit chain (:mod:`langgraph_s3_checkpoint.chain`) calls
    ORPHAN: older than its namespace's head but off the chain, so it can never be committed (a ``put``
    that died before its head PUT and was overtaken, a conflict loser that could not delete its record).
``uncommitted_record``
    A record (and its writes) newer than its namespace's head (PENDING by the chain's rule): a ``put``
    that died before its head PUT, or a conflict loser that died before deleting its record. Readers
    already ignore it; it may still commit, so only its age makes it garbage. Writes with no record
    and newer than the head count here too.
``orphan_writes``
    Pending writes of a checkpoint older than the head whose record does not exist (a conflict loser
    deleted it, or an interrupted ``prune`` did).
``orphan_blob``
    A large channel value that no committed record of its namespace references (written by a put
    that never committed, or left by an interrupted ``prune``).
``headless_namespace``
    Every object of a namespace that has no head: an interrupted ``delete_thread``, a ``copy_thread``
    that died before committing, or a thread whose very first put never committed.
``dangling_run_entry``
    A run-index entry (``runs/{run}/...`` or ``threads/{T}/r/...``) whose namespace holds no committed
    checkpoint of that run.
``setup_probe``
    The probe object of an interrupted ``setup()``.
``orphan_name``
    The ``name`` object of a thread (long thread ids only) with nothing else left. A ``name`` deleted (this one,
    or a namespace's with its headless namespace) is put back if its thread or namespace is in use right after:
    a first put committed meanwhile (see :meth:`_Collector.put_back_names_in_use`).
``unfinished_copy``, ``unfinished_delete``
    The ``copying`` marker of a ``copy_thread`` that did not remove it, the ``deleting`` marker of a delete
    (``delete_thread``, ``expire_threads``; a rollback's is the namespace's) that died part-way, once no
    namespace (that namespace) holds objects without a head: while one does, the marker keeps
    ``repair_thread`` from making them a history.

Which records are committed is decided by :class:`~langgraph_s3_checkpoint.chain.Chain`, as for every
reader: each namespace's ``c/`` listing is walked newest first and the records at or below the head are
read (``READ_BATCH`` at a time) for their chain link. Writes objects share their record's standing.

Nothing younger than ``grace_seconds`` is deleted, judged by the object's LastModified against the
server's clock (the ``Date`` of the listing that showed it), so puts in flight are never touched: keep
the grace well above the longest a ``put`` can take. ORPHAN records are garbage at once, but the grace
applies to them too, for safety. Committed checkpoints are never deleted. Keys that are not the saver's
by :func:`keys.classify`'s rule (an unrecognised key, a zero-byte folder marker ending in ``/``, anything
in a folder no id escapes to) are never deleted; the report counts them as ``foreign``. Where a record
cannot be read (damaged, or deleted since the listing by a concurrent ``prune``/``delete_for_runs``/
``delete_thread``), the namespace's remaining ORPHAN records, its blobs and its run-index entries are
left alone: what the damaged record committed cannot be judged.

gc is a plan (see :mod:`langgraph_s3_checkpoint.core`), so it runs through the saver's own I/O shell
(boto3 or the direct transport, or an in-process bucket): :func:`gc` blocks, :func:`agc` awaits. It
streams every listing page by page: its memory is one page, up to ``READ_BATCH`` record bodies, and,
for the namespace being scanned, the blob references and run ids of its committed records.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from .chain import Chain, Standing
from .errors import CorruptObjectError, InvalidConfigError
from .keys import COPYING, DELETING, KeyKind, Layout, classify, classify_in_namespace, escape, is_own_segment
from .plans import DELETE_BATCH, READ_BATCH, all_of, any_under, deletes, for_each_emitted, one, pages
from .requests import Emit, Get, ListKeys, Page, Plan, Put, StoredObject

if TYPE_CHECKING:
    from .saver import BaseS3Saver

SAMPLE_SIZE = 100


@dataclass
class GcReport:
    """What :func:`gc` deleted (or, with ``dry_run``, would delete)."""

    dry_run: bool
    grace_seconds: float
    scanned: int = 0
    """Objects listed."""
    deleted: collections.Counter[str] = field(default_factory=collections.Counter)
    """Objects deleted (or deletable in a dry run), by category."""
    deleted_bytes: int = 0
    young: int = 0
    """Garbage kept because it is younger than the grace period."""
    foreign: int = 0
    """Keys left alone because they are not the saver's (unrecognised keys, zero-byte folder markers)."""
    unreadable: list[str] = field(default_factory=list)
    """Heads or records that could not be decoded; what they commit was left as it is."""
    sample: list[str] = field(default_factory=list)
    """The first deleted keys (at most 100), for a look at what a dry run would do."""

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


@dataclass
class _Namespace:
    committed: bool
    """Whether the namespace has a head (and so committed checkpoints)."""
    run_segments: set[str] | None
    """Escaped run ids of its committed records; ``None`` if unknown (then no run entry of it goes)."""
    unsettled: bool = False
    """Whether objects of it stay without a head (young ones): what a marker of the thread protects."""


@dataclass
class _Walk:
    """One namespace being scanned."""

    prefix: str
    chain: Chain
    """The namespace's commit chain, walked down from its head (``head_id`` ``None``: no head)."""
    referenced: set[str] = field(default_factory=set)
    """Blob keys referenced by the committed records met so far (and the head)."""
    runs: set[str] | None = field(default_factory=set)
    chain_sure: bool = True
    """False once a record at or below the head could not be read: ORPHAN verdicts below it are unsafe."""
    refs_known: bool = True
    """False once a committed record's blob references could not be read."""
    current: tuple[str, str | None] | None = None
    """The last record met: its checkpoint id and its category (``None``: kept)."""
    kept: int = 0
    """Objects of the namespace that stay (committed, young, foreign)."""
    aborted: bool = False
    """A head appeared in a namespace found headless: a first put committed meanwhile; leave it."""

    @property
    def headless(self) -> bool:
        return self.chain.head_id is None

    @property
    def pending_reason(self) -> str:
        """The category of what may still commit here, so goes only by age."""
        return "headless_namespace" if self.headless else "uncommitted_record"

    @property
    def head_key(self) -> str:
        return Layout.head_in(self.prefix)

    @property
    def records(self) -> str:
        return Layout.records_in(self.prefix)

    @property
    def blobs(self) -> str:
        return Layout.blobs_in(self.prefix)


@dataclass
class _BatchedReads:
    """The bodies of some keys of a listing page, read ``READ_BATCH`` at a time: a batch is read when the
    first key of it is needed (the keys must be asked for in order)."""

    keys: Sequence[str]
    to_read: list[int]
    """Indexes of the keys to read, in order."""
    next_read: int = 0
    bodies: dict[int, StoredObject | None] = field(default_factory=dict)

    def body(self, i: int) -> Plan[StoredObject | None]:
        if i not in self.bodies:
            batch = self.to_read[self.next_read : self.next_read + READ_BATCH]
            self.next_read += len(batch)
            objs = yield from all_of([Get(self.keys[j]) for j in batch])
            self.bodies = dict(zip(batch, objs, strict=True))
        return self.bodies[i]


def _skipping(prefix: str, skip: str) -> Generator[Any, Any, None]:
    """Pages of the listing of ``prefix`` (``Emit(page)``), jumping over the keys under ``skip`` once a
    page ends inside it (the pages may still show some of them; the caller ignores those)."""
    token: str | None = None
    start_after: str | None = None
    jumped = False
    while True:
        page = yield from one(ListKeys(prefix, start_after=None if token else start_after, token=token))
        yield Emit(page)
        if page.token is None:
            return
        if not jumped and page.keys and page.keys[-1].startswith(skip):
            # Every key under ``skip`` sorts before ``skip`` with its last character incremented.
            jumped, token, start_after = True, None, skip[:-1] + chr(ord(skip[-1]) + 1)
        else:
            token = page.token


def _age_cutoff(page: Page, grace: float) -> Callable[[int], bool]:
    """Whether the ``i``-th key of ``page`` is old enough to go, by the server's clock."""
    now = page.served or datetime.now(timezone.utc)

    def old(i: int) -> bool:
        if i >= len(page.modified):
            return False  # no LastModified: its age is unknown
        return (now - page.modified[i]).total_seconds() >= grace

    return old


def _size(page: Page, i: int) -> int:
    return page.sizes[i] if i < len(page.sizes) else 0


class _Collector:
    def __init__(self, saver: BaseS3Saver, grace_seconds: float, dry_run: bool) -> None:
        self.codec = saver.plans.codec
        self.root = saver.plans.layout.prefix
        self.grace = grace_seconds
        self.report = GcReport(dry_run=dry_run, grace_seconds=grace_seconds)
        self.pending: list[tuple[str, str | None, int]] = []
        """Keys to delete with their category (``None``: uncounted companion) and size."""
        self.thread_kept = 0
        """Objects of the thread being scanned that stay."""

    # -- deciding and deleting ------------------------------------------------------------------------
    def doom(
        self, page: Page, i: int, reason: str, old: Callable[[int], bool], walk: _Walk | None = None, also: str = ""
    ) -> bool:
        """Queue the ``i``-th key of ``page`` (and ``also``, uncounted) for deletion unless it is too young."""
        if not old(i):
            self.report.young += 1
            self.keep(walk)
            return False
        self.pending.append((page.keys[i], reason, _size(page, i)))
        if also:
            self.pending.append((also, None, 0))
        return True

    def keep(self, walk: _Walk | None = None) -> None:
        self.thread_kept += 1
        if walk is not None:
            walk.kept += 1

    def foreign(self) -> None:
        """A key that is not the saver's: never deleted, and nothing of ours depends on it (it does not
        keep a ``name`` object alive)."""
        self.report.foreign += 1

    def flush(self, guard: _Walk | None = None) -> Plan[None]:
        """Delete what is queued. With ``guard`` (a namespace found headless), first check that it still
        has no head: a first put that committed meanwhile may use its objects (blobs, ``name``)."""
        doomed, self.pending = self.pending, []
        if not doomed:
            return
        if guard is not None and (yield from one(Get(guard.head_key))) is not None:
            guard.aborted = True
            guard.kept += len(doomed)
            self.thread_kept += len(doomed)
            return
        for key, reason, size in doomed:
            if reason is None:
                continue
            self.report.deleted[reason] += 1
            self.report.deleted_bytes += size
            if len(self.report.sample) < SAMPLE_SIZE:
                self.report.sample.append(key)
        if self.report.dry_run:
            return
        names = [
            (key, reason, kind)
            for key, reason, _ in doomed
            if reason is not None and (kind := self.name_kind(key)) is not None
        ]
        bodies = (yield from all_of([Get(key) for key, _, _ in names])) if names else []
        yield deletes([key for key, _, _ in doomed])
        yield from self.put_back_names_in_use(names, bodies)

    def put_back_names_in_use(
        self, names: list[tuple[str, str, KeyKind]], bodies: list[StoredObject | None]
    ) -> Plan[None]:
        """Put back a ``name`` just deleted whose thread (any object under its ``ns/``) or namespace (a head) is
        in use now. A first put of a thread or namespace offers its ``name`` before it commits, and again after:
        if that second offer came before this delete, the commit came before this check. So either the put
        re-creates the name or this does, and no committed thread or namespace is left without it."""
        for (key, reason, kind), body in zip(names, bodies, strict=True):
            if body is None:
                continue
            folder = key[: -len("name")]
            if kind is KeyKind.THREAD_NAME:
                in_use = yield from any_under(f"{folder}ns/")
            else:
                in_use = (yield from one(Get(Layout.head_in(folder)))) is not None
            if in_use:
                yield [Put(key, body.body, if_none_match=True, expires=False)]
                self.report.deleted[reason] -= 1

    def name_kind(self, key: str) -> KeyKind | None:
        """``THREAD_NAME`` or ``NS_NAME`` for a thread's or a namespace's ``name`` object, else ``None``."""
        threads_root = f"{self.root}threads/"
        if not key.startswith(threads_root):
            return None
        kind = classify(key[len(threads_root) :].partition("/")[2])
        return kind if kind in (KeyKind.THREAD_NAME, KeyKind.NS_NAME) else None

    def flush_if_full(self, guard: _Walk | None = None) -> Plan[None]:
        if len(self.pending) >= DELETE_BATCH:
            yield from self.flush(guard)

    # -- the scan ----------------------------------------------------------------------------------
    def run(self) -> Plan[GcReport]:
        threads_root = f"{self.root}threads/"

        def threads_page(page: Page) -> Plan[None]:
            self.report.scanned += len(page.keys)
            self.report.foreign += len(page.keys)  # nothing of ours lives directly under threads/
            for thread_prefix in page.prefixes:
                if is_own_segment(thread_prefix[len(threads_root) : -1]):
                    yield from self.thread(thread_prefix)
                else:
                    yield from self.foreign_folder(thread_prefix)

        yield from for_each_emitted(pages(threads_root, delimiter="/"), threads_page)
        yield from self.global_runs()

        probes = f"{self.root}_setup/probe-"

        def setup_page(page: Page) -> Plan[None]:
            self.report.scanned += len(page.keys)
            old = _age_cutoff(page, self.grace)
            for i, key in enumerate(page.keys):
                if key.startswith(probes) and not key.endswith("/"):
                    self.doom(page, i, "setup_probe", old)
                else:
                    self.foreign()
            yield from self.flush_if_full()

        yield from for_each_emitted(pages(f"{self.root}_setup/"), setup_page)
        yield from self.flush()
        return self.report

    def foreign_folder(self, prefix: str) -> Plan[None]:
        """Count the keys of a folder whose name no id escapes to (``threads/a.b/``, ``ns/%zz/``): whatever
        they look like inside, they are not the saver's."""

        def foreign_page(page: Page) -> Plan[None]:
            self.report.scanned += len(page.keys)
            self.report.foreign += len(page.keys)
            yield from ()

        yield from for_each_emitted(pages(prefix), foreign_page)

    def thread(self, prefix: str) -> Plan[None]:
        self.thread_kept = 0
        namespaces = yield from self.namespaces(prefix)
        yield from self.run_entries(prefix, namespaces)
        # Deleted before the thread's own keys are judged: the ``deleting`` marker must outlive what it
        # condemns, even if a batch fails part-way.
        yield from self.flush()
        # Listed last, once every other object of the thread has been judged ("copying", "deleting" and
        # "name" sort before "ns/" and "r/").
        yield from self.thread_keys(prefix, unsettled=any(info.unsettled for info in namespaces.values()))
        yield from self.flush()

    def namespaces(self, prefix: str) -> Plan[dict[str, _Namespace]]:
        """Scan each namespace of a thread; what was found in each, by namespace segment."""
        namespaces: dict[str, _Namespace] = {}
        ns_root = f"{prefix}ns/"

        def ns_page(page: Page) -> Plan[None]:
            self.report.scanned += len(page.keys)
            for _ in page.keys:
                self.foreign()  # nothing of ours lives directly under ns/
            for ns_prefix in page.prefixes:
                segment = ns_prefix[len(ns_root) : -1]
                if is_own_segment(segment):
                    namespaces[segment] = yield from self.namespace(ns_prefix)
                else:
                    yield from self.foreign_folder(ns_prefix)

        yield from for_each_emitted(pages(ns_root, delimiter="/"), ns_page)
        return namespaces

    def run_entries(self, prefix: str, namespaces: dict[str, _Namespace]) -> Plan[None]:
        """Judge a thread's run-index entries (``r/{run}/{ns}``), each with its global twin."""
        thread_segment = prefix[len(f"{self.root}threads/") : -1]
        entries_root = f"{prefix}r/"

        def entries_page(page: Page) -> Plan[None]:
            self.report.scanned += len(page.keys)
            old = _age_cutoff(page, self.grace)
            for i, key in enumerate(page.keys):
                if classify(key[len(prefix) :]) is not KeyKind.RUN_ENTRY:
                    self.foreign()
                    continue
                run_segment, ns_segment = key[len(entries_root) :].split("/")
                if _dangling(namespaces.get(ns_segment), run_segment):
                    twin = f"{self.root}runs/{run_segment}/{thread_segment}/{ns_segment}"
                    self.doom(page, i, "dangling_run_entry", old, also=twin)
                else:
                    self.keep()
            yield from self.flush_if_full()

        yield from for_each_emitted(pages(entries_root), entries_page)

    def thread_keys(self, prefix: str, *, unsettled: bool) -> Plan[None]:
        """Judge the keys directly under a thread, once everything else was judged: its ``name`` object and
        its markers. ``unsettled``: objects of a namespace without a head stay (what a marker protects)."""

        def top_page(page: Page) -> Plan[None]:
            self.report.scanned += len(page.keys)
            old = _age_cutoff(page, self.grace)
            for i, key in enumerate(page.keys):
                relative = key[len(prefix) :]
                kind = classify(relative)
                if kind is KeyKind.THREAD_NAME and self.thread_kept == 0:
                    # A thread with nothing else left (everything else went, or was never there). While
                    # anything stays — a put in flight among it — so does its name.
                    self.doom(page, i, "orphan_name", old)
                elif kind is KeyKind.MARKER and not unsettled:
                    # A marker keeps repair_thread from using the records of namespaces without a head; once
                    # none is left (they went, or every namespace has a head again), it has nothing to keep.
                    self.doom(page, i, _MARKER_REASON[relative], old)
                elif kind in (KeyKind.THREAD_NAME, KeyKind.MARKER):
                    self.keep()
                else:
                    self.foreign()
            yield from self.flush_if_full()

        yield from for_each_emitted(pages(prefix, delimiter="/"), top_page)

    def namespace(self, prefix: str) -> Plan[_Namespace]:
        head_key = Layout.head_in(prefix)
        head = yield from one(Get(head_key))
        if head is None:
            # Nothing is committed here. Flush first, so that everything queued while this namespace is
            # scanned is its own and can be dropped if a head appears meanwhile.
            yield from self.flush()
            walk = _Walk(prefix, Chain(None, None))
        else:
            try:
                head_id, head_previous = self.codec.peek_chain(head_key, head.body)
                metadata, _, refs = self.codec.peek_record(head_key, head.body)
            except CorruptObjectError:
                self.report.unreadable.append(head_key)
                self.keep()
                return _Namespace(committed=True, run_segments=None)
            walk = _Walk(prefix, Chain.from_head(head_id, head_previous))
            self.references(walk, metadata, refs)
        guard = walk if walk.headless else None

        def records_page(page: Page) -> Plan[bool]:
            yield from self.records_page(walk, page)
            if walk.aborted:
                return False
            yield from self.flush_if_full(guard)
            return not walk.aborted

        yield from for_each_emitted(pages(walk.records), records_page)

        def rest_page(page: Page) -> Plan[bool]:
            if not walk.aborted:
                self.rest_page(walk, page)
                yield from self.flush_if_full(guard)
            return not walk.aborted

        if not walk.aborted:
            yield from for_each_emitted(_skipping(prefix, walk.records), rest_page)
        if guard is not None:
            yield from self.flush(guard)
            if walk.aborted:
                return _Namespace(committed=True, run_segments=None)
            return _Namespace(committed=False, run_segments=set(), unsettled=walk.kept > 0)
        known = walk.runs if walk.chain_sure and walk.refs_known else None
        return _Namespace(committed=True, run_segments=known)

    def references(self, walk: _Walk, metadata: Any, refs: dict[str, str]) -> None:
        """Note the blobs and the run of a committed record (or the head)."""
        walk.referenced.update(f"{walk.blobs}{escape(ch)}/{escape(version)}" for ch, version in refs.items())
        run_id = metadata.get("run_id") if isinstance(metadata, dict) else None
        if run_id is not None and walk.runs is not None:
            walk.runs.add(escape(str(run_id)))

    def records_page(self, walk: _Walk, page: Page) -> Plan[None]:
        """Judge one page of a namespace's ``c/`` listing (newest first) by the chain's rule, reading the
        records that only their link can place (at or below the head) ``READ_BATCH`` at a time."""
        self.report.scanned += len(page.keys)
        old = _age_cutoff(page, self.grace)
        chain = walk.chain
        parsed = [Layout.parse_checkpoint_key(walk.records, key) for key in page.keys]
        reads = _BatchedReads(
            page.keys,
            [
                i
                for i, p in enumerate(parsed)
                if p is not None and p.is_record and chain.decided(p.checkpoint_id) is not Standing.PENDING
            ],
        )
        for i, p in enumerate(parsed):
            if p is None:
                self.foreign()
                continue
            cid = p.checkpoint_id
            reason: str | None
            if not p.is_record:
                reason = _writes_reason(walk, cid)
            elif chain.decided(cid) is Standing.PENDING:
                reason = walk.pending_reason  # newer than the head, or no head: may still commit, goes by age
            else:
                reason = self.judge_record(walk, page.keys[i], cid, (yield from reads.body(i)))
            if p.is_record:
                walk.current = (cid, reason)
            if reason is None:
                self.keep(walk)
            else:
                self.doom(page, i, reason, old, walk)

    def judge_record(self, walk: _Walk, key: str, cid: str, obj: StoredObject | None) -> str | None:
        """The category of a record at or below the head (``None``: it stays), by the chain's rule."""
        if obj is None:
            # Deleted since the listing (a concurrent prune, delete_for_runs or delete_thread): it may
            # have been a link, so ORPHAN verdicts below it, and blob references, are no longer safe.
            walk.chain_sure = walk.refs_known = False
            return None
        try:
            previous, detached = self.codec.peek_link(key, obj.body)
        except CorruptObjectError:
            self.report.unreadable.append(key)
            walk.chain_sure = walk.refs_known = False
            return None
        standing = walk.chain.standing(cid, previous, detached)
        if standing is Standing.COMMITTED:
            try:
                metadata, _, refs = self.codec.peek_record(key, obj.body)
            except CorruptObjectError:
                self.report.unreadable.append(key)
                walk.refs_known = False
                return None
            self.references(walk, metadata, refs)
            return None
        if standing is Standing.ORPHAN:
            return "orphan_record" if walk.chain_sure else None
        return "uncommitted_record"

    def rest_page(self, walk: _Walk, page: Page) -> None:
        """Judge the keys of a namespace outside ``c/``: blobs, the head, the ``name`` object."""
        old = _age_cutoff(page, self.grace)
        for i, key in enumerate(page.keys):
            if key.startswith(walk.records):
                continue  # judged by the walk over c/
            self.report.scanned += 1
            kind = classify_in_namespace(key[len(walk.prefix) :])
            if kind not in _OUTSIDE_RECORDS:
                self.foreign()
                continue
            if kind is KeyKind.HEAD and walk.headless:
                walk.aborted = True  # a first put committed since the head was read: leave it
                self.pending.clear()
                self.keep(walk)
                return
            reason = _outside_records_reason(walk, key, kind)
            if reason is None:
                self.keep(walk)
            else:
                self.doom(page, i, reason, old, walk)

    def global_runs(self) -> Plan[None]:
        """Global run-index entries whose per-thread twin is gone (the thread pass handled the rest)."""
        runs_root = f"{self.root}runs/"

        def runs_page(page: Page) -> Plan[None]:
            self.report.scanned += len(page.keys)
            old = _age_cutoff(page, self.grace)
            ours: list[tuple[int, str]] = []
            for i, key in enumerate(page.keys):
                parts = key[len(runs_root) :].split("/")
                if len(parts) != 3 or not all(map(is_own_segment, parts)):
                    self.foreign()
                    continue
                run_segment, thread_segment, ns_segment = parts
                ours.append((i, f"{self.root}threads/{thread_segment}/r/{run_segment}/{ns_segment}"))
            for start in range(0, len(ours), READ_BATCH):
                chunk = ours[start : start + READ_BATCH]
                twins = yield from all_of([Get(twin) for _, twin in chunk])
                for (i, _), twin in zip(chunk, twins, strict=True):
                    if twin is None:
                        self.doom(page, i, "dangling_run_entry", old)
            yield from self.flush_if_full()

        yield from for_each_emitted(pages(runs_root), runs_page)
        yield from self.flush()


_MARKER_REASON = {DELETING: "unfinished_delete", COPYING: "unfinished_copy"}
"""The category of a thread's marker, by its name."""


def _dangling(info: _Namespace | None, run_segment: str) -> bool:
    """Whether a run-index entry points at no committed checkpoint of its run: its namespace is gone or
    has no head, or the run is not among its committed records' (when those are known)."""
    return (
        info is None or not info.committed or (info.run_segments is not None and run_segment not in info.run_segments)
    )


def _writes_reason(walk: _Walk, cid: str) -> str | None:
    """The category of a writes object (``None``: it stays): its record's when that was listed just
    before it, otherwise the chain's verdict on a checkpoint whose record is missing."""
    if walk.current is not None and walk.current[0] == cid:
        return walk.current[1]  # writes share their record's standing
    if walk.chain.decided(cid) is Standing.PENDING:
        return walk.pending_reason  # no record (yet): newer than the head, or no head at all
    if cid == walk.chain.head_id:
        return None  # the head's record is missing (restored by the next latest read)
    return "orphan_writes"


_OUTSIDE_RECORDS = frozenset({KeyKind.BLOB, KeyKind.HEAD, KeyKind.NS_NAME, KeyKind.MARKER})
"""The kinds of a namespace's own keys outside ``c/``."""


def _outside_records_reason(walk: _Walk, key: str, kind: KeyKind) -> str | None:
    """The category of a namespace's blob, head, ``name`` object or marker (``None``: it stays)."""
    if kind is KeyKind.BLOB:
        if walk.headless:
            return "headless_namespace"
        if walk.chain_sure and walk.refs_known and key not in walk.referenced:
            return "orphan_blob"
        return None
    if kind is KeyKind.NS_NAME:
        # Listed after everything else of the namespace; in a namespace without a head it goes
        # only once nothing else stays (a first put in flight relies on it).
        return "headless_namespace" if walk.headless and walk.kept == 0 else None
    if kind is KeyKind.MARKER:
        # A rollback's marker, listed after the records and blobs it protects: it goes once they went, or
        # once the namespace has a head again (repair then has nothing to rebuild there).
        return "unfinished_delete" if not walk.headless or walk.kept == 0 else None
    return None  # the head of a namespace that has one


def _plan(saver: BaseS3Saver, grace_seconds: float, dry_run: bool) -> Plan[GcReport]:
    if grace_seconds < 0:
        raise InvalidConfigError(f"grace_seconds must be >= 0, got {grace_seconds!r}")
    return _Collector(saver, grace_seconds, dry_run).run()


def gc(saver: BaseS3Saver, *, grace_seconds: float = 3600, dry_run: bool = False) -> GcReport:
    """Delete leftovers of interrupted and losing operations under the saver's prefix.

    Only objects older than ``grace_seconds`` (by the server's clock) are deleted. With ``dry_run``
    nothing is deleted and the report says what would be. Safe to run while the saver is in use, as
    long as no ``put`` takes longer than the grace period. See the module docstring for what counts
    as garbage.
    """
    saver.bucket_io.check_open("gc")
    # A sweep of the whole prefix: each request is bounded by the timeouts, the sweep by nothing.
    return saver.bucket_io.run(_plan(saver, grace_seconds, dry_run), bounded=False)


async def agc(saver: BaseS3Saver, *, grace_seconds: float = 3600, dry_run: bool = False) -> GcReport:
    """:func:`gc` for asyncio: the same plan, awaiting each batch of requests."""
    saver.bucket_io.check_open("agc")
    return await saver.bucket_io.arun(_plan(saver, grace_seconds, dry_run), bounded=False)


__all__ = ["GcReport", "agc", "gc"]
