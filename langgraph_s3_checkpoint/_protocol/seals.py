"""What gc found committed once, so that the next gc need not read those records again.

To tell committed records from leftovers, gc follows each namespace's commit chain (:mod:`.chain`), and a
record's place in it (``previous_head``, ``detached``) is in its body only: the key, size, ETag and date a
listing shows cannot say whether a record older than the head is a link of the chain or an orphan beside it
(both were written by a put that sent its head too). Nor can they say which large values and runs the
committed records reference. So the first gc reads every record; this module lets it write down what it
found, and later ones trust it for the records that have not changed since.

A *seal* is one small object per thread, ``{prefix}_gc/{T}/sealed.{listed}`` (or ``sealed``, below), holding for
each namespace of T:

``head``
    The head's checkpoint id when the seal was made.
``top``, ``cutoff``, ``count``, ``digest``
    The sealed records: every record with an id at or below ``top`` whose LastModified is before ``cutoff``
    (the server's clock, at least the grace period before the listing). gc found each of them committed and
    deleted every other record in that range. ``digest`` is a SHA-256 of their keys and ETags in listing order.
``refs``, ``runs``
    The large values (``b/...`` below the namespace) and the run ids the sealed records reference (their
    metadata's ``run_id``). A run that only wrote pending writes to a sealed checkpoint is not among them: gc
    keeps its run-index entry by the checkpoint the entry names, seal or not (``gc._Collector.run_entries``).

A later gc uses a namespace's seal only if (1) the head has not gone back below ``head``; (2) the records at
or below ``top`` are exactly the sealed ones, unchanged (same count and digest, no younger record among them:
a record restored, copied or forked there since); (3) the chain walked down from today's head reaches the
sealed head as committed, so the chain below it is the one sealed. Then the sealed records are committed
without being read, and their large values and runs are known. Otherwise the namespace is judged by reading,
as without a seal. Records committed since the seal are read (that is the work to do), and the new seal
covers them once they are older than the grace period.

**What its key says: the thread's listing.** gc's scan of a thread lists its keys (those directly under
``threads/{T}/`` and under ``ns/`` and ``r/``: :func:`judged`) with their ETags; ``listed`` is a digest of them
(:class:`Summary`: count and a sum of one hash per key and ETag, so that it does not depend on the order they were
met in), less those the scan deleted: what a listing shows of the thread once gc is done, if nothing changes. The
next gc walks every thread in one flat listing (:func:`.plans.folder_by_folder`, 1,000 keys a page, in step with the
listing of the seals, :class:`Cursor`) and computes the same digest for each; a thread whose digest is its seal's is
exactly as gc left it (same keys, same bytes: an ETag is the object's MD5), so gc would judge it the same again, and
it is skipped, unread. Any other thread is scanned as before. The key carries the digest only when the scan left
nothing whose verdict changes while nothing changes (a thread is then *settled*): no garbage kept for its age (it
goes later), no record or head it could not read, every chain followed, no head that appeared meanwhile, no
``name`` put back; otherwise the seal is ``sealed`` (0.1.0's form, which it reads too) and the thread is scanned
again by each gc until it settles. A skipped thread only keeps: the digest is a way to do nothing. A key that
changed and changed back to the same bytes is judged as before; one that appeared, went or changed makes the
digest differ. gc 0.1.0 takes only ``sealed`` for a seal and leaves any other key under ``_gc/`` alone (it counts it
as foreign), so it reads all and writes its own ``sealed`` beside; this gc reads either form and, when it writes a
thread's seal, deletes the thread's others.

Why this cannot make gc delete anything it must keep: a seal only ever makes gc *keep* things — records it
does not read are kept, and the values and runs it lists are added to those the records read reference. The
checks above decide only whether what was kept is complete: a seal that no longer describes the namespace
(records deleted by ``prune`` or ``delete_for_runs``, a crashed rollback that left an orphan in the sealed
range) is not used, so garbage in the sealed range is still found. A seal that is damaged or not ours is
ignored, and a stale one (its thread is gone, or nothing gc judges is left in it) is deleted by the next gc.
``dry_run`` neither reads nor writes seals' effects into the bucket (it reads them to judge as cheaply as a real
run).
"""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..errors import CorruptObjectError
from .codec import THREAD_FORMAT, Codec
from .keys import Layout, is_own_segment
from .plans import Steps, pages, surely_before
from .requests import Emit, Page, Plan, Request

FOLDER = "_gc/"
"""The folder of the seals, under the saver's prefix (no reader or tool but gc looks there)."""
LEAF = "sealed"
FORMAT = 1
MARGIN_SECONDS = 2.0
"""The least a seal's cutoff lies before the listing's date: LastModified is in whole seconds."""


_DIGEST_LENGTH = 32
"""Hex digits of a listing's digest in a seal's key (128 bits)."""


def key_of(root: str, thread_segment: str, listed: str | None = None) -> str:
    """The seal of a thread: ``sealed.{listed}`` when it also says what a listing of the thread shows
    (:class:`Summary`), ``sealed`` when it does not. Seal keys list in the order of their thread folders (``T/``
    against ``T/``)."""
    leaf = LEAF if listed is None else f"{LEAF}.{listed}"
    return f"{root}{FOLDER}{thread_segment}/{leaf}"


@dataclass(frozen=True)
class SealKey:
    """A seal listed under ``_gc/``: its key, the thread's listing digest its key carries (``None``: a seal of
    0.1.0's form, ``sealed``, or one that could not say), and its LastModified."""

    key: str
    listed: str | None
    modified: datetime | None


def thread_of(root: str, key: str) -> tuple[str, str | None] | None:
    """The thread segment of a seal key and the listing digest it carries; ``None`` for anything else in the
    folder (foreign: left alone)."""
    rest = key[len(f"{root}{FOLDER}") :] if key.startswith(f"{root}{FOLDER}") else ""
    segment, slash, leaf = rest.partition("/")
    if not slash or not is_own_segment(segment):
        return None
    if leaf == LEAF:
        return segment, None
    name, dot, listed = leaf.partition(".")
    if name == LEAF and dot and len(listed) == _DIGEST_LENGTH and all(c in "0123456789abcdef" for c in listed):
        return segment, listed
    return None


def judged(relative: str) -> bool:
    """Whether gc's scan of a thread lists and judges a key (relative to the thread's folder): the keys directly
    under it, and those under ``ns/`` and ``r/``. Others (``threads/{T}/x/y``) it never looks at."""
    return "/" not in relative or relative.startswith(("ns/", "r/"))


class Summary:
    """What a listing shows of the keys of a thread that gc judges (:func:`judged`): how many, and a digest of
    their keys (relative to the thread) and ETags that does not depend on the order they were met in (a sum of
    one hash per key), so that gc's scan of a thread, which lists it in several listings, and the flat listing of
    every thread say the same of the same keys. A key taken out (deleted) is subtracted. ``known`` is False once
    a key came without an ETag: nothing can be compared then."""

    MODULUS = 1 << 128

    def __init__(self) -> None:
        self.count = 0
        self.total = 0
        self.known = True

    @staticmethod
    def _hash(relative: str, etag: str) -> int:
        entry = f"{relative}\n{etag.strip(chr(34))}".encode("utf-8", "surrogatepass")
        return int.from_bytes(hashlib.sha256(entry).digest()[:16], "big")

    def add(self, relative: str, etag: str | None) -> None:
        if etag is None:
            self.known = False
            return
        self.count += 1
        self.total = (self.total + self._hash(relative, etag)) % self.MODULUS

    def remove(self, relative: str, etag: str | None) -> None:
        if etag is None:
            self.known = False
            return
        self.count -= 1
        self.total = (self.total - self._hash(relative, etag)) % self.MODULUS

    def add_page(self, thread_prefix: str, page: Page) -> None:
        """Every key of ``page`` (all under ``thread_prefix`` and judged)."""
        etags = page.etags if len(page.etags) == len(page.keys) else [None] * len(page.keys)
        for key, etag in zip(page.keys, etags, strict=True):
            self.add(key[len(thread_prefix) :], etag)

    @property
    def digest(self) -> str | None:
        """The digest a seal's key carries (``None``: not known)."""
        if not self.known:
            return None
        return hashlib.sha256(f"{self.count}:{self.total}".encode()).hexdigest()[:_DIGEST_LENGTH]


def _entry(records_prefix: str, key: str, etag: str) -> bytes:
    return f"{key[len(records_prefix) :]}\n{etag.strip(chr(34))}\n".encode("utf-8", "surrogatepass")


@dataclass(frozen=True)
class Part:
    """One namespace's seal."""

    head: str
    top: str
    cutoff: float
    """POSIX time (the server's clock)."""
    count: int
    digest: str
    refs: frozenset[str]
    """Blob keys relative to the namespace's folder (``b/{channel}/{version}``)."""
    runs: frozenset[str]
    """Escaped run ids."""

    def same_records(self, other: Part) -> bool:
        """Whether two seals say the same of a namespace (made at different times: their cutoffs differ)."""
        return (self.head, self.top, self.count, self.digest) == (other.head, other.top, other.count, other.digest)

    def to_frame(self) -> dict[str, Any]:
        return {
            "head": self.head,
            "top": self.top,
            "cutoff": self.cutoff,
            "count": self.count,
            "digest": self.digest,
            "refs": sorted(self.refs),
            "runs": sorted(self.runs),
        }

    @classmethod
    def from_frame(cls, frame: dict[str, Any]) -> Part:
        return cls(
            head=str(frame["head"]),
            top=str(frame["top"]),
            cutoff=float(frame["cutoff"]),
            count=int(frame["count"]),
            digest=str(frame["digest"]),
            refs=frozenset(map(str, frame["refs"])),
            runs=frozenset(map(str, frame["runs"])),
        )


def encode(codec: Codec, parts: dict[str, Part]) -> bytes:
    # In the thread format: a 0.1.x gc trusting this seal would skip the records that tell it the format changed.
    return codec._thread_frame({"format": FORMAT, "namespaces": {ns: part.to_frame() for ns, part in parts.items()}})


def decode(codec: Codec, key: str, body: bytes) -> dict[str, Part]:
    """A thread's seal; empty when it cannot be read (damaged, foreign, another format): nothing is trusted."""
    try:
        frame = codec._unframe(key, body, THREAD_FORMAT)
        if frame.get("format") != FORMAT:
            return {}
        return {str(ns): Part.from_frame(part) for ns, part in frame["namespaces"].items()}
    except (CorruptObjectError, AttributeError, KeyError, TypeError, ValueError):
        return {}


class Check:
    """Whether a namespace's records at or below a seal's ``top`` are exactly the sealed ones (keys only)."""

    def __init__(self, part: Part, records_prefix: str) -> None:
        self.part = part
        self.records_prefix = records_prefix
        self.digest = hashlib.sha256()
        self.count = 0
        self.foreign_in_range = False

    def page(self, page: Page) -> None:
        for i, key in enumerate(page.keys):
            parsed = Layout.parse_checkpoint_key(self.records_prefix, key)
            if parsed is None or not parsed.is_record or parsed.checkpoint_id > self.part.top:
                continue
            modified = page.modified[i] if i < len(page.modified) else None
            etag = page.etags[i] if i < len(page.etags) else None
            if modified is None or etag is None or modified.timestamp() >= self.part.cutoff:
                self.foreign_in_range = True  # written since the seal (restored, copied, forked), or undated
                continue
            self.digest.update(_entry(self.records_prefix, key, etag))
            self.count += 1

    @property
    def valid(self) -> bool:
        return (
            not self.foreign_in_range and self.count == self.part.count and self.digest.hexdigest() == self.part.digest
        )


@dataclass
class Builder:
    """The seal of a namespace being judged: its committed records older than ``cutoff``, met newest first."""

    records_prefix: str
    cutoff: float
    digest: Any = field(default_factory=hashlib.sha256)
    count: int = 0
    top: str | None = None
    refs: set[str] = field(default_factory=set)
    runs: set[str] = field(default_factory=set)
    sound: bool = True
    """False once a record below ``top`` stays without being sealed: the range would not be exactly them."""

    def committed(
        self, key: str, etag: str | None, modified: datetime | None, checkpoint_id: str, refs: Iterable[str] = ()
    ) -> bool:
        """A record judged committed; whether it is sealed (old enough, dated, with an ETag)."""
        if etag is None or modified is None or modified.timestamp() >= self.cutoff:
            self.stays(checkpoint_id)
            return False
        if self.top is None:
            self.top = checkpoint_id
        self.digest.update(_entry(self.records_prefix, key, etag))
        self.count += 1
        self.refs.update(refs)
        return True

    def stays(self, checkpoint_id: str) -> None:
        """A record kept without being sealed (young, unreadable, pending)."""
        if self.top is not None and checkpoint_id < self.top:
            self.sound = False

    def part(self, head: str) -> Part | None:
        if not self.sound or self.top is None:
            return None
        return Part(
            head, self.top, self.cutoff, self.count, self.digest.hexdigest(), frozenset(self.refs), frozenset(self.runs)
        )


class Cursor:
    """The seals under the prefix, listed in step with the threads gc walks (both listings follow the server's
    one order of thread folders): one LIST page per 1,000 seals tells which threads have one, and what each says of
    its thread's listing (no GET for a thread that did not change, nor for one that has none), and which seals'
    threads are gone. Memory: a page."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.source = Steps(pages(f"{root}{FOLDER}"))
        self.buffer: collections.OrderedDict[str, list[SealKey]] = collections.OrderedDict()
        """Thread segment -> its seals, for the seals listed and not yet matched."""
        self.exhausted = False
        self.foreign = 0
        """Keys in the folder that are not seals of ours (left alone)."""

    def _fill(self) -> Plan[None]:
        for step in self.source:
            if isinstance(step, Emit):
                page: Page = step.value
                for i, key in enumerate(page.keys):
                    found = thread_of(self.root, key)
                    if found is None:
                        self.foreign += 1
                        continue
                    segment, listed = found
                    modified = page.modified[i] if len(page.modified) == len(page.keys) else None
                    self.buffer.setdefault(segment, []).append(SealKey(key, listed, modified))
                return
            requests: list[Request] = step
            self.source.answer((yield requests))
        self.exhausted = True

    def upto(self, segment: str | None) -> Plan[tuple[list[SealKey], list[str]]]:
        """The seals of thread ``segment``, and the keys of the seals of threads surely before it, which gc has
        passed without finding them (``None``: after the last thread; every seal left). A thread's seals are all
        in once a seal of a thread surely after it is listed."""
        while not self.exhausted and (
            segment is None or not self.buffer or not surely_before(segment, next(reversed(self.buffer)))
        ):
            yield from self._fill()
        passed: list[str] = []
        while self.buffer:
            first = next(iter(self.buffer))
            if segment is not None and not surely_before(first, segment):
                break
            passed.extend(seal.key for seal in self.buffer.pop(first))
        found = [] if segment is None else self.buffer.pop(segment, [])
        return found, passed
