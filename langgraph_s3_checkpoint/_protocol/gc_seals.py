"""gc's side of the seals (:mod:`.seals`): what the flat listing shows of a thread (whether its keys are those its
seal's key says gc left, so that it need not be scanned), and, for a thread that is scanned, reading its seal, deciding
per namespace whether the seal holds, and writing the new one. The rules of what a seal proves are :mod:`.seals`'; the
scan that uses them is :class:`.garbage_collection._Collector`, which takes these methods from :class:`SealKeeping`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import seals
from .chain import Standing
from .gc_run_index import Sightings
from .keys import KeyKind, classify
from .plans import deletes, for_each_emitted, one, pages
from .requests import Get, Page, Plan, Put

if TYPE_CHECKING:
    from .codec import Codec
    from .garbage_collection import GcReport, _Walk


@dataclass
class SealUse:
    """A namespace's seal from the last gc and what decides whether it holds (:mod:`.seals`)."""

    part: seals.Part
    check: seals.Check
    usable: bool | None = None
    """Decided when the walk reaches the sealed range."""


@dataclass
class ThreadListed:
    """What the flat listing of every thread showed of one thread: the :class:`.seals.Summary` of the keys gc
    judges (:func:`.seals.judged`), and for the report, how many there are, how many are foreign, how many are
    records."""

    summary: seals.Summary = field(default_factory=seals.Summary)
    scanned: int = 0
    foreign: int = 0
    records: int = 0
    heads: list[str] = field(default_factory=list)
    """The segments of its namespaces with a head."""


@dataclass
class Listed:
    """The thread the flat listing is in (its keys come together, page after page)."""

    thread: ThreadListed = field(default_factory=ThreadListed)

    def note(self, prefix: str, segment: str, page: Page, seen: Sightings) -> None:
        """Some keys of the thread at ``prefix``; its 0.1.x run-index twins go into ``seen`` (the global pass then
        reads no twin of theirs, whether the thread is scanned or not), and its namespaces with a head into the
        thread's listing (gc keeps the run-index entries of a thread it does not scan)."""
        thread = self.thread
        etags = page.etags if len(page.etags) == len(page.keys) else [None] * len(page.keys)
        for key, etag in zip(page.keys, etags, strict=True):
            relative = key[len(prefix) :]
            if not seals.judged(relative):
                continue
            thread.summary.add(relative, etag)
            thread.scanned += 1
            kind = classify(relative)
            if kind is KeyKind.RECORD:
                thread.records += 1
            elif kind is KeyKind.UNKNOWN:
                thread.foreign += 1
            elif kind is KeyKind.RUN_ENTRY:
                _, run_segment, ns_segment = relative.split("/")
                seen.twins.add(run_segment, segment, ns_segment)
            elif kind is KeyKind.HEAD:
                thread.heads.append(relative.split("/")[1])

    def take(self) -> ThreadListed:
        """The thread's listing, once its last key was met; the next thread starts afresh."""
        thread, self.thread = self.thread, ThreadListed()
        return thread


class SealKeeping:
    """The seal-keeping part of gc's collector, for one thread's scan (``_Collector.for_one_thread``)."""

    codec: Codec
    root: str
    report: GcReport
    old_seal: dict[str, seals.Part]
    new_seal: dict[str, seals.Part]
    seals_found: list[seals.SealKey]
    seal_read: str | None
    stale_seals: list[str]
    summary: seals.Summary | None
    unsettled_thread: bool

    def read_seal(self, key: str) -> Plan[None]:
        """A seal of the thread, which the listing of seals shows."""
        obj = yield from one(Get(key))
        self.old_seal = {} if obj is None else seals.decode(self.codec, key, obj.body)
        self.seal_read = key

    def remove_seals(self) -> Plan[None]:
        """Delete the seals queued: those of threads that are gone, those a newer seal replaced (nothing depends on
        a seal: it only saves reads). Never in a dry run."""
        keys = self.stale_seals[:]
        del self.stale_seals[:]
        if keys and not self.report.dry_run:
            yield deletes(keys)

    def write_seal(self, segment: str) -> Plan[None]:
        """Write the thread's seal when it changed, and queue its other seals for deletion (never in a dry run).
        Its key says what the thread's next listing shows if nothing changes (:class:`.seals.Summary`), unless the
        scan left something to judge again (:attr:`unsettled_thread`)."""
        if self.report.dry_run:
            return
        summary = self.summary
        assert summary is not None
        key = None
        if summary.count > 0:
            listed = None if self.unsettled_thread else summary.digest
            if listed is not None or self.new_seal:
                key = seals.key_of(self.root, segment, listed)
        if key is not None and (key != self.seal_read or self.new_seal != self.old_seal):
            yield [Put(key, seals.encode(self.codec, self.new_seal), expires=False)]
        self.stale_seals.extend(seal.key for seal in self.seals_found if seal.key != key)

    def seal_for(self, segment: str, walk: _Walk) -> SealUse | None:
        """The namespace's seal, if the head has not gone back below the head it was made at."""
        part = self.old_seal.get(segment)
        head_id = walk.chain.head_id
        if part is None or head_id is None or head_id < part.head:
            return None
        walk.met_seal_head = head_id == part.head
        return SealUse(part, seals.Check(part, walk.records))

    def seal_namespace(self, segment: str, walk: _Walk) -> None:
        """The namespace's part of the thread's new seal: the records it found committed, or the last gc's if
        it still held and no new one can be made (a young record below the new top); none without a head."""
        if walk.headless or walk.aborted:
            return
        head_id = walk.chain.head_id
        assert head_id is not None
        part = None
        if walk.builder is not None and walk.chain_sure and walk.refs_known:
            part = walk.builder.part(head_id)
        use = walk.seal
        if use is not None and use.usable and (part is None or part.same_records(use.part)):
            part = use.part  # it still holds and nothing new is sealed: no need to write it again
        if part is not None:
            self.new_seal[segment] = part

    def enter_sealed_range(self, walk: _Walk, first_id: str) -> None:
        """Decide, at the first key at or below the seal's ``top``, whether the seal holds (module docstring of
        :mod:`.seals`); if it does, the sealed records' large values and runs are known from it."""
        use = walk.seal
        assert use is not None
        connected = walk.met_seal_head or (
            first_id == use.part.head and walk.chain.decided(first_id) is Standing.COMMITTED
        )
        use.usable = use.check.valid and walk.chain_sure and connected
        if not use.usable:
            return
        walk.referenced.update(f"{walk.prefix}{ref}" for ref in use.part.refs)
        if walk.runs is not None:
            walk.runs.update(use.part.runs)
        if walk.builder is not None:
            walk.builder.refs.update(use.part.refs)
            walk.builder.runs.update(use.part.runs)

    def check_seal(self, use: SealUse, records: str) -> Plan[None]:
        """Compare the sealed range with a listing of ``c/`` (keys only) before judging a namespace of more
        than one page."""

        def check_page(page: Page) -> Plan[None]:
            use.check.page(page)
            yield from ()

        yield from for_each_emitted(pages(records), check_page)
