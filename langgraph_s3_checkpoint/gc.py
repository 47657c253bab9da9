"""Garbage collection: delete objects that no committed checkpoint needs.

The commit protocol never needs cleanup to stay correct, but interrupted or losing operations leave
objects behind. :func:`gc` finds them, by category:

``uncommitted_record``
    A record (and its writes) newer than its namespace's head: a ``put`` that died before its head
    PUT, or a conflict loser that died before deleting its record. Readers already ignore it.
``orphan_writes``
    Pending writes of a checkpoint whose record does not exist (a conflict loser deleted it, or an
    interrupted ``prune`` did).
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
    The ``name`` object of a thread (long thread ids only) with nothing else left.

Nothing younger than ``grace_seconds`` is deleted, judged by the object's LastModified against the
server's clock (the ``Date`` of the listing), so puts in flight are never touched: keep the grace well
above the longest a ``put`` can take. Committed checkpoints are never deleted; records older than the
head are kept even when they are not the head's ancestors (forks and replays look like that).

The scan holds one namespace's listing in memory at a time, streams everything else page by page, and
reads committed records (metadata and blob references only) only in namespaces that have blobs or
run-index entries. It is blocking; from asyncio, run it in a thread (``asyncio.to_thread(gc, saver)``).
"""

from __future__ import annotations

import collections
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from .errors import CorruptObjectError, S3RequestError
from .keys import Layout, escape
from .requests import Delete, Get, Obj, Plan

if TYPE_CHECKING:
    from .saver import BaseS3Saver

DELETE_BATCH = 1000
READ_BATCH = 32
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
    unreadable: list[str] = field(default_factory=list)
    """Heads or records that could not be decoded; their namespaces were left as they are."""
    sample: list[str] = field(default_factory=list)
    """The first deleted keys (at most 100), for a look at what a dry run would do."""

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


@dataclass(frozen=True)
class _Listed:
    key: str
    size: int
    modified: datetime


@dataclass
class _Namespace:
    committed: bool
    """Whether the namespace has a head (and so committed checkpoints)."""
    run_segments: set[str] | None
    """Escaped run ids of its committed records; ``None`` if not read (or unreadable)."""


class _Collector:
    def __init__(self, saver: BaseS3Saver, grace_seconds: float, dry_run: bool) -> None:
        self.saver = saver
        self.store = saver._store
        self.codec = saver._core.codec
        self.root = saver._core.layout.prefix
        self.grace = grace_seconds
        self.report = GcReport(dry_run=dry_run, grace_seconds=grace_seconds)
        self.pending: list[str] = []

    # -- listing and reading --------------------------------------------------------------------
    def pages(self, prefix: str, delimiter: str | None = None) -> Iterator[tuple[list[_Listed], list[str], datetime]]:
        """Pages of a listing: objects, common prefixes, and the server's clock at that moment."""
        kwargs: dict[str, Any] = {"Bucket": self.saver.bucket, "Prefix": prefix}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        try:
            for page in self.saver.client.get_paginator("list_objects_v2").paginate(**kwargs):
                date = page.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
                now = parsedate_to_datetime(date) if date else datetime.now(timezone.utc)
                # Keys ending in "/" are folder placeholders some tools and servers create: never ours.
                objs = [
                    _Listed(o["Key"], int(o.get("Size", 0)), o["LastModified"])
                    for o in page.get("Contents", ())
                    if not o["Key"].endswith("/")
                ]
                self.report.scanned += len(objs)
                yield objs, [p["Prefix"] for p in page.get("CommonPrefixes", ())], now
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            raise S3RequestError(f"gc: listing {prefix!r} in bucket {self.saver.bucket!r} failed: {code}") from exc

    def listing(self, prefix: str, delimiter: str | None = None) -> tuple[list[_Listed], datetime]:
        """A whole (small) listing, aged by the clock of its first page: the most conservative."""
        objs: list[_Listed] = []
        first: datetime | None = None
        for page, _, now in self.pages(prefix, delimiter):
            objs.extend(page)
            first = first or now
        return objs, first or datetime.now(timezone.utc)

    def fetch(self, keys: Sequence[str]) -> list[Obj | None]:
        def plan() -> Plan[list[Obj | None]]:
            replies: list[Obj | None] = []
            for i in range(0, len(keys), READ_BATCH):
                replies.extend((yield [Get(k) for k in keys[i : i + READ_BATCH]]))
            return replies

        return self.store.run(plan()) if keys else []

    # -- deleting -------------------------------------------------------------------------------
    def doom(self, obj: _Listed, reason: str, now: datetime, *, also: Sequence[str] = ()) -> bool:
        """Queue ``obj`` (and the ``also`` keys, uncounted) for deletion unless it is too young."""
        if (now - obj.modified).total_seconds() < self.grace:
            self.report.young += 1
            return False
        self.report.deleted[reason] += 1
        self.report.deleted_bytes += obj.size
        if len(self.report.sample) < SAMPLE_SIZE:
            self.report.sample.append(obj.key)
        self.pending.append(obj.key)
        self.pending.extend(also)
        if len(self.pending) >= DELETE_BATCH:
            self.flush()
        return True

    def flush(self) -> None:
        doomed, self.pending = self.pending, []
        if self.report.dry_run:
            return
        for i in range(0, len(doomed), DELETE_BATCH):
            self.store.execute(Delete(tuple(doomed[i : i + DELETE_BATCH])))

    # -- the scan -------------------------------------------------------------------------------
    def run(self) -> GcReport:
        threads_root = f"{self.root}threads/"
        for _, prefixes, _ in self.pages(threads_root, delimiter="/"):
            for thread_prefix in prefixes:
                self.thread(thread_prefix)
                self.flush()
        self.global_runs()
        for objs, _, now in self.pages(f"{self.root}_setup/"):
            for obj in objs:
                self.doom(obj, "setup_probe", now)
        self.flush()
        return self.report

    def thread(self, prefix: str) -> None:
        thread_segment = prefix[len(f"{self.root}threads/") : -1]
        top, now = self.listing(prefix, delimiter="/")
        entries, entries_now = self.listing(f"{prefix}r/")
        wanted = {e.key.rsplit("/", 1)[1] for e in entries}
        namespaces: dict[str, _Namespace] = {}
        ns_root = f"{prefix}ns/"
        for _, ns_prefixes, _ in self.pages(ns_root, delimiter="/"):
            for ns_prefix in ns_prefixes:
                segment = ns_prefix[len(ns_root) : -1]
                namespaces[segment] = self.namespace(ns_prefix, read_runs=segment in wanted)
        kept_entries = False
        for entry in entries:
            run_segment, ns_segment = entry.key[len(f"{prefix}r/") :].split("/", 1)
            info = namespaces.get(ns_segment)
            dangling = (
                info is None
                or not info.committed
                or (info.run_segments is not None and run_segment not in info.run_segments)
            )
            global_key = f"{self.root}runs/{run_segment}/{thread_segment}/{ns_segment}"
            if not (dangling and self.doom(entry, "dangling_run_entry", entries_now, also=[global_key])):
                kept_entries = True
        if not kept_entries and not any(info.committed for info in namespaces.values()):
            for obj in top:
                if obj.key == f"{prefix}name":
                    self.doom(obj, "orphan_name", now)

    def namespace(self, prefix: str, *, read_runs: bool) -> _Namespace:
        objs, now = self.listing(prefix)
        head_key = f"{prefix}head"
        if not any(o.key == head_key for o in objs):
            for obj in objs:
                self.doom(obj, "headless_namespace", now)
            return _Namespace(committed=False, run_segments=set())
        (head,) = self.fetch([head_key])
        if head is None:
            # Deleted since the listing: a delete_thread is running; leave the namespace to it.
            return _Namespace(committed=True, run_segments=None)
        try:
            head_id = self.codec.peek_head_id(head_key, head.body)
        except CorruptObjectError:
            self.report.unreadable.append(head_key)
            return _Namespace(committed=True, run_segments=None)

        records_root, blobs_root = f"{prefix}c/", f"{prefix}b/"
        committed: list[str] = []
        uncommitted: set[str] = set()
        writes: list[tuple[_Listed, str]] = []
        for obj in objs:
            if not obj.key.startswith(records_root):
                continue
            parsed = Layout.parse_checkpoint_key(records_root, obj.key)
            if parsed is None:
                continue  # not ours: leave it alone
            checkpoint_id = parsed.checkpoint_id
            if not parsed.is_record:
                writes.append((obj, checkpoint_id))
            elif checkpoint_id > head_id:
                uncommitted.add(checkpoint_id)
                self.doom(obj, "uncommitted_record", now)
            else:
                committed.append(obj.key)
        # The head counts even if its record is missing: a crash between the parallel record and head
        # PUTs leaves exactly that, and the next read restores the record from the head.
        known = {head_id, *(Layout.parse_checkpoint_key(records_root, key).checkpoint_id for key in committed)}  # type: ignore[union-attr]
        for obj, checkpoint_id in writes:
            if checkpoint_id in uncommitted:
                self.doom(obj, "uncommitted_record", now)
            elif checkpoint_id not in known:
                self.doom(obj, "orphan_writes", now)

        blobs = [o for o in objs if o.key.startswith(blobs_root)]
        if not blobs and not read_runs:
            return _Namespace(committed=True, run_segments=None)
        referenced: set[str] = set()
        runs: set[str] | None = set()
        keys = [head_key, *committed]
        bodies = [head, *self.fetch(keys[1:])]
        for key, body in zip(keys, bodies, strict=True):
            if body is None:
                continue
            try:
                metadata, _, refs = self.codec.peek_record(key, body.body)
            except CorruptObjectError:
                # Its blob references and run are unknown: delete no blob and no run entry here.
                self.report.unreadable.append(key)
                return _Namespace(committed=True, run_segments=None)
            referenced.update(f"{blobs_root}{escape(ch)}/{escape(version)}" for ch, version in refs.items())
            run_id = metadata.get("run_id")
            if run_id is not None and runs is not None:
                runs.add(escape(str(run_id)))
        for blob in blobs:
            if blob.key not in referenced:
                self.doom(blob, "orphan_blob", now)
        return _Namespace(committed=True, run_segments=runs)

    def global_runs(self) -> None:
        """Global run-index entries whose per-thread twin is gone (the thread pass handled the rest)."""
        runs_root = f"{self.root}runs/"
        for objs, _, now in self.pages(runs_root):
            twins = []
            for obj in objs:
                run_segment, thread_segment, ns_segment = obj.key[len(runs_root) :].split("/", 2)
                twins.append(f"{self.root}threads/{thread_segment}/r/{run_segment}/{ns_segment}")
            for obj, twin in zip(objs, self.fetch(twins), strict=True):
                if twin is None:
                    self.doom(obj, "dangling_run_entry", now)
            self.flush()


def gc(saver: BaseS3Saver, *, grace_seconds: float = 3600, dry_run: bool = False) -> GcReport:
    """Delete leftovers of interrupted and losing operations under the saver's prefix.

    Only objects older than ``grace_seconds`` (by the server's clock) are deleted. With ``dry_run``
    nothing is deleted and the report says what would be. Safe to run while the saver is in use, as
    long as no ``put`` takes longer than the grace period. See the module docstring for what counts
    as garbage.
    """
    if grace_seconds < 0:
        raise ValueError("grace_seconds must be >= 0")
    return _Collector(saver, grace_seconds, dry_run).run()


__all__ = ["GcReport", "gc"]
