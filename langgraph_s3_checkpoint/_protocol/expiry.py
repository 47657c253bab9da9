"""Expiry markers: what lets a TTL sweep read only what came due, not every item.

One mechanism for the store's items and the node cache's entries (:class:`Expiring` is what it needs of
either). An item with a TTL records its expiry in its own frame, and reads judge it by that alone. For the
sweep to find expired items without reading the live ones, every ``put`` (the cache's ``set``) with a TTL
first files a *marker* under the minute its item expires in::

    store/ttl/{minute}/{nonce}      frame {"item": the item's key below store/ns/}
    store/ttl-filed                 frame {"format": 1, "swept_through": minute}: every item is filed
    cache-ttl/{minute}/{nonce}      the node cache's (beside cache/, whose readers and tools never see them):
    cache-ttl-filed                 the item is an entry's key below cache/

``minute`` is the expiry in whole minutes since the epoch, nine digits, so markers list in expiry order;
``nonce`` is 32 hex digits (random for a put's marker, derived from the item's key and ETag for the ones the
sweep files), so a marker's key is never reused by another writer. The item's key lives in the body, not the
key: markers stay one folder level deep whatever the item's labels (S3 allows 1,024 bytes per key, SeaweedFS
255 per path part), and the folders a filer-backed server keeps after deletes are one per minute.

The sweep (:func:`sweep`) lists markers from the start of the minutes not yet swept up to the minute under
way and stops at the first later one, so with nothing due it costs one LIST. Each listed marker's item is
read and judged by its own frame, never by the marker:

* expired (by the sweeper's clock, as every read judges it): deleted with ``DeleteIfMatch`` on the ETag just
  read, so an item rewritten or refreshed meanwhile survives (a refused delete is read again: gone counts as
  deleted, a new version is judged again);
* expiring later in the minute under way: its marker stays, for the next sweep;
* its expiry moved later (``refresh_on_read``, a put, a reader whose clock is behind): a put's own marker
  already covers it; a refreshed item is filed again under its new minute;
* no TTL any more, or the item is gone: the marker goes;
* damaged: logged, and filed again a day later (it does not stop the sweep, and is retried).

A marker is removed only after its item is gone or covered by another marker, in a later round trip, so a
crash anywhere leaves every item with an expiry named by some marker of a minute no later than its own (a
marker is written *before* its item: a put that dies between the two leaves a marker whose item is missing or
older, judged as above). An item that expired by ``now`` is therefore deleted by a sweep at ``now``, as a
sweep that read every item would.

Items written by releases before markers have none. The first sweep that finds no ``store/ttl-filed`` reads
every item once, as sweeps used to: deletes what expired, files a marker for every other item with a TTL,
then writes ``store/ttl-filed``. ``sweep(full=True)`` does that pass again (after processes of an older
release wrote items while this one already swept). ``swept_through`` remembers the last minute swept, so a
sweep starts listing a day before it (:data:`LATE_MINUTES`) instead of at the first minute ever filed:
filer-backed servers (SeaweedFS) keep every emptied minute folder and walk them in a listing, but seek past
them with ``start_after``. A marker filed more than a day before the minute swept last (a writer whose clock
is that far behind, writing an item that expired on arrival) is found only by a full sweep.
"""

from __future__ import annotations

import hashlib
import logging
import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

from ..errors import CorruptObjectError, NewerFormatError
from .codec import Codec
from .plans import any_under, chunks, deletes, for_each_emitted, one, pages
from .requests import (
    CREATE,
    PRECONDITION_FAILED,
    DeleteIfMatch,
    Get,
    Page,
    Plan,
    Put,
    Request,
    StoredObject,
)

logger = logging.getLogger("langgraph_s3_checkpoint.store")

MARKERS = "ttl/"
"""Folder of the markers, under the store's root."""
FILED = "ttl-filed"
"""The object saying every item is filed (and the last minute swept), under the store's root."""
FORMAT = 1
MINUTE_DIGITS = 9
LAST_MINUTE = 10**MINUTE_DIGITS - 1
"""Expiries past this minute (year 3871) are filed under it: sweeping those late never matters."""
NONCE_DIGITS = 32
CHUNK = 128
"""Due markers judged at once (bounds the bodies held in memory)."""
ATTEMPTS = 3
"""Rounds of reading and conditionally deleting an item that keeps changing under the sweep."""
LATE_MINUTES = 24 * 60
"""How far before the last minute swept a sweep starts listing."""
DAMAGED_RETRY_MINUTES = 24 * 60
"""A damaged item's marker is filed again this much later (logged at each look)."""
RECORD_EVERY_MINUTES = 60
"""``swept_through`` is written again once it moved this much (a PUT an hour, not one per sweep)."""


def minute_of(timestamp: float) -> int:
    """The marker minute of a POSIX time: whole minutes since the epoch, capped at :data:`LAST_MINUTE`."""
    return min(LAST_MINUTE, max(0, math.floor(timestamp / 60)))


def random_nonce() -> str:
    return uuid.uuid4().hex


def filed_nonce(item_key: str, etag: str) -> str:
    """The nonce of a marker the sweep files for one version of an item: two sweeps filing the same version
    write the same key, and no put's marker (random) is ever that key."""
    digest = hashlib.sha256(f"{item_key}\n{etag.strip(chr(34))}".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:NONCE_DIGITS]


@dataclass(frozen=True)
class Markers:
    """Keys of the markers of one store prefix. Pure."""

    root: str
    """What the names of the markers and of the filed object start with (the store's ``{prefix}store/``, the
    cache's ``{prefix}cache-``)."""
    items_root: str
    """The folder of the items (a marker names its item below it)."""

    @property
    def folder(self) -> str:
        return f"{self.root}{MARKERS}"

    @property
    def filed(self) -> str:
        return f"{self.root}{FILED}"

    def key(self, minute: int, nonce: str) -> str:
        return f"{self.folder}{minute:0{MINUTE_DIGITS}d}/{nonce}"

    def start_after(self, minute: int) -> str:
        """A ``start_after`` that lists the markers of ``minute`` and later."""
        return f"{self.folder}{minute:0{MINUTE_DIGITS}d}"

    def minute(self, key: str) -> int | None:
        """The minute of a marker key; ``None`` for anything else in the folder (foreign: skipped, never
        deleted)."""
        if not key.startswith(self.folder):
            return None
        minute, slash, nonce = key[len(self.folder) :].partition("/")
        if not (slash and len(minute) == MINUTE_DIGITS and minute.isdigit() and minute.isascii()):
            return None
        if len(nonce) != NONCE_DIGITS or not all(c in "0123456789abcdef" for c in nonce):
            return None
        return int(minute)


@dataclass
class SweepState:
    """What one store remembers between its sweeps."""

    filed: bool = False
    """``store/ttl-filed`` was seen or written: every item older than it has a marker."""
    swept_through: int | None = None
    """The last minute a sweep of this store went through (``None``: list from the first)."""
    recorded: int | None = None
    """The ``swept_through`` last read from or written to ``store/ttl-filed``."""


class Judged(Protocol):
    """What the sweep reads of one version of an item, from its frame alone (the store's
    :class:`~.store.Expiry`, the cache's :class:`~.cache.EntryExpiry`)."""

    @property
    def key(self) -> str: ...

    @property
    def etag(self) -> str: ...

    @property
    def expires(self) -> float | None:
        """The POSIX time its marker is filed under (``None``: it never expires, nothing to file)."""

    @property
    def put_derived(self) -> bool:
        """Whether the put that wrote this version filed a marker for it at ``expires``."""

    def expired(self, now: datetime) -> bool:
        """Whether it has expired at ``now``, as every read judges it."""


E = TypeVar("E", bound=Judged)


@dataclass(frozen=True)
class Expiring(Generic[E]):
    """What the sweep needs of the objects it sweeps (the store's items, the node cache's entries)."""

    markers: Markers
    state: SweepState
    frames: Codec
    """Frames the markers and the filed object."""
    now: Callable[[], datetime]
    is_item: Callable[[str], bool]
    """Whether a listed key below ``markers.items_root`` is an item (anything else is skipped)."""
    peek: Callable[[str, StoredObject, datetime], E]
    """An item's expiry from its frame; :class:`CorruptObjectError` or :class:`NewerFormatError` if it has none."""
    forget: Callable[[Sequence[E]], Plan[None]] | None = None
    """Removes what goes with deleted items (the store's vector entries)."""


@dataclass
class Swept:
    """What one sweep found and did."""

    read: int = 0
    """Items read."""
    expired: int = 0
    """Items found expired (each deleted unless rewritten meanwhile, or a dry run)."""
    deleted: int = 0
    skipped: int = 0
    """Keys below the items' folder that are not items, listed by a pass over every item: left alone."""
    damaged: list[str] = field(default_factory=list)
    """Items whose frame cannot be read: left alone (logged, looked at again a day later)."""


@dataclass
class _Due(Generic[E]):
    """One item to judge, and the due markers naming it (none in a full pass)."""

    item: str
    markers: list[str] = field(default_factory=list)
    refused: E | None = None
    """The expired version whose conditional delete was refused: if the item is gone now, it counts as deleted."""


def file_markers(owner: Expiring[E], expiries: Sequence[tuple[str, float]]) -> Plan[None]:
    """A put's markers, one per (item key, expiry), sent before the items themselves."""
    if expiries:
        yield [
            Put(owner.markers.key(minute_of(expires), random_nonce()), _marker_body(owner, item), expires=False)
            for item, expires in expiries
        ]


def file_if_empty(owner: Expiring[E]) -> Plan[None]:
    """Write the filed object for a store (cache) that holds nothing yet (``setup``), unless it exists: every
    item it will hold is written with its marker, so its first sweep need not read them all."""
    if owner.state.filed:
        return
    if (yield from any_under(owner.markers.items_root)):
        return
    frame = {"format": FORMAT, "swept_through": None}
    # Create-only: refused when a sweep or another setup wrote it first, and then it exists as well.
    yield from one(Put(owner.markers.filed, owner.frames._frame(frame), mode=CREATE, expires=False))
    owner.state.filed = True


def sweep(owner: Expiring[E], full: bool, *, dry_run: bool = False) -> Plan[Swept]:
    """Delete every expired item whose marker came due (every item, in a first or ``full`` sweep). See the
    module docstring. ``dry_run`` reads as a sweep does and writes nothing (it files and deletes nothing, and
    does not record where it swept): what it reports expired is what a sweep would delete."""
    now = owner.now()
    through = minute_of(now.timestamp())
    state = owner.state
    swept = Swept()
    start: int | None = state.swept_through
    if full or not state.filed:
        recorded = None if full else (yield from _read_filed(owner))
        if recorded is None:
            yield from _file_every_item(owner, now, swept, dry_run)
            if dry_run:
                return swept  # every item was read: the markers would only name some of them again
            start = None  # every marker ever filed is judged once: those of items the full pass deleted go
        else:
            state.recorded = recorded if recorded >= 0 else None
            start = state.recorded
    yield from _sweep_due(owner, now, through, start, swept, dry_run)
    if dry_run:
        return swept
    if start is None or state.recorded is None or through - state.recorded >= RECORD_EVERY_MINUTES:
        frame = {"format": FORMAT, "swept_through": through}
        yield from one(Put(owner.markers.filed, owner.frames._frame(frame), expires=False))
        state.recorded = through
    state.filed, state.swept_through = True, through
    return swept


def _read_filed(owner: Expiring[E]) -> Plan[int | None]:
    """``swept_through`` of the filed object (``-1`` when it has none); ``None`` when it is missing, not ours or
    unreadable: then nothing says every item has a marker."""
    obj = yield from one(Get(owner.markers.filed))
    if obj is None:
        return None
    try:
        frame = owner.frames._unframe(owner.markers.filed, obj.body)
        swept = frame["swept_through"]
        return -1 if swept is None else int(swept)
    except (CorruptObjectError, KeyError, TypeError, ValueError):
        logger.warning("TTL sweep found %r unreadable; reading every item again", owner.markers.filed)
        return None


def _file_every_item(owner: Expiring[E], now: datetime, swept: Swept, dry_run: bool) -> Plan[None]:
    """The pass for items filed by no marker: read every item, delete the expired ones, file the others that
    have a TTL. Page by page, :data:`CHUNK` items at a time."""

    def file_page(page: Page) -> Plan[None]:
        items = [key for key in page.keys if owner.is_item(key)]
        swept.skipped += len(page.keys) - len(items)
        for chunk in chunks(items, CHUNK):
            yield from _settle(owner, [_Due[E](item) for item in chunk], now, swept, dry_run)

    yield from for_each_emitted(pages(owner.markers.items_root), file_page)


def _sweep_due(
    owner: Expiring[E], now: datetime, through: int, start: int | None, swept: Swept, dry_run: bool
) -> Plan[None]:
    """Judge the items of every marker of a minute up to ``through``, listing from ``LATE_MINUTES`` before
    ``start``; stop at the first later minute."""
    start_after = None if start is None else owner.markers.start_after(max(0, start - LATE_MINUTES))

    def settle_page(page: Page) -> Plan[bool]:
        due: list[str] = []
        ended = False
        for key in page.keys:
            minute = owner.markers.minute(key)
            if minute is None:
                continue
            if minute > through:
                ended = True
                break
            due.append(key)
        for chunk in chunks(due, CHUNK):
            yield from _settle_markers(owner, chunk, now, swept, dry_run)
        return not ended

    yield from for_each_emitted(pages(owner.markers.folder, start_after=start_after), settle_page)


def _settle_markers(owner: Expiring[E], keys: Sequence[str], now: datetime, swept: Swept, dry_run: bool) -> Plan[None]:
    """Read due markers for their items, then judge the items."""
    bodies = yield [Get(key) for key in keys]
    by_item: dict[str, _Due[E]] = {}
    for key, obj in zip(keys, bodies, strict=True):
        if obj is None:
            continue  # another sweep settled it since the listing
        item = _item_of_marker(owner, key, obj.body)
        if item is not None:
            by_item.setdefault(item, _Due[E](item)).markers.append(key)
    yield from _settle(owner, list(by_item.values()), now, swept, dry_run)


def _item_of_marker(owner: Expiring[E], key: str, body: bytes) -> str | None:
    """The item a marker names; ``None`` (logged, left alone) for a body that is not a marker of ours."""
    try:
        frame = owner.frames._unframe(key, body)
        item = f"{owner.markers.items_root}{frame['item']}"
    except (CorruptObjectError, KeyError, TypeError) as exc:
        logger.warning("TTL sweep left %r, which is not a marker it can read: %s", key, exc)
        return None
    if not owner.is_item(item):
        logger.warning("TTL sweep left %r, which names %r, not an item it sweeps", key, item)
        return None
    return item


def _settle(owner: Expiring[E], dues: list[_Due[E]], now: datetime, swept: Swept, dry_run: bool) -> Plan[None]:
    """Judge each item by its frame and act (module docstring); then remove the markers that no longer cover
    anything, and what goes with the items deleted (:attr:`Expiring.forget`). Counts into ``swept``."""
    settling = _Settlement(owner, now)
    pending = dues
    for attempt in range(ATTEMPTS):
        objs = yield [Get(due.item) for due in pending]
        deletions = [(due, e) for due, obj in zip(pending, objs, strict=True) if (e := settling.judge(due, obj))]
        if attempt == 0:
            swept.read += sum(obj is not None for obj in objs)
            swept.expired += len(deletions)
            if dry_run:
                swept.damaged += settling.damaged
                return
        filings = settling.take_files()
        if not deletions:
            if filings:
                yield filings
            break
        # The deletes travel with the markers filed so far (items filed again, in the same round trip).
        replies = (yield [*(DeleteIfMatch(e.key, e.etag) for _, e in deletions), *filings])[: len(deletions)]
        pending = settling.refused(deletions, replies)
        if not pending:
            break
        if attempt == ATTEMPTS - 1:
            # Still changing: filed for the next minute, so that the next sweep looks again.
            for due in pending:
                settling.refile(due, minute_of(now.timestamp()) + 1, random_nonce())
    yield from _conclude(owner, settling, swept)


def _conclude(owner: Expiring[E], settling: _Settlement[E], swept: Swept) -> Plan[None]:
    """File what is still to file; then remove the markers that no longer cover anything, and what goes with
    the items deleted."""
    if filings := settling.take_files():
        yield filings
    if settling.drop:
        # Only now: each marker goes once its item is gone or the marker filing it again has landed.
        yield deletes(sorted(set(settling.drop)))
    if owner.forget is not None:
        yield from owner.forget(settling.gone)
    swept.deleted += len(settling.gone)
    swept.damaged += settling.damaged


@dataclass
class _Settlement(Generic[E]):
    """What judging a chunk of items decided: markers to file, markers to remove, items deleted."""

    owner: Expiring[E]
    now: datetime
    files: dict[str, Put] = field(default_factory=dict)
    drop: list[str] = field(default_factory=list)
    gone: list[E] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)

    def judge(self, due: _Due[E], obj: StoredObject | None) -> E | None:
        """Settle one item as read; the expired version to delete (``DeleteIfMatch``), if it is one."""
        if obj is None:
            self.drop += due.markers
            if due.refused is not None:
                self.gone.append(due.refused)
            return None
        try:
            expiry = self.owner.peek(due.item, obj, self.now)
        except (CorruptObjectError, NewerFormatError) as exc:
            # A newer release's item is sound: left alone like a damaged one, never deleted.
            logger.warning("TTL sweep left %r, which cannot be read: %s", due.item, exc)
            self.damaged.append(due.item)
            self.refile(due, minute_of(self.now.timestamp()) + DAMAGED_RETRY_MINUTES, filed_nonce(due.item, obj.etag))
            return None
        if expiry.expires is None:
            self.drop += due.markers  # a put without a TTL replaced it: nothing to sweep
            return None
        if expiry.expired(self.now):
            return expiry
        minute = minute_of(expiry.expires)
        markers = self.owner.markers
        if any(markers.minute(key) == minute for key in due.markers):
            # Filed where it belongs, in the minute under way: it stays for the next sweep, the others go.
            self.drop += [key for key in due.markers if markers.minute(key) != minute]
        elif expiry.put_derived and due.markers:
            self.drop += due.markers  # the put that wrote this version filed its own marker first
        else:
            self.refile(due, minute, filed_nonce(due.item, expiry.etag))
        return None

    def refused(self, deletions: Sequence[tuple[_Due[E], E]], replies: Sequence[Any]) -> list[_Due[E]]:
        """Settle the answers of the conditional deletes; the items whose delete was refused, to read again."""
        pending = []
        for (due, expired), reply in zip(deletions, replies, strict=True):
            if reply is PRECONDITION_FAILED:
                # Rewritten or refreshed since it was read, or already gone: deleted by another sweep, or by
                # this one when the answer was lost and the retry found it missing (SeaweedFS answers 412).
                due.refused = expired
                pending.append(due)
            else:
                self.drop += due.markers
                self.gone.append(expired)
        return pending

    def take_files(self) -> list[Request]:
        """The markers to file decided so far (each once)."""
        filings: list[Request] = list(self.files.values())
        self.files.clear()
        return filings

    def refile(self, due: _Due[E], minute: int, nonce: str) -> None:
        """File ``due``'s item under ``minute``; its markers go once that one is written (unless it is one)."""
        key = self.owner.markers.key(minute, nonce)
        if key not in due.markers:
            self.files[key] = Put(key, _marker_body(self.owner, due.item), expires=False)
        self.drop += [marker for marker in due.markers if marker != key]


def _marker_body(owner: Expiring[E], item: str) -> bytes:
    return owner.frames._frame({"item": item[len(owner.markers.items_root) :]})
