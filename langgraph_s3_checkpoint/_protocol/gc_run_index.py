"""gc's judgement of the run index (``runs/{run}/{T}/{N}``, and the twin ``threads/{T}/r/{run}/{N}`` that 0.1.x
wrote beside it): which entries still lead a rollback to a run's checkpoints or writes, and which dangle. The
thread pass judges each thread's 0.1.x twins with their global entries; the global pass judges the rest by their
namespace, which the thread pass saw (or a GET of its head shows)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, TypeVar

from .keys import KeyKind, Layout, classify, is_own_segment
from .plans import READ_BATCH, age_cutoff, all_of, chunks, for_each_emitted, pages
from .requests import Get, ListKeys, Page, Plan, StoredObject

if TYPE_CHECKING:
    from .garbage_collection import _Collector, _Namespace

T = TypeVar("T")


def run_entries(c: _Collector, prefix: str, namespaces: dict[str, _Namespace]) -> Plan[None]:
    """Judge a thread's 0.1.x run-index twins (``r/{run}/{ns}``), each with its global entry."""
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
            c.sightings.twins.add(run_segment, thread_segment, ns_segment)
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
    for chunk in chunks(unproven, READ_BATCH):
        named: list[tuple[int, str]] = []
        for i, info, checkpoint_id in (yield from _checkpoints_named(page, chunk)):
            if checkpoint_id is None or checkpoint_id == info.head_id:
                c.keep()
            elif checkpoint_id in info.garbage_records:
                doom_entry(c, page, i, old, thread_segment)
            else:
                named.append((i, Layout.record_in(info.prefix, checkpoint_id)))
        for i, _, there in (yield from _records_there(named)):
            if there:
                c.keep()
            else:
                doom_entry(c, page, i, old, thread_segment)


def doom_entry(c: _Collector, page: Page, i: int, old: Callable[[int], bool], thread_segment: str) -> None:
    """Queue a dangling per-thread run-index entry and its global twin."""
    run_segment, ns_segment = page.keys[i].rsplit("/", 2)[1:]
    twin = f"{c.root}runs/{run_segment}/{thread_segment}/{ns_segment}"
    c.doom(page, i, "dangling_run_entry", old, also=twin)


def global_runs(c: _Collector) -> Plan[None]:
    """Global run-index entries the thread pass did not judge with a 0.1.x twin (every entry 0.2 writes). Such an
    entry stays while a committed record of its namespace names its run, or the checkpoint it names is there (a run
    that only wrote pending writes to another run's checkpoint, resuming it); it dangles once its namespace is gone
    (``delete_thread``, ``expire_threads``, a first put that never committed) or holds neither (a put that died or
    lost, a rollback that died before its last step). What the thread pass saw decides without a request
    (:class:`Sightings`); an entry costs a GET of its namespace's head when the thread pass did not see the
    namespace (created since, or gone), and a GET of itself and a 1-key LIST of the checkpoint it names when no
    committed record names its run; where the thread pass could not know the runs (a damaged record), it stays."""
    runs_root = f"{c.root}runs/"

    def runs_page(page: Page) -> Plan[None]:
        c.report.scanned += len(page.keys)
        old = age_cutoff(page, c.grace)
        unseen: list[tuple[int, str]] = []
        unproven: list[tuple[int, str]] = []
        for i, key in enumerate(page.keys):
            parts = key[len(runs_root) :].split("/")
            if len(parts) != 3 or not all(map(is_own_segment, parts)):
                c.foreign()
                continue
            run_segment, thread_segment, ns_segment = parts
            ns_prefix = f"{c.root}threads/{thread_segment}/ns/{ns_segment}/"
            seen = c.sightings.of_entry(run_segment, thread_segment, ns_segment)
            if seen is Seen.KEPT:
                c.keep()
            elif seen is Seen.RUN_UNNAMED:
                unproven.append((i, ns_prefix))
            elif seen is Seen.NAMESPACE_UNSEEN:
                unseen.append((i, ns_prefix))
        for chunk in chunks(unseen, READ_BATCH):
            heads = yield from all_of([Get(Layout.head_in(ns_prefix)) for _, ns_prefix in chunk])
            for (i, _), head in zip(chunk, heads, strict=True):
                if head is None:
                    c.doom(page, i, "dangling_run_entry", old)
                else:
                    c.keep()
        yield from judge_by_named_checkpoint(c, page, unproven, old)
        yield from c.flush_if_full()

    yield from for_each_emitted(pages(runs_root), runs_page)
    yield from c.flush()


def judge_by_named_checkpoint(
    c: _Collector, page: Page, unproven: list[tuple[int, str]], old: Callable[[int], bool]
) -> Plan[None]:
    """Entries of runs that no committed record of their namespace names: each stays while the checkpoint it names
    is there (its record: gc has deleted the garbage ones by now; a dry run counts those it would have), and is
    garbage otherwise, going once past the grace as every garbage. An entry whose body cannot be read stays
    (``delete_for_runs`` then walks the whole namespace)."""
    for chunk in chunks(unproven, READ_BATCH):
        named: list[tuple[int, str]] = []
        for i, ns_prefix, checkpoint_id in (yield from _checkpoints_named(page, chunk)):
            if checkpoint_id is None:
                c.keep()
            else:
                named.append((i, Layout.record_in(ns_prefix, checkpoint_id)))
        for i, record, there in (yield from _records_there(named)):
            if there and not c.sightings.doomed.may_hold(record):
                c.keep()
            else:
                c.doom(page, i, "dangling_run_entry", old)


class Bloom:
    """A set of key segments in fixed memory (1 MiB, taken at the first ``add``: a gc makes five and most hold
    nothing): a false "held" (about 2% at a million) is possible, a false "not held" is not. Salted per gc, so a
    false "held" does not repeat."""

    BITS = 1 << 23
    HASHES = 5

    def __init__(self) -> None:
        self.bits = bytearray()
        self.salt = uuid.uuid4().bytes

    def _positions(self, segments: tuple[str, ...]) -> list[int]:
        digest = hashlib.blake2b("/".join(segments).encode(), digest_size=4 * self.HASHES, key=self.salt).digest()
        return [int.from_bytes(digest[4 * k : 4 * k + 4], "big") % self.BITS for k in range(self.HASHES)]

    def add(self, *segments: str) -> None:
        if not self.bits:
            self.bits = bytearray(self.BITS // 8)
        for bit in self._positions(segments):
            self.bits[bit >> 3] |= 1 << (bit & 7)

    def may_hold(self, *segments: str) -> bool:
        return bool(self.bits) and all(self.bits[bit >> 3] & (1 << (bit & 7)) for bit in self._positions(segments))


class Seen(Enum):
    """What the thread pass saw of a global run-index entry's namespace (:meth:`Sightings.of_entry`)."""

    TWIN = "its 0.1.x twin: judged with it by the thread pass"
    KEPT = "a committed record names its run, or its runs could not be known: it stays"
    RUN_UNNAMED = "no committed record names its run: judged by the checkpoint it names"
    NAMESPACE_UNSEEN = "no head seen: judged by a GET of its head"


@dataclass
class Sightings:
    """What the thread pass saw, for the global pass to judge the run index by, in fixed memory. Each set only ever
    makes an entry stay: its false "held" keeps a dangling entry until a later gc, never deletes a live one (``doomed``
    counts in a dry run only, where nothing is deleted)."""

    twins: Bloom = field(default_factory=Bloom)
    """0.1.x per-thread twins listed (run, thread, ns segments): the thread pass judged them with their entries."""
    runs: Bloom = field(default_factory=Bloom)
    """(run, thread, ns) of every run a committed record names, in namespaces whose runs are known."""
    runs_known: Bloom = field(default_factory=Bloom)
    """(thread, ns) with a head and every committed record's run known."""
    runs_unknown: Bloom = field(default_factory=Bloom)
    """(thread, ns) with a head whose runs could not be known (a record that could not be read)."""
    doomed: Bloom = field(default_factory=Bloom)
    """In a dry run, the keys it would have deleted (a real run has deleted them before the global pass)."""

    def of_entry(self, run_segment: str, thread_segment: str, ns_segment: str) -> Seen:
        """What the thread pass saw of a global entry's namespace."""
        if self.twins.may_hold(run_segment, thread_segment, ns_segment):
            return Seen.TWIN
        if self.runs.may_hold(run_segment, thread_segment, ns_segment):
            return Seen.KEPT
        if self.runs_unknown.may_hold(thread_segment, ns_segment):
            return Seen.KEPT
        if self.runs_known.may_hold(thread_segment, ns_segment):
            return Seen.RUN_UNNAMED
        return Seen.NAMESPACE_UNSEEN

    def namespace(self, thread_segment: str, ns_segment: str, committed: bool, run_segments: set[str] | None) -> None:
        if not committed:
            return
        if run_segments is None:
            self.runs_unknown.add(thread_segment, ns_segment)
            return
        self.runs_known.add(thread_segment, ns_segment)
        for run_segment in run_segments:
            self.runs.add(run_segment, thread_segment, ns_segment)


def _checkpoints_named(page: Page, chunk: Sequence[tuple[int, T]]) -> Plan[list[tuple[int, T, str | None]]]:
    """The entries of ``chunk`` (indices into ``page``, each with what its judge needs) read in one batch, each with the
    checkpoint id it names (``None``: its body cannot be read); an entry deleted since the listing (a rollback of the
    run finished) is left out."""
    bodies = yield from all_of([Get(page.keys[i]) for i, _ in chunk])
    return [(i, x, _named_checkpoint(body)) for (i, x), body in zip(chunk, bodies, strict=True) if body is not None]


def _records_there(named: list[tuple[int, str]]) -> Plan[list[tuple[int, str, bool]]]:
    """Each (entry, record) of ``named`` with whether the record is there, by 1-key LISTs in one batch."""
    listings = (yield from all_of([ListKeys(record, max_keys=1) for _, record in named])) if named else []
    return [(i, record, record in listing.keys) for (i, record), listing in zip(named, listings, strict=True)]


def _named_checkpoint(entry: StoredObject | None) -> str | None:
    """The checkpoint id a run-index entry names; ``None`` when it is missing or cannot be read."""
    if entry is None:
        return None
    try:
        checkpoint_id = entry.body.decode()
    except UnicodeDecodeError:
        return None
    return checkpoint_id or None
