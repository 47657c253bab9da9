"""Operator plans behind the ``langgraph-s3`` command: thread statistics, export/import, integrity checks.

Like :mod:`.checkpoint_plans`, every operation is a plan (a generator yielding request batches and ``Emit``-ting
results), so it runs on the saver's own I/O shell (``saver.bucket_io``) with the same credentials,
SSE settings and thread pool. Listings carry each object's size and modification time.

What each kind of key under a thread is is decided in one place, :func:`.keys.classify`, which the
statistics, export, the importer, the verifier and ``copy_thread`` share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from ..errors import CorruptObjectError, DecryptionError, NewerFormatError, TargetThreadExistsError, ThreadChangedError
from . import keys
from .chain import Chain
from .codec import Codec, Record
from .keys import COPIED, KeyKind, Layout, classify, escape, filed_checkpoint_id, is_digest, is_own_segment
from .plans import (
    READ_BATCH,
    FolderEnd,
    FolderKeys,
    all_of,
    all_pages,
    any_under,
    chunks,
    folder_by_folder,
    for_each_emitted,
    id_behind,
    mark,
    one,
    own_folders_under,
)
from .repair import repair_needed
from .requests import (
    CREATE,
    PRECONDITION_FAILED,
    DeleteIfMatch,
    Emit,
    Get,
    ListKeys,
    Put,
    StoredObject,
)
from .run_index import CARRYING, CarriedRuns

T = TypeVar("T")
OpsPlan = Generator[Any, Any, T]
"""A plan of the operator tools (run it with ``saver.bucket_io``)."""

EXPORT_FORMAT = "langgraph-s3-thread"
EXPORT_VERSION = 1


# ------------------------------------------------------------------------------------------------
# Small plan pieces
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Listed:
    key: str
    size: int
    modified: datetime


def _stat_listing(prefix: str) -> OpsPlan[list[_Listed]]:
    """Every object under ``prefix`` with its size and modification time."""
    objects: list[_Listed] = []
    for page in (yield from all_pages(prefix)):
        objects.extend(map(_Listed, page.keys, page.sizes, page.modified))
    return objects


UNNAMED = (
    "this thread's id is too long to be a key segment, and its name object, which holds the id, is missing or "
    "damaged: the thread cannot be listed, verified, expired or rolled back by run until it is written again "
    "(repair_thread with the thread's id, or `langgraph-s3 repair THREAD_ID`)"
)


def thread_ids(layout: Layout, unnamed: list[Problem] | None = None) -> OpsPlan[None]:
    """Emit the id of every thread under the prefix, in key order (possibly some just deleted); folders that
    are not a thread's (:func:`.keys.is_own_segment`) are skipped. A thread whose long id cannot be read back
    (:data:`UNNAMED`) is not emitted: ``unnamed`` gets a :class:`Problem` naming its ``name`` key."""
    root = layout.threads_root
    token: str | None = None
    while True:
        page = yield from one(ListKeys(root, delimiter="/", token=token))
        for prefix in page.prefixes:
            segment = layout.segment_after(prefix, root)
            if not is_own_segment(segment):
                continue
            thread_id = yield from id_behind(segment, prefix)
            if thread_id is not None:
                yield Emit(thread_id)
            elif unnamed is not None:
                unnamed.append(Problem(f"{prefix}name", UNNAMED))
        token = page.token
        if token is None:
            return


def thread_exists(layout: Layout, thread_id: str) -> OpsPlan[bool]:
    return (yield from any_under(layout.thread(thread_id)))


# ------------------------------------------------------------------------------------------------
# What a key is
# ------------------------------------------------------------------------------------------------
def namespace_prefix(thread_prefix: str, key: str) -> str:
    """The namespace prefix (``{thread_prefix}ns/{N}/``) of a head, record, write or blob key."""
    ns_segment = key[len(thread_prefix) :].split("/")[1]
    return f"{thread_prefix}ns/{ns_segment}/"


def is_safe_relative(relative: str) -> bool:
    """Whether an archive member may be written under a thread prefix (no escaping it, no odd paths)."""
    parts = relative.split("/")
    return all(p and p not in (".", "..") for p in parts) and classify(relative) not in (
        KeyKind.UNKNOWN,
        KeyKind.MARKER,
    )


# ------------------------------------------------------------------------------------------------
# Statistics
# ------------------------------------------------------------------------------------------------
@dataclass
class ThreadStats:
    thread_id: str
    namespaces: int = 0
    checkpoints: int = 0
    """Checkpoint records, committed or not (a put that lost a race leaves nothing behind)."""
    writes: int = 0
    blobs: int = 0
    objects: int = 0
    bytes: int = 0
    last_modified: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["last_modified"] = self.last_modified.isoformat() if self.last_modified else None
        return data


_COUNTED = {
    KeyKind.HEAD: "namespaces",
    KeyKind.RECORD: "checkpoints",
    KeyKind.WRITE: "writes",
    KeyKind.BLOB: "blobs",
}


def _count(stats: ThreadStats, prefix: str, objects: Iterable[_Listed]) -> None:
    """Add objects of the thread at ``prefix`` to its statistics."""
    for info in objects:
        kind = classify(info.key[len(prefix) :])
        if kind in _COUNTED:
            setattr(stats, _COUNTED[kind], getattr(stats, _COUNTED[kind]) + 1)
        stats.objects += 1
        stats.bytes += info.size
        if stats.last_modified is None or info.modified > stats.last_modified:
            stats.last_modified = info.modified


def thread_stats(layout: Layout, thread_id: str) -> OpsPlan[ThreadStats]:
    prefix = layout.thread(thread_id)
    stats = ThreadStats(thread_id)
    _count(stats, prefix, (yield from _stat_listing(prefix)))
    return stats


def all_thread_stats(layout: Layout) -> OpsPlan[None]:
    """Emit :class:`ThreadStats` for every thread with an object, in key order, from one flat listing of every thread
    (:func:`.plans.folder_by_folder`: 1,000 keys a page, each with its size and date), nothing per thread but the GET
    of the ``name`` of a thread whose id is a digest. A thread whose long id cannot be read back is left out, as
    :func:`thread_ids` does."""
    root = layout.threads_root
    counted = ThreadStats("")

    def walk(item: FolderKeys | FolderEnd) -> OpsPlan[None]:
        nonlocal counted
        if item.segment is None or not is_own_segment(item.segment):
            return  # keys in no thread's folder, or in a folder no thread id escapes to
        prefix = f"{root}{item.segment}/"
        if isinstance(item, FolderKeys):
            page = item.page
            _count(counted, prefix, map(_Listed, page.keys, page.sizes, page.modified))
            return
        stats, counted = counted, ThreadStats("")
        thread_id = yield from id_behind(item.segment, prefix)
        if thread_id is not None and stats.objects:
            yield Emit(dataclasses.replace(stats, thread_id=thread_id))

    yield from for_each_emitted(folder_by_folder(root), walk)


# ------------------------------------------------------------------------------------------------
# Export and import
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Exported:
    relative: str
    body: bytes = field(repr=False)


def export_thread(layout: Layout, codec: Codec, thread_id: str) -> OpsPlan[int]:
    """Emit every object of a thread as :class:`Exported` (key relative to the thread), heads last.

    Heads are read before anything else, as ``copy_thread`` does: a checkpoint committed while the
    export runs may add records, but they stay invisible behind the snapshot heads in the archive.
    An archive never references a value it lacks: a prune or rollback running meanwhile may delete a large value
    that a snapshot head, or a record at or below it, references (the head moved on, the value went with the
    checkpoint it was last kept for); :class:`_ArchiveReferences` checks them against what was exported, and a
    missing one raises :class:`ThreadChangedError` before the heads are emitted, so an archive cut short there
    imports as nothing. Returns the number of objects emitted (0 if the thread does not exist).
    """
    prefix = layout.thread(thread_id)
    namespaces = yield from own_folders_under(layout.namespaces(thread_id))
    heads = (yield from all_of([Get(Layout.head_in(p)) for p in namespaces])) if namespaces else []
    references = _ArchiveReferences(codec, prefix)
    for ns_prefix, head in zip(namespaces, heads, strict=True):
        if head is not None:
            references.note_head(ns_prefix, head.body)
    count = 0
    for page in (yield from all_pages(prefix)):
        keys = [k for k in page.keys if classify(k[len(prefix) :]) in COPIED]
        for chunk in chunks(keys, READ_BATCH):
            bodies = yield from all_of([Get(k) for k in chunk])
            for key, obj in zip(chunk, bodies, strict=True):
                if obj is not None:  # deleted since it was listed (pruned, or a run rolled back)
                    references.note_exported(key, obj.body)
                    yield Emit(Exported(key[len(prefix) :], obj.body))
                    count += 1
    references.check(thread_id)
    last = [
        *references.missing_head_records(namespaces, heads),
        *(Exported(Layout.head_in(p)[len(prefix) :], h.body) for p, h in zip(namespaces, heads, strict=True) if h),
    ]
    for item in last:
        yield Emit(item)
    return count + len(last)


class _ArchiveReferences:
    """The large values an archive's visible checkpoints reference, and the ones it holds.

    Visible: the snapshot heads and, in each namespace, the records its head's chain does not call pending (at or
    below the head, :meth:`.chain.Chain.pending`). A record committed after the snapshot is invisible in the
    archive, and so are its values. A head or record that cannot be read (damaged, newer) is exported as it is and
    references nothing here: ``verify`` names it.
    """

    def __init__(self, codec: Codec, thread_prefix: str) -> None:
        self.codec = codec
        self.thread_prefix = thread_prefix
        self.needed: dict[str, str] = {}
        """Large value key -> a head or record that references it."""
        self.head_record: dict[str, str] = {}
        """Namespace folder -> the key of its snapshot head's record."""
        self.chains: dict[str, Chain] = {}
        """Namespace folder -> the commit chain of its snapshot head: which records are visible in the archive."""
        self.exported: set[str] = set()
        """Keys of the large values and records exported."""

    def note_head(self, ns_prefix: str, body: bytes) -> None:
        head_key = Layout.head_in(ns_prefix)
        if self._note(ns_prefix, head_key, body):
            head_id = self.codec.peek_head_id(head_key, body)
            self.head_record[ns_prefix] = Layout.record_in(ns_prefix, head_id)
            self.chains[ns_prefix] = Chain.from_head(head_id, None)

    def note_exported(self, key: str, body: bytes) -> None:
        kind = classify(key[len(self.thread_prefix) :])
        if kind in (KeyKind.BLOB, KeyKind.RECORD):
            self.exported.add(key)
        if kind is KeyKind.RECORD:
            ns_prefix = namespace_prefix(self.thread_prefix, key)
            chain, checkpoint_id = self.chains.get(ns_prefix), filed_checkpoint_id(key)
            if chain is not None and checkpoint_id is not None and not chain.pending(checkpoint_id):
                self._note(ns_prefix, key, body)

    def _note(self, ns_prefix: str, key: str, body: bytes) -> bool:
        try:
            refs = self.codec.peek_blobs(key, body)
        except (CorruptObjectError, NewerFormatError):
            return False
        for channel, version in refs.items():
            self.needed.setdefault(Layout.blob_in(ns_prefix, channel, version), key)
        return True

    def missing_head_records(self, namespaces: list[str], heads: list[StoredObject | None]) -> list[Exported]:
        """The records of snapshot heads that the archive lacks (deleted meanwhile by a prune after the head moved
        on, or never landed), each from its head, which is a copy of it: the archive carries them, as the latest
        read restores them."""
        missing = []
        for ns_prefix, head in zip(namespaces, heads, strict=True):
            record_key = self.head_record.get(ns_prefix)
            if head is not None and record_key is not None and record_key not in self.exported:
                missing.append(Exported(record_key[len(self.thread_prefix) :], head.body))
        return missing

    def check(self, thread_id: str) -> None:
        missing = sorted(set(self.needed) - self.exported)
        if missing:
            more = f", and {len(missing) - 1} more" if len(missing) > 1 else ""
            raise ThreadChangedError(
                f"thread {thread_id!r} changed while it was exported: {missing[0]!r}, a large value that "
                f"{self.needed[missing[0]]!r} references, was deleted meanwhile (a prune or a rollback){more}. "
                "The archive would not read; export again."
            )


def import_thread(layout: Layout, codec: Codec, thread_id: str, objects: Iterable[Exported]) -> OpsPlan[int]:
    """Write exported objects under ``thread_id``; heads last, so the thread appears complete or not at all.

    Refuses (:class:`TargetThreadExistsError`) when the thread already has objects. Returns the number
    of objects written.
    """
    if (yield from thread_exists(layout, thread_id)):
        raise TargetThreadExistsError(
            f"thread {thread_id!r} already exists; delete it first or import under another id (--thread)"
        )
    prefix = layout.thread(thread_id)
    segment = escape(thread_id)
    target = _MarkedTarget(layout.copying(thread_id))
    carried = CarriedRuns(codec)
    heads: list[Put] = []
    batch: list[Put] = []
    written = 0
    for item in objects:
        kind = _archived_kind(item)
        key = prefix + item.relative
        if kind == KeyKind.THREAD_NAME:
            continue  # rewritten below for the new id
        if kind == KeyKind.HEAD:
            heads.append(Put(key, item.body, mode=CREATE))
            continue
        if kind in CARRYING:
            carried.note(key, item.relative, kind, item.body)
        # Unconditional, like copy_thread's copies: the emptiness check and the conditional heads guard the
        # thread, and a write key creates its record's "directory" on filer-backed servers, which an
        # If-None-Match PUT of the record itself would then see as an existing object.
        batch.append(Put(key, item.body))
        written += 1
        if len(batch) >= READ_BATCH:
            yield from target.put_all(batch)
            batch = []
    batch.extend(carried.entries(layout, segment))  # the run index, before the heads commit the thread
    if is_digest(segment):
        batch.append(Put(layout.thread_name(thread_id), thread_id.encode("utf-8", "surrogatepass")))
    if batch:
        yield from target.put_all(batch)
    if heads:
        yield from target.put_all(list(heads))
        written += len(heads)
    yield from target.unmark()
    return written


@dataclass
class _MarkedTarget:
    """An import's thread, marked ``copying`` from its first write until its heads landed. Kept if the import
    dies (or is refused) before then: the records written so far are nobody's history, and repair must not
    make them one (as for a ``copy_thread``, whose marker this is). An archive refused at its first member
    writes nothing, not even the marker."""

    marker: str
    removal: DeleteIfMatch | None = None

    def put_all(self, puts: list[Put]) -> OpsPlan[None]:
        if self.removal is None:
            self.removal = yield from mark(self.marker, "import_thread")
        yield from _put_all(puts)

    def unmark(self) -> OpsPlan[None]:
        if self.removal is not None:
            yield [self.removal]


def _archived_kind(item: Exported) -> KeyKind:
    """What an archived object is (:func:`classify`); an object outside a thread's layout is an error."""
    if not is_safe_relative(item.relative):
        raise CorruptObjectError(item.relative, "the archive holds a key that is not part of a thread")
    return classify(item.relative)


def _put_all(puts: list[Put]) -> OpsPlan[None]:
    replies = yield from all_of(puts)
    for put, reply in zip(puts, replies, strict=True):
        if reply is PRECONDITION_FAILED:
            raise TargetThreadExistsError(f"{put.key!r} appeared while importing: another writer uses this thread")


# ------------------------------------------------------------------------------------------------
# Migration out of the bucket
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WriteOrigin:
    """Where one pending write a reader sees came from: what ``get_tuple`` leaves out of its pending writes."""

    task_id: str
    idx: int
    channel: str
    task_path: str


def write_origins(
    layout: Layout, codec: Codec, thread_id: str, checkpoint_ns: str, checkpoint_id: str
) -> OpsPlan[list[WriteOrigin]]:
    """The task, index, channel and task path of every write a reader sees on one checkpoint (values left encoded).

    A migration to another saver reads the values with ``get_tuple`` and needs the task paths beside them:
    readers order a checkpoint's writes, and ``get_delta_channel_history`` replays them, by
    ``writes_sort_key(task_path, task_id, idx)``. One LIST of the checkpoint's writes folder and one GET per task.
    """
    thread_prefix = layout.thread(thread_id)
    folder = layout.writes(thread_id, checkpoint_ns, checkpoint_id)
    keys = [
        key
        for page in (yield from all_pages(folder))
        for key in page.keys
        if classify(key[len(thread_prefix) :]) is KeyKind.WRITE
    ]
    origins: list[WriteOrigin] = []
    for chunk in chunks(keys, READ_BATCH):
        bodies = yield from all_of([Get(k) for k in chunk])
        for key, obj in zip(chunk, bodies, strict=True):
            if obj is not None:  # taken out since it was listed (a rollback)
                task = codec.peek_task_writes(key, obj.body)
                origins.extend(WriteOrigin(task.task_id, w.idx, w.channel, w.path) for w in task.visible())
    return origins


# ------------------------------------------------------------------------------------------------
# Integrity
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Problem:
    key: str
    problem: str
    undecryptable: bool = False
    """The object is encrypted and this serializer has no key or another key: intact, not damaged."""


@dataclass(frozen=True)
class Checked:
    """Progress: this many more objects were read and decoded."""

    count: int


def verify_thread(layout: Layout, codec: Codec, thread_id: str) -> OpsPlan[int]:
    """Emit a :class:`Problem` for every object of the thread that does not decode or is missing.

    Checks that every head and record decodes, that the record a head points at exists, that every
    blob a record references exists and decodes, and that writes, run entries and names decode. Then
    everything ``repair_thread`` would fix (:func:`.repair.repair_needed`, its dry run's decision: a head
    missing over a committed history, a damaged head, a lost thread ``name``) is a problem too.
    Emits :class:`Checked` as it goes and returns the number of objects read.
    """
    prefix = layout.thread(thread_id)
    keys = [k for page in (yield from all_pages(prefix)) for k in page.keys]
    present = set(keys)
    wanted: dict[str, list[str]] = {}
    checked = 0
    for chunk in chunks(keys, READ_BATCH):
        bodies = yield from all_of([Get(k) for k in chunk])
        for key, obj in zip(chunk, bodies, strict=True):
            if obj is None:
                continue  # deleted since it was listed
            problem = _check_object(codec, prefix, key, obj.body, wanted)
            if problem is not None:
                yield Emit(problem)
        checked += len(chunk)
        yield Emit(Checked(len(chunk)))
    for problem in _missing_references(prefix, present, wanted):
        yield Emit(problem)
    for key, what in (yield from repair_needed(layout, codec, thread_id)):
        yield Emit(Problem(key, what))
    return checked


def _check_object(codec: Codec, prefix: str, key: str, body: bytes, wanted: dict[str, list[str]]) -> Problem | None:
    """The problem of one object of a thread: it does not decode as what its key says it is, or the key
    is not part of the layout. A head or record adds the objects it references to ``wanted``."""
    kind = classify(key[len(prefix) :])
    try:
        if kind in (KeyKind.HEAD, KeyKind.RECORD):
            _note_references(codec.decode_record(key, body), kind, namespace_prefix(prefix, key), key, wanted)
        elif kind == KeyKind.WRITE:
            codec.decode_writes(key, body)
        elif kind == KeyKind.BLOB:
            codec.decode_blob(key, body)
        elif kind in (KeyKind.RUN_ENTRY, KeyKind.THREAD_NAME, KeyKind.NS_NAME):
            body.decode("utf-8", "surrogatepass")
        elif kind == KeyKind.MARKER:
            return Problem(key, _unfinished(key[len(prefix) :], body))
        else:
            return Problem(key, "unexpected key: not part of the checkpoint layout")
    except DecryptionError as exc:
        return Problem(key, exc.reason, undecryptable=True)
    except CorruptObjectError as exc:
        return Problem(key, exc.reason)  # the key is in the report; advice is the verifier's
    except UnicodeDecodeError as exc:
        return Problem(key, f"not valid UTF-8 ({exc})")
    return None


def _unfinished(relative: str, marker: bytes) -> str:
    """What a marker says: which delete or copy began and did not finish, and what to run."""
    operation, argument = keys.marker_operation(marker)
    if relative == keys.COPYING:
        what, again = keys.copy_marked_by(marker)
        return (
            f"{what} into this thread did not finish: if the thread has no checkpoints, delete it and {again} (gc "
            "removes this marker once every namespace of the thread has a head)"
        )
    if relative == keys.DELETING and operation == "expire_threads":
        return (
            "an expire_threads of this thread began and did not finish: if the thread is in use, put back the "
            "heads it lacks (docs/design.md, Known limits), otherwise run delete_thread"
        )
    if relative == keys.DELETING:
        return "a delete_thread of this thread began and did not finish: run delete_thread"
    return (
        f"a rollback of run {argument!r} that removes this namespace's head began and did not finish: "
        "run delete_for_runs"
    )


def _note_references(record: Record, kind: KeyKind, ns_prefix: str, key: str, wanted: dict[str, list[str]]) -> None:
    """Note, under each object a head or record needs (its large values; for a head, its record), that
    ``key`` needs it."""
    for channel, version in record.blobs.items():
        wanted.setdefault(Layout.blob_in(ns_prefix, channel, version), []).append(key)
    if kind == KeyKind.HEAD:
        wanted.setdefault(Layout.record_in(ns_prefix, record.checkpoint["id"]), []).append(key)


def _missing_references(prefix: str, present: set[str], wanted: dict[str, list[str]]) -> Iterator[Problem]:
    """A problem for each referenced object that the listing did not show, naming who references it."""
    for missing, referrers in sorted(wanted.items()):
        if missing not in present:
            what = "checkpoint record" if classify(missing[len(prefix) :]) is KeyKind.RECORD else "channel value"
            others = f" and {len(referrers) - 1} more" if len(referrers) > 1 else ""
            yield Problem(missing, f"missing {what} referenced by {referrers[0]!r}{others}")


__all__ = [
    "Checked",
    "Exported",
    "Problem",
    "ThreadStats",
    "WriteOrigin",
    "all_thread_stats",
    "export_thread",
    "import_thread",
    "thread_exists",
    "thread_ids",
    "thread_stats",
    "verify_thread",
    "write_origins",
]
