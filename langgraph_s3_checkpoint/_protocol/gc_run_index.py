"""gc's judgement of the run index (``runs/{run}/{T}/{N}`` and its twin ``threads/{T}/r/{run}/{N}``): which entries
still lead a rollback to a run's checkpoints or writes, and which dangle. The thread pass judges each thread's
entries with its global twin; the global pass reads a twin only for an entry the thread pass did not list."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from .keys import KeyKind, Layout, classify, is_own_segment
from .plans import READ_BATCH, age_cutoff, all_of, for_each_emitted, pages
from .requests import Get, ListKeys, Page, Plan, StoredObject

if TYPE_CHECKING:
    from .garbage_collection import _Collector, _Namespace


def run_entries(c: _Collector, prefix: str, namespaces: dict[str, _Namespace]) -> Plan[None]:
    """Judge a thread's run-index entries (``r/{run}/{ns}``), each with its global twin."""
    thread_segment = prefix[len(f"{c.root}threads/") : -1]
    entries_root = f"{prefix}r/"

    def entries_page(page: Page) -> Plan[None]:
        c.report.scanned += len(page.keys)
        c.listed(page)
        old = age_cutoff(page, c.grace)
        unproven: list[tuple[int, _Namespace]] = []
        for i, key in enumerate(page.keys):
            if classify(key[len(prefix) :]) is not KeyKind.RUN_ENTRY:
                c.foreign()
                continue
            run_segment, ns_segment = key[len(entries_root) :].split("/")
            c.seen_entries.add(run_segment, thread_segment, ns_segment)
            info = namespaces.get(ns_segment)
            if info is None or not info.committed:
                doom_entry(c, page, i, old, thread_segment)
            elif info.run_segments is None or run_segment in info.run_segments:
                c.keep()
            else:
                unproven.append((i, info))
        yield from judge_unproven_entries(c, page, unproven, old, thread_segment)
        yield from c.flush_if_full()

    yield from for_each_emitted(pages(entries_root), entries_page)


def judge_unproven_entries(
    c: _Collector, page: Page, unproven: list[tuple[int, _Namespace]], old: Callable[[int], bool], thread_segment: str
) -> Plan[None]:
    """Judge the entries of runs that no committed record of their namespace names. Such a run may have
    written only pending writes, to a checkpoint of another run (it resumed that one's interrupt and
    committed nothing of its own): its entry names that checkpoint, and ``delete_for_runs`` needs it to
    take those writes out. So an entry stays while the checkpoint it names is there and not garbage (or it
    is the head, whose record a latest read restores), and is garbage otherwise, going once past the grace
    as every garbage: the entry of a put that died or lost names that put's own record, garbage or gone.
    An entry whose body cannot be read stays (``delete_for_runs`` then walks the whole namespace). Costs a
    GET of each such entry and a 1-key LIST of the checkpoint it names; entries of runs with committed
    records of their own, the usual case, cost nothing."""
    for start in range(0, len(unproven), READ_BATCH):
        chunk = unproven[start : start + READ_BATCH]
        bodies = yield from all_of([Get(page.keys[i]) for i, _ in chunk])
        named: list[tuple[int, str]] = []
        for (i, info), body in zip(chunk, bodies, strict=True):
            checkpoint_id = _named_checkpoint(body)
            if body is None:
                continue  # deleted since the listing (a rollback of the run finished)
            if checkpoint_id is None or checkpoint_id == info.head_id:
                c.keep()
            elif checkpoint_id in info.garbage_records:
                doom_entry(c, page, i, old, thread_segment)
            else:
                named.append((i, Layout.record_in(info.prefix, checkpoint_id)))
        listings = (yield from all_of([ListKeys(record, max_keys=1) for _, record in named])) if named else []
        for (i, record), listing in zip(named, listings, strict=True):
            if record in listing.keys:
                c.keep()
            else:
                doom_entry(c, page, i, old, thread_segment)


def doom_entry(c: _Collector, page: Page, i: int, old: Callable[[int], bool], thread_segment: str) -> None:
    """Queue a dangling per-thread run-index entry and its global twin."""
    run_segment, ns_segment = page.keys[i].rsplit("/", 2)[1:]
    twin = f"{c.root}runs/{run_segment}/{thread_segment}/{ns_segment}"
    c.doom(page, i, "dangling_run_entry", old, also=twin)


def global_runs(c: _Collector) -> Plan[None]:
    """Global run-index entries whose per-thread twin is gone (the thread pass handled the rest)."""
    runs_root = f"{c.root}runs/"

    def runs_page(page: Page) -> Plan[None]:
        c.report.scanned += len(page.keys)
        old = age_cutoff(page, c.grace)
        ours: list[tuple[int, str]] = []
        for i, key in enumerate(page.keys):
            parts = key[len(runs_root) :].split("/")
            if len(parts) != 3 or not all(map(is_own_segment, parts)):
                c.foreign()
                continue
            run_segment, thread_segment, ns_segment = parts
            if c.seen_entries.may_hold(run_segment, thread_segment, ns_segment):
                continue  # its twin was listed by the thread pass (the thread pass judged both)
            ours.append((i, f"{c.root}threads/{thread_segment}/r/{run_segment}/{ns_segment}"))
        for start in range(0, len(ours), READ_BATCH):
            chunk = ours[start : start + READ_BATCH]
            twins = yield from all_of([Get(twin) for _, twin in chunk])
            for (i, _), twin in zip(chunk, twins, strict=True):
                if twin is None:
                    c.doom(page, i, "dangling_run_entry", old)
        yield from c.flush_if_full()

    yield from for_each_emitted(pages(runs_root), runs_page)
    yield from c.flush()


class SeenEntries:
    """The per-thread run-index entries the thread pass listed, in fixed memory (a Bloom filter, 1 MiB): the
    global pass reads the twin of a global entry only when the filter says it was not listed. A false "listed"
    (about 2% at a million entries) only keeps a dangling entry until a later gc (each run salts its hashes)."""

    BITS = 1 << 23
    HASHES = 5

    def __init__(self) -> None:
        self.bits = bytearray(self.BITS // 8)
        self.salt = uuid.uuid4().bytes

    def _positions(self, run: str, thread: str, ns: str) -> list[int]:
        digest = hashlib.blake2b(f"{run}/{thread}/{ns}".encode(), digest_size=4 * self.HASHES, key=self.salt).digest()
        return [int.from_bytes(digest[4 * k : 4 * k + 4], "big") % self.BITS for k in range(self.HASHES)]

    def add(self, run: str, thread: str, ns: str) -> None:
        for bit in self._positions(run, thread, ns):
            self.bits[bit >> 3] |= 1 << (bit & 7)

    def may_hold(self, run: str, thread: str, ns: str) -> bool:
        return all(self.bits[bit >> 3] & (1 << (bit & 7)) for bit in self._positions(run, thread, ns))


def _named_checkpoint(entry: StoredObject | None) -> str | None:
    """The checkpoint id a run-index entry names; ``None`` when it is missing or cannot be read."""
    if entry is None:
        return None
    try:
        checkpoint_id = entry.body.decode()
    except UnicodeDecodeError:
        return None
    return checkpoint_id or None
