"""What gc found committed once, so that the next gc need not read those records again.

To tell committed records from leftovers, gc follows each namespace's commit chain (:mod:`.chain`), and a
record's place in it (``previous_head``, ``detached``) is in its body only: the key, size, ETag and date a
listing shows cannot say whether a record older than the head is a link of the chain or an orphan beside it
(both were written by a put that sent its head too). Nor can they say which large values and runs the
committed records reference. So the first gc reads every record; this module lets it write down what it
found, and later ones trust it for the records that have not changed since.

A *seal* is one small object per thread, ``{prefix}_gc/{T}/sealed``, holding for each namespace of T:

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

Why this cannot make gc delete anything it must keep: a seal only ever makes gc *keep* things — records it
does not read are kept, and the values and runs it lists are added to those the records read reference. The
checks above decide only whether what was kept is complete: a seal that no longer describes the namespace
(records deleted by ``prune`` or ``delete_for_runs``, a crashed rollback that left an orphan in the sealed
range) is not used, so garbage in the sealed range is still found. A seal that is damaged or not ours is
ignored, and a stale one (its thread is gone) is deleted by the next gc. ``dry_run`` neither reads nor writes
seals' effects into the bucket (it reads them to judge as cheaply as a real run).
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
from .plans import pages
from .requests import Emit, Page, Plan, Request

FOLDER = "_gc/"
"""The folder of the seals, under the saver's prefix (no reader or tool but gc looks there)."""
LEAF = "sealed"
FORMAT = 1
MARGIN_SECONDS = 2.0
"""The least a seal's cutoff lies before the listing's date: LastModified is in whole seconds."""


def key_of(root: str, thread_segment: str) -> str:
    """The seal of a thread; seal keys list in the order of their thread folders (``T/`` against ``T/``)."""
    return f"{root}{FOLDER}{thread_segment}/{LEAF}"


def thread_of(root: str, key: str) -> str | None:
    """The thread segment of a seal key; ``None`` for anything else in the folder (foreign: left alone)."""
    rest = key[len(f"{root}{FOLDER}") :] if key.startswith(f"{root}{FOLDER}") else ""
    segment, slash, leaf = rest.partition("/")
    return segment if slash and leaf == LEAF and is_own_segment(segment) else None


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


def _surely_before(a: str, b: str) -> bool:
    """Whether thread segment ``a`` lists before ``b`` on every server: byte order of the keys (``a/`` against
    ``b/``: S3, moto) and folder-by-folder order (``a`` against ``b``: SeaweedFS's filer) differ only where one
    segment continues the other with ``-`` or ``%``, which sort below ``/``."""
    return a < b and f"{a}/" < f"{b}/"


class Cursor:
    """The seals under the prefix, listed in step with the threads gc walks (both listings follow the server's
    one order of thread folders): one LIST page per 1,000 seals tells which threads have one (no GET for those
    that have none) and which seals' threads are gone. Memory: a page."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.source = pages(f"{root}{FOLDER}")
        self.buffer: collections.OrderedDict[str, str] = collections.OrderedDict()
        """Thread segment -> its seal's key, for the seals listed and not yet matched."""
        self.exhausted = False
        self.reply: Any = None
        self.foreign = 0
        """Keys in the folder that are not seals of ours (left alone)."""

    def _fill(self) -> Plan[None]:
        while True:
            try:
                step = self.source.send(self.reply)
            except StopIteration:
                self.exhausted = True
                return
            if isinstance(step, Emit):
                self.reply = None
                page: Page = step.value
                for key in page.keys:
                    segment = thread_of(self.root, key)
                    if segment is None:
                        self.foreign += 1
                    else:
                        self.buffer[segment] = key
                return
            requests: list[Request] = step
            self.reply = yield requests

    def upto(self, segment: str | None) -> Plan[tuple[bool, list[str]]]:
        """Whether the thread ``segment`` has a seal, and the seals of threads surely before it, which gc has
        passed without finding them (``None``: after the last thread; every seal left)."""
        while not self.exhausted and (
            segment is None
            or not self.buffer
            or not (next(reversed(self.buffer)) == segment or _surely_before(segment, next(reversed(self.buffer))))
        ):
            yield from self._fill()
        passed: list[str] = []
        while self.buffer:
            first = next(iter(self.buffer))
            if segment is not None and not _surely_before(first, segment):
                break
            passed.append(self.buffer.pop(first))
        found = segment is not None and self.buffer.pop(segment, None) is not None
        return found, passed
