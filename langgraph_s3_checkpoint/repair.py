"""Recovering from damage without losing data: rebuild a namespace's head, and list past damaged records.

**Why a head needs repair, not deletion.** The head is a namespace's commit pointer (docs/design.md): every
reader starts there, and the committed records are the chain it leads to. If the head is unreadable, the
latest read fails; deleting it, as generic advice for a damaged object would say, makes the thread read
as *empty* (``get_state`` returns ``{}``, the next turn starts a new conversation) although every record of
its history is still stored. :func:`repair_plan` writes a new head instead, a copy of the right record.

**Which record.** With the head gone there is no chain to follow (:mod:`langgraph_s3_checkpoint.chain`
classifies records by walking from the head), so the record is chosen from what records say about each
other, newest first:

1. If the damaged head still names its checkpoint id and that record is intact, that record: it *is*
   what the head was a copy of.
2. Otherwise let X be the newest record that another record names as its ``previous_head``. A record names
   the head it replaced, so X was certainly the head once (it is committed). Records that name X tried to
   replace it:

   * exactly one: that record, the newest whose own chain is consistent (it continues X, which continues
     the older chain). It is the checkpoint that replaced X unless its writer died between the record PUT
     and the head PUT, which the records cannot tell apart; the report says so;
   * none: X itself;
   * several (writers raced on X; a loser normally deletes its record, a crashed one cannot): X, the
     newest record that is certainly committed, and the report names the others.
3. If no stored record is named by another (a thread of one checkpoint, or a pruned one whose older
   links were deleted): the newest intact record that is not ``detached``.

The head is written with a conditional PUT (``If-Match`` on the damaged head, ``If-None-Match: *`` when
it is missing), so a writer that commits meanwhile wins and nothing is overwritten. Nothing is deleted.
An undecryptable head (a missing or wrong key) is not damage and is left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from langgraph.checkpoint.base import Checkpoint

from .codec import Codec, Record, WriteBatch
from .errors import CorruptObjectError, DamagedHeadError, DecryptionError
from .keys import Layout, is_digest, unescape
from .plans import READ_BATCH, all_pages, one
from .requests import PRECONDITION_FAILED, Get, Obj, Page, Plan, Put

if TYPE_CHECKING:  # typing only
    from .core import Core

OK = "ok"
REPAIRED = "repaired"
WOULD_REPAIR = "would-repair"
UNDECRYPTABLE = "undecryptable"
UNREPAIRABLE = "unrepairable"
CHANGED = "changed"


# ------------------------------------------------------------------------------------------------
# Listing past damaged records
# ------------------------------------------------------------------------------------------------
_NEWER_THAN_ANY_ID = "\U0010ffff"


def _ignore(error: CorruptObjectError) -> None:
    return None


@dataclass(frozen=True)
class SkippingCodec(Codec):
    """A codec for ``list(skip_damaged=True)``: a damaged record or writes object is reported and skipped.

    A damaged record decodes to a placeholder whose id is newer than any head, which the commit chain
    classifies as PENDING (never shown) without moving its link: the records below it are judged as
    below a missing link, exactly as after a deletion. Undecryptable objects and damaged heads still raise.
    """

    report: Callable[[CorruptObjectError], None] = field(default=_ignore, compare=False)

    def decode_record(self, key: str, data: bytes) -> Record:
        try:
            return super().decode_record(key, data)
        except (DecryptionError, DamagedHeadError):
            raise
        except CorruptObjectError as exc:
            self.report(exc)
            return Record(checkpoint=cast(Checkpoint, {"id": _NEWER_THAN_ANY_ID}), metadata={}, parent_id=None)

    def decode_writes(self, key: str, data: bytes) -> WriteBatch:
        try:
            return super().decode_writes(key, data)
        except DecryptionError:
            raise
        except CorruptObjectError as exc:
            self.report(exc)
            return WriteBatch(task_id="", task_path="", writes=[])


# ------------------------------------------------------------------------------------------------
# Repair
# ------------------------------------------------------------------------------------------------
@dataclass
class NamespaceRepair:
    """What repair found and did in one namespace."""

    checkpoint_ns: str
    status: str
    """``ok``, ``repaired``, ``would-repair`` (dry run), ``undecryptable``, ``unrepairable`` or ``changed``."""
    head_id: str | None = None
    """The checkpoint the head points at now (or would, in a dry run)."""
    reason: str = ""
    damaged: list[str] = field(default_factory=list)
    """Keys of damaged records met on the way (left in place; ``langgraph-s3 verify`` lists them all)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "checkpoint_ns": self.checkpoint_ns,
            "status": self.status,
            "head_id": self.head_id,
            "reason": self.reason,
            "damaged": list(self.damaged),
        }


@dataclass
class RepairReport:
    thread_id: str
    dry_run: bool
    namespaces: list[NamespaceRepair] = field(default_factory=list)

    @property
    def repaired(self) -> list[NamespaceRepair]:
        return [n for n in self.namespaces if n.status in (REPAIRED, WOULD_REPAIR)]

    @property
    def ok(self) -> bool:
        """Whether every namespace has (or, dry, would have) a readable head."""
        return all(n.status in (OK, REPAIRED, WOULD_REPAIR) for n in self.namespaces)

    def as_dict(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "dry_run": self.dry_run,
            "namespaces": [n.as_dict() for n in self.namespaces],
        }


def _all_keys(prefix: str, delimiter: str | None = None) -> Plan[Page]:
    """Every key (or common prefix) under ``prefix``, merged into one page."""
    found = yield from all_pages(prefix, delimiter)
    return Page(keys=[k for p in found for k in p.keys], prefixes=[x for p in found for x in p.prefixes], token=None)


def repair_plan(core: Core, thread_id: str, *, dry_run: bool) -> Plan[RepairReport]:
    """Check every namespace of a thread and rebuild each damaged or missing head (see the module docs)."""
    layout = core.layout
    root = layout.namespaces(thread_id)
    listing = yield from _all_keys(root, delimiter="/")
    report = RepairReport(thread_id, dry_run)
    for ns_prefix in listing.prefixes:
        segment = layout.segment_after(ns_prefix, root)
        name = unescape(segment) if not is_digest(segment) else segment
        if is_digest(segment):
            obj = yield from one(Get(f"{ns_prefix}name"))
            if obj is not None:
                name = obj.body.decode("utf-8", "surrogatepass")
        outcome = yield from _repair_namespace(core.codec, ns_prefix, name, dry_run)
        if outcome.status in (REPAIRED, CHANGED):
            core.memory.forget_namespace(thread_id, name)
        report.namespaces.append(outcome)
    return report


def _repair_namespace(codec: Codec, ns_prefix: str, name: str, dry_run: bool) -> Plan[NamespaceRepair]:
    head_key = f"{ns_prefix}head"
    head: Obj | None = yield from one(Get(head_key))
    known_id: str | None = None
    if head is not None:
        try:
            record = codec.decode_record(head_key, head.body)
            return NamespaceRepair(name, OK, str(record.checkpoint["id"]), "the head is readable")
        except DecryptionError as exc:
            return NamespaceRepair(name, UNDECRYPTABLE, None, f"not damaged: {exc}")
        except CorruptObjectError as exc:
            damage = f"the head is damaged ({exc.reason})"
        try:
            known_id = codec.peek_head_id(head_key, head.body)
        except CorruptObjectError:
            known_id = None
    else:
        damage = "the head is missing"
    records_prefix = f"{ns_prefix}c/"
    listing = yield from _all_keys(records_prefix)
    records: list[tuple[str, str]] = []
    for key in listing.keys:  # newest first: the listing order of inverted ids
        parsed = Layout.parse_checkpoint_key(records_prefix, key)
        if parsed is not None and parsed.is_record:
            records.append((key, parsed.checkpoint_id))
    if not records:
        status = UNREPAIRABLE if head is not None else OK
        why = f"{damage} and no checkpoint record is stored" if head is not None else "nothing stored"
        return NamespaceRepair(name, status, None, why)

    damaged: list[str] = []
    seen: list[tuple[Record, Obj]] = []
    named: dict[str, list[str]] = {}
    chosen: tuple[Record, Obj] | None = None
    reason = ""
    anchor: tuple[Record, Obj] | None = None
    for start in range(0, len(records), READ_BATCH):
        chunk = records[start : start + READ_BATCH]
        objs: list[Obj | None] = yield [Get(key) for key, _ in chunk]
        for (key, checkpoint_id), obj in zip(chunk, objs, strict=True):
            if obj is None:
                continue
            try:
                record = codec.decode_record(key, obj.body)
            except DecryptionError as exc:
                return NamespaceRepair(name, UNDECRYPTABLE, None, f"the records cannot be decrypted: {exc}")
            except CorruptObjectError:
                damaged.append(key)
                continue
            if known_id is not None and checkpoint_id == known_id:
                chosen = (record, obj)
                reason = f"{damage}, but it still names checkpoint {known_id!r}, whose record is intact"
                break
            if checkpoint_id in named:
                anchor = (record, obj)
                break
            seen.append((record, obj))
            if record.previous_head and not record.detached:
                named.setdefault(record.previous_head, []).append(checkpoint_id)
        if chosen is not None or anchor is not None:
            break

    if chosen is None and anchor is not None:
        x_id = anchor[0].checkpoint["id"]
        continuing = [(r, o) for r, o in seen if r.previous_head == x_id and not r.detached]
        if len(continuing) == 1:
            chosen = continuing[0]
            reason = (
                f"{damage}; checkpoint {chosen[0].checkpoint['id']!r} is the newest record whose chain is "
                f"consistent: it replaced {x_id!r}, which a later record names as its predecessor (so it was "
                "committed). If its writer died between the record and the head, it was not committed before."
            )
        elif not continuing:
            chosen = anchor
            reason = f"{damage}; {x_id!r} is the newest record another record names as its predecessor"
        else:
            chosen = anchor
            others = ", ".join(repr(r.checkpoint["id"]) for r, _ in continuing)
            reason = (
                f"{damage}; several records ({others}) continue {x_id!r} (writers raced), and which one "
                f"committed cannot be told: back to {x_id!r}, the newest record certainly committed"
            )
    if chosen is None:
        candidates = [(r, o) for r, o in seen if not r.detached]
        if not candidates:
            why = f"{damage} and no intact checkpoint record is stored"
            return NamespaceRepair(name, UNREPAIRABLE, None, why, damaged)
        chosen = candidates[0]
        reason = (
            f"{damage}; no stored record names another as its predecessor (a new or pruned thread): "
            f"{chosen[0].checkpoint['id']!r} is the newest intact record"
        )

    head_id = str(chosen[0].checkpoint["id"])
    if dry_run:
        return NamespaceRepair(name, WOULD_REPAIR, head_id, reason, damaged)
    put = (
        Put(head_key, chosen[1].body, if_match=head.etag)
        if head is not None
        else Put(head_key, chosen[1].body, if_none_match=True)
    )
    reply = yield from one(put)
    if reply is PRECONDITION_FAILED:
        why = "the head changed while repairing (a writer committed): nothing written; run repair again"
        return NamespaceRepair(name, CHANGED, None, why, damaged)
    return NamespaceRepair(name, REPAIRED, head_id, reason, damaged)


__all__ = ["NamespaceRepair", "RepairReport", "SkippingCodec", "repair_plan"]
