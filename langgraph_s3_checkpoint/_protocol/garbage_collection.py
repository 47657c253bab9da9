"""Garbage collection: delete objects that no committed checkpoint needs.

The commit protocol never needs cleanup to stay correct, but interrupted or losing operations leave
objects behind. :func:`gc` (and :func:`agc`, its asyncio twin) finds them, by category:

``orphan_record``
    A record (and its writes) that the commit chain (:mod:`langgraph_s3_checkpoint._protocol.chain`) calls
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
    A run-index entry (``runs/{run}/...``, or a 0.1.x twin ``threads/{T}/r/...``) whose namespace is gone or holds
    no committed checkpoint of that run, nor the checkpoint the entry names (a run that only wrote pending writes to
    another run's checkpoint, resuming it, is indexed there: its entry stays while that checkpoint does, for
    ``delete_for_runs`` to take those writes out).
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

Which records are committed is decided by :class:`~langgraph_s3_checkpoint._protocol.chain.Chain`, as for every
reader: each namespace's ``c/`` listing is walked newest first and the records at or below the head are
read (``READ_BATCH`` at a time) for their chain link. Writes objects share their record's standing. A
record's link is in its body only, so the first gc reads every record; it then writes down what it found (a
*seal* per thread, :mod:`.seals`), and a later gc reads only the records committed since, while the sealed
ones are unchanged. The seal's key also says what the thread's listing shows once gc is done with it: gc walks
every thread in one flat listing (1,000 keys a page) and scans only the threads whose keys or ETags differ from
their seal's (:meth:`_Collector.threads`). So with nothing new, gc costs one LIST per 1,000 keys under
``threads/``, per 1,000 seals and per 1,000 run-index entries, and nothing per thread; a thread that changed costs
what it cost before, a LIST of its namespaces, of each namespace (one page holds up to 1,000 keys), of its run
entries and of its own keys, a GET of each head and of its seal, and a GET of each record committed since. Seals
only ever make gc keep more (see :mod:`.seals`).

Nothing younger than ``grace_seconds`` is deleted, judged by the object's LastModified against the
server's clock (the ``Date`` of the listing that showed it), so puts in flight are never touched: keep
the grace well above the longest a ``put`` can take. ORPHAN records are garbage at once, but the grace
applies to them too, for safety. Committed checkpoints are never deleted. Keys that are not the saver's
by :func:`.keys.classify`'s rule (an unrecognised key, a zero-byte folder marker ending in ``/``, anything
in a folder no id escapes to) are never deleted; the report counts them as ``foreign``. Where a record
cannot be read (damaged, or deleted since the listing by a concurrent ``prune``/``delete_for_runs``/
``delete_thread``), the namespace's remaining ORPHAN records, its blobs and its run-index entries are
left alone: what the damaged record committed cannot be judged.

gc is a plan (see :mod:`.checkpoint_plans`), so it runs through the saver's own I/O shell
(boto3 or the direct transport, or an in-process bucket): :func:`gc` blocks, :func:`agc` awaits. The threads
that changed are scanned :data:`.plans.SIDE_BY_SIDE` at a time (:func:`.plans.side_by_side`: a round trip carries the
next requests of each), so a gc over many threads costs round trips per group of threads, not per thread; what it
sends is the same. It streams every listing page by page: its memory is a page of the flat listing and, per thread
being scanned, one page, up to ``READ_BATCH`` record bodies, for the namespace being scanned the blob references and
run ids of its committed records (and of its seal), and a fixed 5 MiB of what the thread pass saw for the global pass
to judge the run index by (:class:`.gc_run_index.Sightings`).
"""

from __future__ import annotations

import collections
import copy
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import CorruptObjectError, InvalidConfigError
from . import seals
from .chain import Chain, Standing
from .gc_run_index import Sightings, global_runs, run_entries
from .gc_seals import Listed, SealKeeping, SealUse, ThreadListed
from .keys import COPYING, DELETING, KeyKind, Layout, classify, classify_in_namespace, escape, is_own_segment
from .plans import (
    DELETE_BATCH,
    READ_BATCH,
    SIDE_BY_SIDE,
    FolderKeys,
    age_cutoff,
    all_of,
    any_under,
    deletes,
    folder_by_folder,
    for_each_emitted,
    one,
    pages,
    side_by_side,
)
from .requests import (
    CREATE,
    Emit,
    Get,
    ListKeys,
    Page,
    Plan,
    Put,
    StoredObject,
)

if TYPE_CHECKING:
    from .checkpoint_plans import CheckpointPlans

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
    records_read: int = 0
    """Record bodies read to place them on their namespace's commit chain."""
    records_sealed: int = 0
    """Committed records known from gc's seals (:mod:`.seals`) without being read."""
    threads_unchanged: int = 0
    """Threads whose keys the listing showed as their seal's key says gc left them: nothing of them was read."""

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
    prefix: str = ""
    """The namespace's folder (``threads/{T}/ns/{N}/``)."""
    head_id: str | None = None
    garbage_records: set[str] = field(default_factory=set)
    """Checkpoint ids of the records gc found garbage (deleted now, or once past the grace)."""


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
    seal: SealUse | None = None
    """The namespace's seal from the last gc, while it may be used."""
    builder: seals.Builder | None = None
    """The namespace's new seal, built while its records are judged (not in a dry run)."""
    met_seal_head: bool = False
    """The chain walked from today's head met the seal's head as committed."""
    garbage_records: set[str] = field(default_factory=set)
    """Checkpoint ids of the records found garbage, deleted now or once past the grace (bounded by the garbage)."""

    def region_start(self, parsed: Sequence[Any]) -> int:
        """Where in a page of ``c/`` the sealed range starts: every key from there on is at or below the seal's
        ``top`` (ids only decrease), so the rest of the listing is in it too."""
        if self.seal is None:
            return len(parsed)
        if self.seal.usable is not None:
            return 0
        for i, p in enumerate(parsed):
            if p is not None and p.checkpoint_id <= self.seal.part.top:
                return i
        return len(parsed)

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


def _sub_page(page: Page, prefix: str) -> Page:
    """The keys of ``page`` under ``prefix``, with their dates, ETags and sizes."""
    chosen = [i for i, key in enumerate(page.keys) if key.startswith(prefix)]

    def pick(values: list[Any]) -> list[Any]:
        return [values[i] for i in chosen] if len(values) == len(page.keys) else []

    return Page(
        [page.keys[i] for i in chosen], [], None, pick(page.modified), pick(page.etags), pick(page.sizes), page.served
    )


def _size(page: Page, i: int) -> int:
    return page.sizes[i] if i < len(page.sizes) else 0


class _Collector(SealKeeping):
    def __init__(self, plans: CheckpointPlans, grace_seconds: float, dry_run: bool) -> None:
        self.codec = plans.codec
        self.root = plans.layout.prefix
        self.grace = grace_seconds
        self.report = GcReport(dry_run=dry_run, grace_seconds=grace_seconds)
        self.pending: list[tuple[str, str | None, int]] = []
        """Keys to delete with their category (``None``: uncounted companion) and size."""
        self.thread_kept = 0
        """Objects of the thread being scanned that stay."""
        self.seal_cursor = seals.Cursor(self.root)
        self.old_seal: dict[str, seals.Part] = {}
        """The seal of the thread being scanned, by namespace segment, as the last gc left it."""
        self.new_seal: dict[str, seals.Part] = {}
        self.seals_found: list[seals.SealKey] = []
        """The seals listed for the thread being scanned."""
        self.seal_read: str | None = None
        """The key of the seal ``old_seal`` was read from."""
        self.stale_seals: list[str] = []
        """Seals to delete (their thread is gone, or a newer one replaced them), shared by every thread's scan."""
        self.sightings = Sightings()
        """What the thread pass saw, for the global pass (:func:`.gc_run_index.global_runs`)."""
        self.thread_prefix = ""
        self.summary: seals.Summary | None = None
        """What the thread's scan listed of its keys, less what it deleted: what the next listing shows if nothing
        changes (:class:`.seals.Summary`); ``None`` outside a thread's scan."""
        self.unsettled_thread = False
        """Whether the thread's scan left anything for a later gc to judge again although nothing changes: garbage
        kept for its age, a record or head it could not read, a namespace whose chain it could not follow, a head
        that appeared meanwhile, a ``name`` put back. Its seal then says nothing of its listing."""

    # -- deciding and deleting ------------------------------------------------------------------------
    def doom(
        self, page: Page, i: int, reason: str, old: Callable[[int], bool], walk: _Walk | None = None, also: str = ""
    ) -> bool:
        """Queue the ``i``-th key of ``page`` (and ``also``, uncounted) for deletion unless it is too young."""
        if not old(i):
            self.report.young += 1
            self.unsettled_thread = True
            self.keep(walk)
            return False
        self.pending.append((page.keys[i], reason, _size(page, i)))
        if self.summary is not None and page.keys[i].startswith(self.thread_prefix):
            self.summary.remove(page.keys[i][len(self.thread_prefix) :], page.etags[i] if i < len(page.etags) else None)
        if also:
            self.pending.append((also, None, 0))
        return True

    def keep(self, walk: _Walk | None = None) -> None:
        self.thread_kept += 1
        if walk is not None:
            walk.kept += 1

    def listed(self, page: Page) -> None:
        """Note keys of the thread being scanned that its scan lists (:attr:`summary`)."""
        if self.summary is not None:
            self.summary.add_page(self.thread_prefix, page)

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
            for key, _, _ in doomed:
                self.sightings.doomed.add(key)
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
                yield [Put(key, body.body, mode=CREATE, expires=False)]
                self.report.deleted[reason] -= 1
                self.unsettled_thread = True

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
        yield from self.threads()
        yield from global_runs(self)

        probes = f"{self.root}_setup/probe-"

        def setup_page(page: Page) -> Plan[None]:
            self.report.scanned += len(page.keys)
            old = age_cutoff(page, self.grace)
            for i, key in enumerate(page.keys):
                if key.startswith(probes) and not key.endswith("/"):
                    self.doom(page, i, "setup_probe", old)
                else:
                    self.foreign()
            yield from self.flush_if_full()

        yield from for_each_emitted(pages(f"{self.root}_setup/"), setup_page)
        yield from self.flush()
        return self.report

    def threads(self) -> Plan[None]:
        """Walk every thread's keys in one flat listing (1,000 keys a page, thread after thread) in step with the
        seals: a thread whose keys are those its seal's key says gc left costs nothing more; the others are
        scanned :data:`.plans.SIDE_BY_SIDE` at a time, each as before (:meth:`thread`)."""
        threads_root = f"{self.root}threads/"
        changed: list[tuple[str, str, list[seals.SealKey]]] = []
        listed = Listed()

        def walk(item: Any) -> Plan[None]:
            if isinstance(item, FolderKeys):
                if item.segment is None or not is_own_segment(item.segment):
                    # Nothing of ours lives directly under threads/, nor in a folder no thread id escapes to.
                    self.report.scanned += len(item.page.keys)
                    self.report.foreign += len(item.page.keys)
                else:
                    listed.note(f"{threads_root}{item.segment}/", item.segment, item.page, self.sightings)
            elif is_own_segment(item.segment):
                # The seals are listed in step with the threads, so the cursor moves in thread order, here.
                found, passed = yield from self.seal_cursor.upto(item.segment)
                self.stale_seals.extend(passed)
                if self.unchanged(item.segment, listed.take(), found):
                    return
                changed.append((f"{threads_root}{item.segment}/", item.segment, found))
                if len(changed) >= SIDE_BY_SIDE:
                    yield from self.scan_threads(changed)
            if len(self.stale_seals) >= DELETE_BATCH:
                yield from self.remove_seals()

        yield from for_each_emitted(folder_by_folder(threads_root), walk)
        yield from self.scan_threads(changed)
        _, passed = yield from self.seal_cursor.upto(None)
        self.stale_seals.extend(passed)
        yield from self.remove_seals()
        self.report.foreign += self.seal_cursor.foreign

    def unchanged(self, segment: str, thread: ThreadListed, found: list[seals.SealKey]) -> bool:
        """Whether a thread needs no scan: it holds nothing gc judges (its seals go), or its keys are exactly those
        its last gc left, as a seal's key says (:class:`.seals.Summary`). Skipping a thread only ever keeps."""
        if thread.summary.count == 0:
            self.stale_seals.extend(seal.key for seal in found)
            return True
        if thread.summary.digest is None or all(seal.listed != thread.summary.digest for seal in found):
            return False
        self.report.scanned += thread.scanned
        self.report.foreign += thread.foreign
        self.report.records_sealed += thread.records
        self.report.threads_unchanged += 1
        for ns_segment in thread.heads:
            # Unchanged since its last scan, which judged its run-index entries: they stay as they were.
            self.sightings.namespace(segment, ns_segment, committed=True, run_segments=None)
        return True

    def scan_threads(self, changed: list[tuple[str, str, list[seals.SealKey]]]) -> Plan[None]:
        """Scan the threads listed (and empty the list), side by side."""
        group = changed[:]
        del changed[:]
        if group:
            yield from side_by_side([self.for_one_thread().thread(*thread) for thread in group])

    def foreign_folder(self, prefix: str) -> Plan[None]:
        """Count the keys of a folder whose name no id escapes to (``threads/a.b/``, ``ns/%zz/``): whatever
        they look like inside, they are not the saver's."""

        def foreign_page(page: Page) -> Plan[None]:
            self.report.scanned += len(page.keys)
            self.report.foreign += len(page.keys)
            self.listed(page)
            yield from ()

        yield from for_each_emitted(pages(prefix), foreign_page)

    def for_one_thread(self) -> _Collector:
        """The collector of one thread's scan: the report, the run entries seen and the settings are shared with
        every other thread's; what is queued for deletion, the objects that stay and the seal are its own. So
        threads can be scanned :func:`.plans.side_by_side` (what one thread's scan decides never depends on
        another's), and what a scan does with its own queue (flush it, or drop it when a headless namespace
        turns out to have been committed meanwhile) touches only its thread."""
        scan = copy.copy(self)
        scan.pending = []
        scan.thread_kept = 0
        scan.old_seal, scan.new_seal = {}, {}
        scan.seals_found, scan.seal_read = [], None
        scan.summary, scan.unsettled_thread = None, False
        return scan

    def thread(self, prefix: str, segment: str, found: list[seals.SealKey]) -> Plan[None]:
        """Scan one thread (``found``: the seals the listing of seals shows for it); run on :meth:`for_one_thread`."""
        self.thread_prefix, self.summary, self.seals_found = prefix, seals.Summary(), found
        if found:
            # Any seal of the thread is safe to use (each is checked against the listing, seals.py); the newest
            # is likely to hold most.
            newest = max(found, key=lambda seal: (seal.modified is not None, seal.modified or 0, seal.key))
            yield from self.read_seal(newest.key)
        namespaces = yield from self.namespaces(prefix)
        for ns_segment, info in namespaces.items():
            self.sightings.namespace(segment, ns_segment, info.committed, info.run_segments)
        yield from run_entries(self, prefix, namespaces)
        # Deleted before the thread's own keys are judged: the ``deleting`` marker must outlive what it
        # condemns, even if a batch fails part-way.
        yield from self.flush()
        # Listed last, once every other object of the thread has been judged ("copying", "deleting" and
        # "name" sort before "ns/" and "r/").
        yield from self.thread_keys(prefix, unsettled=any(info.unsettled for info in namespaces.values()))
        yield from self.flush()
        yield from self.write_seal(segment)

    def namespaces(self, prefix: str) -> Plan[dict[str, _Namespace]]:
        """Scan each namespace of a thread; what was found in each, by namespace segment."""
        namespaces: dict[str, _Namespace] = {}
        ns_root = f"{prefix}ns/"

        def ns_page(page: Page) -> Plan[None]:
            self.report.scanned += len(page.keys)
            self.listed(page)
            for _ in page.keys:
                self.foreign()  # nothing of ours lives directly under ns/
            for ns_prefix in page.prefixes:
                segment = ns_prefix[len(ns_root) : -1]
                if is_own_segment(segment):
                    namespaces[segment] = yield from self.namespace(ns_prefix, segment)
                else:
                    yield from self.foreign_folder(ns_prefix)

        yield from for_each_emitted(pages(ns_root, delimiter="/"), ns_page)
        return namespaces

    def thread_keys(self, prefix: str, *, unsettled: bool) -> Plan[None]:
        """Judge the keys directly under a thread, once everything else was judged: its ``name`` object and
        its markers. ``unsettled``: objects of a namespace without a head stay (what a marker protects)."""

        def top_page(page: Page) -> Plan[None]:
            self.report.scanned += len(page.keys)
            self.listed(page)
            old = age_cutoff(page, self.grace)
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

    def start_walk(self, prefix: str, segment: str) -> Plan[_Walk | None]:
        """Read a namespace's head and start walking its chain from it; ``None`` when the head cannot be read
        (what it commits cannot be judged: the namespace is left as it is)."""
        head_key = Layout.head_in(prefix)
        head = yield from one(Get(head_key))
        if head is None:
            # Nothing is committed here. Flush first, so that everything queued while this namespace is
            # scanned is its own and can be dropped if a head appears meanwhile.
            yield from self.flush()
            return _Walk(prefix, Chain.without_head())
        try:
            head_id, head_previous, deleted = self.codec.peek_chain(head_key, head.body)
            metadata, _, refs = self.codec.peek_record(head_key, head.body)
        except CorruptObjectError:
            self.report.unreadable.append(head_key)
            self.unsettled_thread = True
            self.keep()
            if segment in self.old_seal:
                self.new_seal[segment] = self.old_seal[segment]
            return None
        walk = _Walk(prefix, Chain.from_head(head_id, head_previous, deleted))
        self.references(walk, metadata, refs)
        walk.seal = self.seal_for(segment, walk)
        return walk

    def namespace(self, prefix: str, segment: str) -> Plan[_Namespace]:
        walk = yield from self.start_walk(prefix, segment)
        if walk is None:
            return _Namespace(committed=True, run_segments=None)
        guard = walk if walk.headless else None
        yield from self.scan(walk, guard)
        if guard is not None:
            yield from self.flush(guard)
        if walk.aborted or not (walk.chain_sure and walk.refs_known):
            self.unsettled_thread = True
        if guard is not None:
            if walk.aborted:
                return _Namespace(committed=True, run_segments=None)
            return _Namespace(committed=False, run_segments=set(), unsettled=walk.kept > 0)
        self.seal_namespace(segment, walk)
        known = walk.runs if walk.chain_sure and walk.refs_known else None
        return _Namespace(
            committed=True,
            run_segments=known,
            prefix=prefix,
            head_id=walk.chain.head_id,
            garbage_records=walk.garbage_records,
        )

    def scan(self, walk: _Walk, guard: _Walk | None) -> Plan[None]:
        """Judge a namespace's keys: its records (``c/``) first, newest first, then the rest (large values, the
        head, its ``name``, a marker), which the records' references decide."""

        def records_page(page: Page) -> Plan[bool]:
            yield from self.records_page(walk, page)
            if walk.aborted:
                return False
            yield from self.flush_if_full(guard)
            return not walk.aborted

        def rest_page(page: Page) -> Plan[bool]:
            if not walk.aborted:
                self.rest_page(walk, page)
                yield from self.flush_if_full(guard)
            return not walk.aborted

        first = yield from one(ListKeys(walk.prefix))
        if first.token is None:
            # The whole namespace in one page (the common case): its records, then the rest, from it.
            records = _sub_page(first, walk.records)
            if walk.seal is not None:
                walk.seal.check.page(records)
            if (yield from records_page(records)):
                yield from rest_page(first)
            return
        if walk.seal is not None:
            yield from self.check_seal(walk.seal, walk.records)
        yield from for_each_emitted(pages(walk.records), records_page)
        if not walk.aborted:
            yield from for_each_emitted(_skipping(walk.prefix, walk.records), rest_page)

    def references(self, walk: _Walk, metadata: Any, refs: dict[str, str]) -> tuple[list[str], str | None]:
        """Note the blobs and the run of a committed record (or the head); returns them (blob keys relative to
        the namespace, the escaped run id)."""
        relative = [f"b/{escape(ch)}/{escape(version)}" for ch, version in refs.items()]
        walk.referenced.update(f"{walk.prefix}{ref}" for ref in relative)
        run_id = metadata.get("run_id") if isinstance(metadata, dict) else None
        run = None if run_id is None else escape(str(run_id))
        if run is not None and walk.runs is not None:
            walk.runs.add(run)
        return relative, run

    def records_page(self, walk: _Walk, page: Page) -> Plan[None]:
        """Judge one page of a namespace's ``c/`` listing (newest first) by the chain's rule, reading the
        records that only their link can place (at or below the head) ``READ_BATCH`` at a time, except those a
        seal that holds says are committed."""
        self.report.scanned += len(page.keys)
        self.listed(page)
        if walk.builder is None and walk.chain.head_id is not None and not self.report.dry_run and page.served:
            cutoff = page.served.timestamp() - max(self.grace, seals.MARGIN_SECONDS)
            walk.builder = seals.Builder(walk.records, cutoff)
        parsed = [Layout.parse_checkpoint_key(walk.records, key) for key in page.keys]
        split = walk.region_start(parsed)
        yield from self.judge_keys(walk, page, parsed, range(split))
        if split < len(parsed):
            first = parsed[split]
            assert walk.seal is not None and first is not None
            if walk.seal.usable is None:
                self.enter_sealed_range(walk, first.checkpoint_id)
            if walk.seal.usable:
                self.judge_sealed(walk, page, parsed, range(split, len(parsed)))
            else:
                yield from self.judge_keys(walk, page, parsed, range(split, len(parsed)))

    def own_keys(self, parsed: Sequence[Any], indices: range) -> Iterator[tuple[int, Any]]:
        """The keys of a ``c/`` page at ``indices`` that are the saver's, with what each is; the others are counted
        as foreign."""
        for i in indices:
            p = parsed[i]
            if p is None:
                self.foreign()
            else:
                yield i, p

    def judge_keys(self, walk: _Walk, page: Page, parsed: Sequence[Any], indices: range) -> Plan[None]:
        """Judge keys of a ``c/`` page by the chain's rule, reading records at or below the head."""
        old = age_cutoff(page, self.grace)
        chain = walk.chain
        reads = _BatchedReads(
            page.keys,
            [
                i
                for i in indices
                if (p := parsed[i]) is not None
                and p.is_record
                and chain.decided(p.checkpoint_id) is not Standing.PENDING
            ],
        )
        for i, p in self.own_keys(parsed, indices):
            cid = p.checkpoint_id
            reason: str | None
            accounted = False
            """Whether the record went into the new seal or goes now: otherwise it stays unsealed."""
            if not p.is_record:
                reason = _writes_reason(walk, cid)
            elif chain.decided(cid) is Standing.PENDING:
                reason = walk.pending_reason  # newer than the head, or no head: may still commit, goes by age
            else:
                obj = yield from reads.body(i)
                reason, accounted = self.judge_record(walk, page, i, cid, obj)
            if p.is_record:
                walk.current = (cid, reason)
            if reason is None:
                self.keep(walk)
            else:
                accounted = self.doom(page, i, reason, old, walk)
                if p.is_record:
                    walk.garbage_records.add(cid)
            if p.is_record and not accounted and walk.builder is not None:
                walk.builder.stays(cid)

    def judge_sealed(self, walk: _Walk, page: Page, parsed: Sequence[Any], indices: range) -> None:
        """Judge keys of a ``c/`` page in the range of a seal that holds: its records are committed, unread."""
        use = walk.seal
        assert use is not None
        old = age_cutoff(page, self.grace)
        for i, p in self.own_keys(parsed, indices):
            cid = p.checkpoint_id
            reason: str | None = None
            if not p.is_record:
                reason = _writes_reason(walk, cid)
            else:
                walk.current = (cid, None)
                modified = page.modified[i] if i < len(page.modified) else None
                etag = page.etags[i] if i < len(page.etags) else None
                if modified is not None and etag is not None and modified.timestamp() < use.part.cutoff:
                    self.report.records_sealed += 1
                    if walk.builder is not None:
                        walk.builder.committed(page.keys[i], etag, modified, cid)
                else:
                    # Written into the sealed range after the seal was checked (a fork, a restore): not judged,
                    # and what it references is unknown, so no large value of the namespace goes.
                    walk.chain_sure = walk.refs_known = False
                    if walk.builder is not None:
                        walk.builder.stays(cid)
            if reason is None:
                self.keep(walk)
            else:
                self.doom(page, i, reason, old, walk)

    def judge_record(
        self, walk: _Walk, page: Page, i: int, cid: str, obj: StoredObject | None
    ) -> tuple[str | None, bool]:
        """The category of the ``i``-th key of ``page``, a record at or below the head (``None``: it stays), by
        the chain's rule; and whether it went into the namespace's new seal."""
        key = page.keys[i]
        if obj is None:
            # Deleted since the listing (a concurrent prune, delete_for_runs or delete_thread): it may
            # have been a link, so ORPHAN verdicts below it, and blob references, are no longer safe.
            walk.chain_sure = walk.refs_known = False
            return None, False
        self.report.records_read += 1
        try:
            previous, detached = self.codec.peek_link(key, obj.body)
        except CorruptObjectError:
            self.report.unreadable.append(key)
            walk.chain_sure = walk.refs_known = False
            return None, False
        standing = walk.chain.standing(cid, previous, detached)
        if standing is Standing.COMMITTED:
            try:
                metadata, _, refs = self.codec.peek_record(key, obj.body)
            except CorruptObjectError:
                self.report.unreadable.append(key)
                walk.refs_known = False
                return None, False
            relative, run = self.references(walk, metadata, refs)
            if walk.seal is not None and cid == walk.seal.part.head:
                walk.met_seal_head = True
            sealed = False
            if walk.builder is not None:
                etag = page.etags[i] if i < len(page.etags) else None
                modified = page.modified[i] if i < len(page.modified) else None
                sealed = walk.builder.committed(key, etag, modified, cid, relative)
                if sealed and run is not None:
                    walk.builder.runs.add(run)
            return None, sealed
        if standing is Standing.ORPHAN:
            return ("orphan_record" if walk.chain_sure else None), False
        return "uncommitted_record", False

    def rest_page(self, walk: _Walk, page: Page) -> None:
        """Judge the keys of a namespace outside ``c/``: blobs, the head, the ``name`` object."""
        old = age_cutoff(page, self.grace)
        for i, key in enumerate(page.keys):
            if key.startswith(walk.records):
                continue  # judged by the walk over c/
            self.report.scanned += 1
            if self.summary is not None:
                self.summary.add(key[len(self.thread_prefix) :], page.etags[i] if i < len(page.etags) else None)
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


_MARKER_REASON = {DELETING: "unfinished_delete", COPYING: "unfinished_copy"}
"""The category of a thread's marker, by its name."""


def _writes_reason(walk: _Walk, cid: str) -> str | None:
    """The category of a writes object (``None``: it stays): its record's when that was listed just
    before it, otherwise the chain's verdict on a checkpoint whose record is missing."""
    if walk.current is not None and walk.current[0] == cid:
        return walk.current[1]  # writes share their record's standing
    standing = walk.chain.writes_without_record(cid)
    if standing is Standing.PENDING:
        return walk.pending_reason  # no record (yet): newer than the head, or no head at all
    return None if standing is Standing.COMMITTED else "orphan_writes"


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


def gc_plan(plans: CheckpointPlans, grace_seconds: float, dry_run: bool) -> Plan[GcReport]:
    """The plan of one gc pass over a saver's prefix (run by :func:`langgraph_s3_checkpoint.gc.gc`)."""
    if grace_seconds < 0:
        raise InvalidConfigError(f"grace_seconds must be >= 0, got {grace_seconds!r}")
    return _Collector(plans, grace_seconds, dry_run).run()


__all__ = ["GcReport", "gc_plan"]
