"""Move threads and long-term memory between any LangGraph checkpointer or store and the bucket.

A team adopting this package has its threads in ``PostgresSaver``, ``SqliteSaver``, ``RedisSaver`` or an
``InMemorySaver`` prototype, and its memories in ``PostgresStore``, ``SqliteStore`` or ``InMemoryStore``.
:func:`copy_threads` copies threads from any ``BaseCheckpointSaver`` into any other (into the bucket, out of it,
or between two savers that are neither) and :func:`copy_store` copies items between any two ``BaseStore`` s, both
through the savers' and stores' public methods: whatever a user can construct can be read and written. What
``BaseCheckpointSaver`` does not say (every thread id without reading every checkpoint, the task path of each
pending write) is read from the saver's own tables where this module knows them (the bucket, ``InMemorySaver``,
``SqliteSaver``, ``PostgresSaver``); elsewhere thread ids come from ``list(None)`` and writes have no path.
:func:`open_checkpointer` and :func:`open_store` open one from a location (``sqlite:///path.db``,
``postgresql://...``, ``redis://...``, ``s3://bucket/prefix`` or ``module:factory``). The ``langgraph-s3
import-from`` / ``export-to`` commands are these functions; docs/migration.md is the guide.

How a thread is copied, and why:

* **Through ``put`` and ``put_writes``**, oldest checkpoint first, each with its parent as the config's
  ``checkpoint_id``, its metadata and id unchanged, then its pending writes per task with their task paths. The
  target commits each one as it would a graph's step, so an S3 target gets its commit chain, run index and large
  values exactly as from a live run (no second encoder of the bucket's format to drift from the saver's).
* **Fencing.** The S3 saver refuses a step (``source`` ``input``/``loop``) on a parent that is not the namespace's
  head unless what travels with the put says its caller read that parent by id (docs/safety.md, "The fencing
  table"). A history with branches (time travel, ``update_state`` on an older checkpoint) has such steps; the copy
  reads their parent by id first, as the run that made them did, and puts on the config that read returned, so
  they commit as the fork they were.
* **Resumable.** Before copying, the target's thread is listed: checkpoints it holds are not put again, and a
  task whose writes it lacks gets them again (``put_writes`` keeps the first write per index, so that is
  idempotent). A run that dies leaves the target holding the checkpoints copied so far, each committed, oldest
  first; the next run copies the rest.
* **Consistent while the source is written.** A thread is copied from a listing of the source (its snapshot);
  the source is then listed again. If it changed (new checkpoints, new writes), what changed is copied and the
  source listed again, up to ``rounds`` times; a thread still changing is reported ``changed``, its copy complete
  as of the last snapshot it copied.
* **Verified.** After the copy the target's thread is listed and compared with the source's last snapshot
  (every checkpoint, parent, channel versions and pending write); in a bucket, the thread is also checked as
  ``langgraph-s3 verify`` checks it.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import importlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar

from langgraph.checkpoint.base import WRITES_IDX_MAP, BaseCheckpointSaver, CheckpointTuple, writes_sort_key
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import BaseStore, Item, PutOp

from ._protocol import operator_plans
from ._protocol.checkpoint_plans import checkpoint_config
from .errors import InvalidConfigError, MigrationError, S3CheckpointError
from .migration_locations import LOCATIONS, open_checkpointer, open_store, prepare_target, shown, would_create
from .saver import BaseS3Saver

T = TypeVar("T")

DEFAULT_ROUNDS = 3
"""How many times a thread written while it is copied is copied again before it is reported ``changed``."""
STORE_PAGE = 500
"""Namespaces or items read from a store per call, and items written to it per batch."""
ORIGIN_ATTEMPTS = 3
"""How many times a checkpoint's pending writes are read again when their task paths, read apart from their
values, do not match them (a write landed between the two reads)."""


# ------------------------------------------------------------------------------------------------
# What a source has: thread ids and the task paths of pending writes
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Origin:
    """Where one pending write came from, beside its value (which ``get_tuple`` returns without them)."""

    task_id: str
    idx: int
    channel: str
    task_path: str


class _Reader:
    """What ``BaseCheckpointSaver`` does not say and a copy needs, asked the generic way: every thread id (from
    ``list(None)``, which reads every checkpoint) and no task paths (``get_tuple`` leaves them out)."""

    def __init__(self, saver: BaseCheckpointSaver[Any]) -> None:
        self.saver = saver

    def thread_ids(self) -> list[str]:
        return sorted({str(tup.config["configurable"]["thread_id"]) for tup in self.saver.list(None)})

    def origins(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> list[_Origin] | None:
        return None


class _S3Reader(_Reader):
    """The bucket: thread folders listed, task paths read from the writes objects."""

    saver: BaseS3Saver

    def thread_ids(self) -> list[str]:
        plan = operator_plans.thread_ids(self.saver.plans.layout)
        return list(self.saver.bucket_io.iterate(plan, bounded=False))

    def origins(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> list[_Origin] | None:
        plans = self.saver.plans
        found = self.saver.bucket_io.run(
            operator_plans.write_origins(plans.layout, plans.codec, thread_id, checkpoint_ns, checkpoint_id)
        )
        return [_Origin(o.task_id, o.idx, o.channel, o.task_path) for o in found]


class _MemoryReader(_Reader):
    """``InMemorySaver``'s dictionaries: ``storage`` by thread, ``writes`` by (task, idx) with the task path."""

    saver: InMemorySaver

    def thread_ids(self) -> list[str]:
        return sorted(self.saver.storage)

    def origins(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> list[_Origin] | None:
        stored = self.saver.writes.get((thread_id, checkpoint_ns, checkpoint_id), {})
        return [_Origin(task_id, idx, write[1], write[3]) for (task_id, idx), write in list(stored.items())]


class _SqliteReader(_Reader):
    """``SqliteSaver``'s tables (``writes.task_path`` since langgraph-checkpoint-sqlite 3)."""

    saver: Any  # a SqliteSaver: its package is optional

    def thread_ids(self) -> list[str]:
        with self.saver.cursor(transaction=False) as cur:
            cur.execute("SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id")
            return [str(row[0]) for row in cur.fetchall()]

    def origins(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> list[_Origin] | None:
        path = "task_path" if getattr(self.saver, "_has_task_path", True) else "''"
        with self.saver.cursor(transaction=False) as cur:
            cur.execute(
                f"SELECT task_id, idx, channel, {path} FROM writes "
                "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
                (thread_id, checkpoint_ns, checkpoint_id),
            )
            return [_Origin(str(t), int(i), str(c), str(p)) for t, i, c, p in cur.fetchall()]


class _PostgresReader(_Reader):
    """``PostgresSaver``'s tables (``checkpoint_writes.task_path``)."""

    saver: Any  # a PostgresSaver: its package is optional

    def thread_ids(self) -> list[str]:
        with self.saver._cursor() as cur:
            cur.execute("SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id")
            return [str(row["thread_id"]) for row in cur.fetchall()]

    def origins(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> list[_Origin] | None:
        with self.saver._cursor() as cur:
            cur.execute(
                "SELECT task_id, idx, channel, task_path FROM checkpoint_writes "
                "WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s",
                (thread_id, checkpoint_ns, checkpoint_id),
            )
            return [_Origin(r["task_id"], int(r["idx"]), r["channel"], r["task_path"]) for r in cur.fetchall()]


def _reader_for(saver: BaseCheckpointSaver[Any]) -> _Reader:
    if isinstance(saver, BaseS3Saver):
        return _S3Reader(saver)
    if isinstance(saver, InMemorySaver):
        return _MemoryReader(saver)
    for module_name, class_name, reader in (
        ("langgraph.checkpoint.sqlite", "SqliteSaver", _SqliteReader),
        ("langgraph.checkpoint.postgres", "PostgresSaver", _PostgresReader),
    ):
        with contextlib.suppress(ImportError):
            if isinstance(saver, getattr(importlib.import_module(module_name), class_name)):
                return reader(saver)
    return _Reader(saver)


# ------------------------------------------------------------------------------------------------
# A thread as a listing shows it
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Listed:
    """One checkpoint as a listing shows it, without values: what tells whether two copies are the same."""

    parent_id: str | None
    versions: Mapping[str, Any]
    writes: tuple[tuple[str, str], ...]
    """(task id, channel) of each pending write, sorted: which writes it has (their values are not compared)."""

    @staticmethod
    def of(tup: CheckpointTuple) -> _Listed:
        return _Listed(
            _parent_id(tup),
            dict(tup.checkpoint["channel_versions"]),
            tuple(sorted((str(task_id), str(channel)) for task_id, channel, _ in tup.pending_writes or ())),
        )


Snapshot = dict[tuple[str, str], _Listed]
"""A thread's checkpoints by (checkpoint namespace, checkpoint id)."""


def _parent_id(tup: CheckpointTuple) -> str | None:
    parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    return None if parent is None else str(parent)


def _snapshot(saver: BaseCheckpointSaver[Any], thread_id: str) -> Snapshot:
    """Every checkpoint of every namespace of a thread, as ``list`` shows it now."""
    return {
        (str(tup.config["configurable"].get("checkpoint_ns", "")), str(tup.checkpoint["id"])): _Listed.of(tup)
        for tup in saver.list(checkpoint_config(thread_id))
    }


def _missing_writes(source: _Listed, target: _Listed | None) -> set[str]:
    """The tasks some of whose writes ``target`` lacks."""
    have = Counter(target.writes if target is not None else ())
    return {task_id for (task_id, channel), n in Counter(source.writes).items() if have[(task_id, channel)] < n}


# ------------------------------------------------------------------------------------------------
# Copying threads
# ------------------------------------------------------------------------------------------------
class ThreadStatus(str, Enum):
    """What became of one thread."""

    COPIED = "copied"
    """Copied, and the source did not change meanwhile."""
    COMPLETE = "complete"
    """The target already held all of it: nothing was written."""
    WOULD_COPY = "would copy"
    """A dry run: this much is missing from the target."""
    CHANGED = "changed"
    """Written in the source during every round: the target holds it as of the last snapshot; run again."""
    CONFLICT = "conflict"
    """The target's thread has checkpoints the source does not (a graph ran on it, or another thread has this
    id): left alone."""
    NOT_FOUND = "not found"
    """Named, but the source has no checkpoint of it."""


@dataclass
class ThreadCopy:
    """What happened to one thread."""

    thread_id: str
    status: ThreadStatus = ThreadStatus.COMPLETE
    checkpoints: int = 0
    """Checkpoints put into the target (a dry run: missing from it)."""
    writes: int = 0
    """Pending writes put into the target (a dry run: missing from it)."""
    rounds: int = 0
    """Listings of the source taken (2 for a thread copied while nobody wrote it)."""
    problems: builtins.list[str] = field(default_factory=list)
    """What the verification found wrong in the target, or why the thread was left alone."""

    @property
    def ok(self) -> bool:
        return not self.problems and self.status not in (
            ThreadStatus.CHANGED,
            ThreadStatus.CONFLICT,
            ThreadStatus.NOT_FOUND,
        )


@dataclass
class MigrationReport:
    """What :func:`copy_threads` did, thread by thread."""

    dry_run: bool
    threads: builtins.list[ThreadCopy] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every thread is copied (or would be) and verified."""
        return all(t.ok for t in self.threads)

    @property
    def checkpoints(self) -> int:
        return sum(t.checkpoints for t in self.threads)

    @property
    def writes(self) -> int:
        return sum(t.writes for t in self.threads)


@dataclass(frozen=True)
class MigrationProgress:
    """Where :func:`copy_threads` is: handed to ``on_progress`` after each checkpoint and each thread."""

    thread_id: str
    threads_done: int
    threads_total: int
    checkpoints: int
    """Checkpoints copied so far in this thread."""


def copy_threads(
    source: BaseCheckpointSaver[Any],
    target: BaseCheckpointSaver[Any],
    *,
    thread_ids: Sequence[str] | None = None,
    dry_run: bool = False,
    rounds: int = DEFAULT_ROUNDS,
    on_progress: Callable[[MigrationProgress], None] | None = None,
) -> MigrationReport:
    """Copy threads from one checkpointer into another: every checkpoint of every namespace with its metadata,
    parent, channel values and pending writes (with their task paths where the source keeps them), ids unchanged.

    Running it again resumes it: what the target holds is not written again. See the module's docstring for how
    and why, and docs/migration.md for what is copied and what is not.

    Args:
        source: The checkpointer to read (``InMemorySaver``, ``SqliteSaver``, ``PostgresSaver``, ``S3Saver`` ...).
        target: The checkpointer to write; call its ``setup()`` first if it needs one (:func:`prepare_target`).
        thread_ids: The threads to copy (default: every thread of the source).
        dry_run: Only compare: report what is missing from the target, write nothing.
        rounds: How many times a thread the source keeps writing is copied again before it is reported
            ``changed`` (at least 1).
        on_progress: Called after each checkpoint copied and each thread done.

    Returns:
        What became of each thread; ``report.ok`` when every thread was copied and verified.

    Raises:
        InvalidConfigError: ``rounds`` is below 1.
        MigrationError: The source or the target failed with an error of its own (its cause); run again to resume.
        S3CheckpointError: The bucket's own errors, as the saver raises them (unreachable, credentials ...).
    """
    if rounds < 1:
        raise InvalidConfigError(f"rounds={rounds!r}: copy each thread at least once (rounds >= 1)")
    reader = _reader_for(source)
    names = list(thread_ids) if thread_ids is not None else _guarded("listing the source's threads", reader.thread_ids)
    report = MigrationReport(dry_run=dry_run)

    def tell(thread_id: str, threads_done: int, checkpoints: int) -> None:
        if on_progress is not None:
            on_progress(MigrationProgress(thread_id, threads_done, len(names), checkpoints))

    for done, thread_id in enumerate(map(str, names)):
        progress = functools.partial(tell, thread_id, done)
        copier = _ThreadCopier(reader, target, thread_id, dry_run=dry_run, rounds=rounds, progress=progress)
        report.threads.append(copier.copy())
        tell(thread_id, done + 1, report.threads[-1].checkpoints)
    return report


def _guarded(what: str, call: Callable[..., T], *args: Any) -> T:
    """``call(*args)``, with another saver's or store's own error turned into a :class:`MigrationError` naming
    ``what`` it was doing (the bucket's errors are already the package's)."""
    try:
        return call(*args)
    except S3CheckpointError:
        raise
    except Exception as exc:
        raise MigrationError(
            f"{what} failed: {type(exc).__name__}: {exc}. What was copied before stays; fix the cause and run the "
            "same migration again: it resumes where this one stopped"
        ) from exc


class _ThreadCopier:
    """One thread's copy: snapshot, copy what the target lacks, check the source again, verify."""

    def __init__(
        self,
        reader: _Reader,
        target: BaseCheckpointSaver[Any],
        thread_id: str,
        *,
        dry_run: bool,
        rounds: int,
        progress: Callable[[int], None],
    ) -> None:
        self.reader = reader
        self.source = reader.saver
        self.target = target
        self.thread_id = thread_id
        self.dry_run = dry_run
        self.rounds = rounds
        self.progress = progress
        self.result = ThreadCopy(thread_id)
        self.heads: dict[str, str] = {}
        """Per namespace, the newest checkpoint id the target holds: the head a put continues."""

    def copy(self) -> ThreadCopy:
        present = self._guarded_snapshot(self.target, "the target")
        snapshot = self._source_snapshot()
        if not snapshot:
            self.result.status = ThreadStatus.NOT_FOUND
            self.result.problems.append("the source has no checkpoint of this thread")
            return self.result
        foreign = sorted(present.keys() - snapshot.keys(), key=lambda key: key[1])
        if foreign:
            self.result.status = ThreadStatus.CONFLICT
            ns, checkpoint_id = foreign[0]
            self.result.problems.append(
                f"the target's thread has {len(foreign)} checkpoint(s) the source does not (the first: "
                f"{checkpoint_id!r} in namespace {ns!r}): a graph ran on it, or it is another thread of the same "
                "id. Left alone; delete it in the target to copy it again"
            )
            return self.result
        for ns, checkpoint_id in present:
            self.heads[ns] = max(self.heads.get(ns, checkpoint_id), checkpoint_id)
        if self.dry_run:
            self._count_missing(snapshot, present)
            return self.result
        if not self._missing(snapshot, present):
            self._verify(snapshot)
            return self.result
        copied = snapshot
        for _ in range(self.rounds):
            self._copy_missing(snapshot, present)
            copied, snapshot = snapshot, self._source_snapshot()
            if snapshot == copied:
                self.result.status = ThreadStatus.COPIED
                break
        else:
            self.result.status = ThreadStatus.CHANGED
            self.result.problems.append(
                f"the source kept changing while it was copied ({self.rounds} rounds): the target holds it as of the "
                "listing it copied; run again once it is idle"
            )
        self._verify(copied)
        return self.result

    # -- reading -----------------------------------------------------------------------------
    def _source_snapshot(self) -> Snapshot:
        self.result.rounds += 1
        return self._guarded_snapshot(self.source, "the source")

    def _guarded_snapshot(self, saver: BaseCheckpointSaver[Any], which: str) -> Snapshot:
        return _guarded(f"listing thread {self.thread_id!r} in {which}", _snapshot, saver, self.thread_id)

    @staticmethod
    def _missing(snapshot: Snapshot, present: Snapshot) -> list[tuple[str, str]]:
        """The checkpoints the target lacks or holds with fewer writes, oldest first (a parent before its
        children: ids grow with time)."""
        wanted = [
            key for key, listed in snapshot.items() if key not in present or _missing_writes(listed, present[key])
        ]
        return sorted(wanted, key=lambda key: (key[1], key[0]))

    def _count_missing(self, snapshot: Snapshot, present: Snapshot) -> None:
        missing = self._missing(snapshot, present)
        self.result.status = ThreadStatus.WOULD_COPY if missing else ThreadStatus.COMPLETE
        for key in missing:
            listed, held = snapshot[key], present.get(key)
            self.result.checkpoints += int(held is None)
            tasks = _missing_writes(listed, held)
            self.result.writes += sum(1 for task_id, _ in listed.writes if task_id in tasks)

    # -- writing -----------------------------------------------------------------------------
    def _copy_missing(self, snapshot: Snapshot, present: Snapshot) -> None:
        for ns, checkpoint_id in self._missing(snapshot, present):
            config = checkpoint_config(self.thread_id, ns, checkpoint_id)
            tup = _guarded(f"reading checkpoint {checkpoint_id!r} of {self.thread_id!r}", self.source.get_tuple, config)
            if tup is None:
                continue  # deleted from the source since it was listed: the next listing shows it gone
            held = present.get((ns, checkpoint_id))
            if held is None:
                self._put(ns, tup, present)
                self.result.checkpoints += 1
                self.progress(self.result.checkpoints)
            self._put_writes(ns, tup, held)
            present[(ns, checkpoint_id)] = _Listed.of(tup)

    def _put(self, ns: str, tup: CheckpointTuple, present: Snapshot) -> None:
        """Put one checkpoint on its parent, as the run that made it did."""
        checkpoint_id, parent_id = str(tup.checkpoint["id"]), _parent_id(tup)
        head = self.heads.get(ns)
        config = checkpoint_config(self.thread_id, ns, parent_id)
        if parent_id is not None and head is not None and parent_id != head:
            # A branch (time travel, an update of an older checkpoint): its maker read the parent by id. The put on
            # the config that read returns is the S3 saver's fork, instead of a step on a head that moved on.
            read = self._on_target("reading", self.target.get_tuple, config)
            if read is not None:
                config = read.config
        parent = present.get((ns, parent_id)) if parent_id is not None else None
        parent_versions = parent.versions if parent is not None else {}
        # Only the channels whose version moved: a saver that stores a value per (channel, version), as
        # InMemorySaver and PostgresSaver do, keeps the parent's for the others (it copied them already).
        new_versions = {
            channel: version
            for channel, version in tup.checkpoint["channel_versions"].items()
            if parent_versions.get(channel) != version
        }
        self._on_target("putting", self.target.put, config, tup.checkpoint, tup.metadata, new_versions)
        self.heads[ns] = max(head or checkpoint_id, checkpoint_id)

    def _put_writes(self, ns: str, tup: CheckpointTuple, held: _Listed | None) -> None:
        """Put the writes of each task the target lacks some of, with their task paths.

        A write's index is its position in its ``put_writes`` call, or fixed for a special channel (interrupt,
        error, resume, scheduled). So a task's regular writes go in one call, in their order, as LangGraph wrote
        them (indices 0, 1 ...: splitting them would give two writes one index, and the first would hide the
        other); its special writes go in calls of their own, one per task path (LangGraph writes a resume value
        before it knows the task's path), where they keep their index whatever the call holds."""
        tasks = _missing_writes(_Listed.of(tup), held)
        if not tasks:
            return
        calls: dict[tuple[str, str | None], tuple[str, list[tuple[str, Any]]]] = {}
        for task_id, channel, value, task_path in self._writes_with_paths(ns, tup):
            if task_id in tasks:
                call = (task_id, task_path if channel in WRITES_IDX_MAP else None)
                calls.setdefault(call, (task_path, []))[1].append((channel, value))
        config = checkpoint_config(self.thread_id, ns, str(tup.checkpoint["id"]))
        for (task_id, _), (task_path, writes) in calls.items():
            self._on_target("putting writes", self.target.put_writes, config, writes, task_id, task_path)
            self.result.writes += len(writes)

    def _writes_with_paths(self, ns: str, tup: CheckpointTuple) -> list[tuple[str, str, Any, str]]:
        """The checkpoint's pending writes, each with the task path the source stored it with (empty where the
        source keeps none). Read apart from the values, so both are read again when they do not match."""
        checkpoint_id = str(tup.checkpoint["id"])
        for _ in range(ORIGIN_ATTEMPTS):
            origins = _guarded(
                f"reading the writes of checkpoint {checkpoint_id!r} of {self.thread_id!r}",
                self.reader.origins,
                self.thread_id,
                ns,
                checkpoint_id,
            )
            if origins is None:
                break
            ordered = sorted(origins, key=lambda o: writes_sort_key(o.task_path, o.task_id, o.idx))
            pending = list(tup.pending_writes or ())
            if [(o.task_id, o.channel) for o in ordered] == [(t, c) for t, c, _ in pending]:
                return [(t, c, v, o.task_path) for (t, c, v), o in zip(pending, ordered, strict=True)]
            fresh = _guarded(
                f"reading checkpoint {checkpoint_id!r} of {self.thread_id!r}",
                self.source.get_tuple,
                checkpoint_config(self.thread_id, ns, checkpoint_id),
            )
            tup = fresh if fresh is not None else tup
        return [(str(t), str(c), v, "") for t, c, v in tup.pending_writes or ()]

    def _on_target(self, what: str, call: Callable[..., T], *args: Any) -> T:
        return _guarded(f"{what} thread {self.thread_id!r} in the target", call, *args)

    # -- verifying ---------------------------------------------------------------------------
    def _verify(self, snapshot: Snapshot) -> None:
        """Read the target's thread back and compare it with the source's last snapshot; in a bucket, check every
        object of the thread as ``langgraph-s3 verify`` does."""
        held = self._guarded_snapshot(self.target, "the target")
        for (ns, checkpoint_id), listed in sorted(snapshot.items(), key=lambda item: item[0][1]):
            where = f"checkpoint {checkpoint_id!r}" + (f" in namespace {ns!r}" if ns else "")
            copy = held.get((ns, checkpoint_id))
            if copy is None:
                self.result.problems.append(f"{where} is missing from the target")
            elif copy != listed:
                what = [
                    name
                    for name, theirs, ours in (
                        ("parent", copy.parent_id, listed.parent_id),
                        ("channel versions", copy.versions, listed.versions),
                        ("pending writes", copy.writes, listed.writes),
                    )
                    if theirs != ours
                ]
                self.result.problems.append(f"{where} differs in the target: {', '.join(what)}")
        if isinstance(self.target, BaseS3Saver):
            plans = self.target.plans
            plan = operator_plans.verify_thread(plans.layout, plans.codec, self.thread_id)
            for item in self.target.bucket_io.iterate(plan, bounded=False):
                if isinstance(item, operator_plans.Problem):
                    self.result.problems.append(f"{item.key}: {item.problem}")


# ------------------------------------------------------------------------------------------------
# Copying a store
# ------------------------------------------------------------------------------------------------
@dataclass
class StoreCopyReport:
    """What :func:`copy_store` did."""

    dry_run: bool
    namespaces: int = 0
    """Namespaces holding items in the source (under the prefixes asked for)."""
    items: int = 0
    """Items put into the target (a dry run: missing from it or different there)."""
    unchanged: int = 0
    """Items the target already held with the same value."""
    problems: builtins.list[str] = field(default_factory=list)
    """Items the verification found missing or different in the target."""

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class StoreProgress:
    """Where :func:`copy_store` is: handed to ``on_progress`` after each namespace."""

    namespace: tuple[str, ...]
    namespaces_done: int
    namespaces_total: int
    items: int
    """Items put so far."""


def copy_store(
    source: BaseStore,
    target: BaseStore,
    *,
    namespace_prefixes: Sequence[tuple[str, ...]] = ((),),
    dry_run: bool = False,
    on_progress: Callable[[StoreProgress], None] | None = None,
) -> StoreCopyReport:
    """Copy long-term memory items (namespace, key, value) from one store into another.

    An item the target holds with the same value is not written again, so running it again resumes it (and
    copies what changed in the source since). Through ``BaseStore``'s public API, which does not carry times or
    vectors: the target gives each item it receives its own ``created_at``/``updated_at`` (the time of the copy),
    its default TTL, and its vectors from its own index configuration (the target embeds the values; a target
    without an index stores none). Items deleted from the source are not deleted from the target.

    Args:
        source: The store to read (``InMemoryStore``, ``SqliteStore``, ``PostgresStore``, ``S3Store`` ...).
        target: The store to write; call its ``setup()`` first if it needs one (:func:`prepare_target`).
        namespace_prefixes: Copy the namespaces under these prefixes (default: all).
        dry_run: Only compare: count what would be written, write nothing.
        on_progress: Called after each namespace.

    Returns:
        The counts, and what a read of the target after the copy found missing or different.

    Raises:
        MigrationError: The source or the target failed with an error of its own (its cause); run again to resume.
        S3CheckpointError: The bucket's own errors, as the store raises them.
    """
    report = StoreCopyReport(dry_run=dry_run)
    namespaces = sorted(
        {
            ns
            for prefix in namespace_prefixes
            for ns in _guarded("listing the source's namespaces", _namespaces, source, prefix)
        }
    )
    report.namespaces = len(namespaces)
    for done, namespace in enumerate(namespaces):
        _copy_namespace(source, target, namespace, report)
        if on_progress is not None:
            on_progress(StoreProgress(namespace, done + 1, len(namespaces), report.items))
    return report


def _copy_namespace(source: BaseStore, target: BaseStore, namespace: tuple[str, ...], report: StoreCopyReport) -> None:
    items = _guarded(f"reading namespace {namespace!r} of the source", _items, source, namespace)
    held = _guarded(f"reading namespace {namespace!r} of the target", _items, target, namespace)
    wanted = [item for key, item in items.items() if key not in held or held[key].value != item.value]
    report.unchanged += len(items) - len(wanted)
    report.items += len(wanted)
    if report.dry_run or not wanted:
        return
    ttl = (target.ttl_config or {}).get("default_ttl")
    for start in range(0, len(wanted), STORE_PAGE):
        ops = [PutOp(namespace, item.key, item.value, None, ttl) for item in wanted[start : start + STORE_PAGE]]
        _guarded(f"writing namespace {namespace!r} of the target", target.batch, ops)
    copied = _guarded(f"reading namespace {namespace!r} of the target", _items, target, namespace)
    for item in wanted:
        copy = copied.get(item.key)
        if copy is None or copy.value != item.value:
            state = "missing" if copy is None else "different"
            report.problems.append(f"item {item.key!r} of namespace {namespace!r} is {state} in the target")


def _namespaces(store: BaseStore, prefix: tuple[str, ...]) -> builtins.list[tuple[str, ...]]:
    """Every namespace holding items under ``prefix``, page by page."""
    found: builtins.list[tuple[str, ...]] = []
    while page := store.list_namespaces(prefix=prefix or None, limit=STORE_PAGE, offset=len(found)):
        found.extend(tuple(ns) for ns in page)
        if len(page) < STORE_PAGE:
            break
    return found


def _items(store: BaseStore, namespace: tuple[str, ...]) -> dict[str, Item]:
    """The items of exactly ``namespace`` (``search`` also returns those of namespaces below it), without
    refreshing their TTL: a copy is no use of the memory."""
    found: dict[str, Item] = {}
    offset = 0
    while page := store.search(namespace, limit=STORE_PAGE, offset=offset, refresh_ttl=False):
        found.update((item.key, item) for item in page if tuple(item.namespace) == namespace)
        offset += len(page)
        if len(page) < STORE_PAGE:
            break
    return found


__all__ = [
    "DEFAULT_ROUNDS",
    "LOCATIONS",
    "MigrationProgress",
    "MigrationReport",
    "StoreCopyReport",
    "StoreProgress",
    "ThreadCopy",
    "ThreadStatus",
    "copy_store",
    "copy_threads",
    "open_checkpointer",
    "open_store",
    "prepare_target",
    "shown",
    "would_create",
]
