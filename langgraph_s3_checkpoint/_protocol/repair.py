"""Recovering from damage without losing data: rebuild a namespace's head, and list past damaged records.

**Why a head needs repair, not deletion.** The head is a namespace's commit pointer (docs/design.md): every
reader starts there, and the committed records are the chain it leads to. If the head is unreadable, the
latest read fails; deleting it, as generic advice for a damaged object would say, makes the thread read
as *empty* (``get_state`` returns ``{}``, the next turn starts a new conversation) although every record of
its history is still stored. :func:`repair_plan` writes a new head instead, a copy of the right record.

**Which record.** With the head gone there is no chain to follow (:mod:`langgraph_s3_checkpoint._protocol.chain`
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
   links were deleted): the newest intact record that is not ``detached`` — when the head is damaged.
   When it is *missing*, only if that record continues an earlier checkpoint (it names a
   ``previous_head``, so the thread had committed before): a lone record that continues nothing is
   exactly what the first put of a thread leaves when it dies before its head, or loses the race for a
   new thread's head, and the commit chain (:mod:`langgraph_s3_checkpoint._protocol.chain`) calls every record of
   a namespace without a head uncommitted. Promoting it would commit a checkpoint whose writer was told
   it failed.

**A delete that died part-way.** ``delete_thread`` deletes the heads first (so does ``expire_threads``, and a
``delete_for_runs`` of a namespace's only run), so a delete that dies leaves records without heads, which would
read as heads lost. Each writes the thread's ``deleting`` marker before deleting anything and removes it
last: while the marker exists, a namespace whose head is missing is not rebuilt from records listed at or
before the marker's time (by the server's clock, to the second), and is reported ``deleting``; records
written after it (the thread was used again) are judged by the rules above. ``copy_thread`` and an import likewise
mark their target (``copying``) before writing anything and remove the marker once the target's heads landed:
while it exists, no record of a namespace whose head is missing is used (status ``copying``).

The head is written with a conditional PUT (``If-Match`` on the damaged head, ``If-None-Match: *`` when
it is missing), so a writer that commits meanwhile wins and nothing is overwritten. Nothing is deleted.
An undecryptable head (a missing or wrong key) is not damage and is left alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, cast

from langgraph.checkpoint.base import Checkpoint

from ..errors import CorruptObjectError, DamagedHeadError, DecryptionError
from .codec import Codec, Record, WriteBatch
from .keys import Layout, copy_marked_by, escape, filed_checkpoint_id, is_digest, marker_operation, named_id
from .plans import READ_BATCH, all_of, all_pages, chunks, exists, id_behind, landed, one, own_folders_under
from .requests import (
    CREATE,
    DeleteIfMatch,
    Get,
    ListKeys,
    Page,
    Plan,
    Put,
    StoredObject,
    Update,
)

if TYPE_CHECKING:  # typing only
    from .checkpoint_plans import CheckpointPlans

OK = "ok"
REPAIRED = "repaired"
WOULD_REPAIR = "would-repair"
UNDECRYPTABLE = "undecryptable"
UNREPAIRABLE = "unrepairable"
CHANGED = "changed"
DELETING = "deleting"
COPYING = "copying"


# ------------------------------------------------------------------------------------------------
# Listing past damaged records
# ------------------------------------------------------------------------------------------------
def _ignore(error: CorruptObjectError) -> None:
    return None


@dataclass(frozen=True)
class SkippingCodec(Codec):
    """A codec for ``list(skip_damaged=True)``: a damaged record or writes object is reported and skipped.

    A damaged record decodes to a stand-in that says so (``undecodable``, with the id its key names), which the
    commit chain calls UNDECODABLE (never shown) without moving its link: the records below it are judged as
    below a missing link, exactly as after a deletion. Undecryptable objects and damaged heads still raise.
    """

    report: Callable[[CorruptObjectError], None] = field(default=_ignore, compare=False)

    def decode_record(self, key: str, data: bytes) -> Record:
        try:
            return super().decode_record(key, data)
        except (DecryptionError, DamagedHeadError):
            raise
        except CorruptObjectError as exc:
            checkpoint_id = filed_checkpoint_id(key)
            if checkpoint_id is None:
                raise  # not a record's key: nothing to stand in for
            self.report(exc)
            return Record(cast(Checkpoint, {"id": checkpoint_id}), metadata={}, parent_id=None, undecodable=True)

    def decode_writes(self, key: str, data: bytes) -> WriteBatch:
        try:
            return super().decode_writes(key, data)
        except DecryptionError:
            raise
        except CorruptObjectError as exc:
            self.report(exc)
            return WriteBatch(task_id="", writes=[])


# ------------------------------------------------------------------------------------------------
# Repair
# ------------------------------------------------------------------------------------------------
@dataclass
class NamespaceRepair:
    """What repair found and did in one namespace."""

    checkpoint_ns: str
    status: str
    """``ok``, ``repaired``, ``would-repair`` (dry run), ``undecryptable``, ``unrepairable``, ``changed``,
    ``deleting`` (a delete of the thread did not finish: its records are not brought back) or ``copying`` (a
    ``copy_thread`` or an import into the thread did not commit: its records are not made a history)."""
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
    name_restored: bool = False
    """Whether the thread's ``name`` object (long ids only) was missing or damaged and was (or, dry, would be)
    written again."""
    prefixes: list[str] = field(default_factory=list, repr=False)
    """The folder of each namespace, in the order of :attr:`namespaces`."""

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
            "name_restored": self.name_restored,
            "namespaces": [n.as_dict() for n in self.namespaces],
        }


def _all_keys(prefix: str, delimiter: str | None = None) -> Plan[Page]:
    """Every key (or common prefix) under ``prefix``, merged into one page."""
    found = yield from all_pages(prefix, delimiter)
    return Page(
        keys=[k for p in found for k in p.keys],
        prefixes=[x for p in found for x in p.prefixes],
        token=None,
        modified=[m for p in found for m in p.modified],
    )


def _to_the_second(moment: datetime) -> datetime:
    """Listings date objects to the millisecond on some servers, to the second on others."""
    return moment.replace(microsecond=0)


@dataclass(frozen=True)
class _Markers:
    """The markers that concern one namespace: the thread's ``deleting`` (``delete_thread``,
    ``expire_threads``), the namespace's own ``deleting`` (a rollback that removes its head) and the thread's
    ``copying`` (a ``copy_thread`` or an import into it that has not committed)."""

    thread_key: str
    ns_key: str
    copy_key: str
    thread_since: datetime | None = None
    ns_since: datetime | None = None
    copy_since: datetime | None = None

    @property
    def condemned_up_to(self) -> datetime | None:
        """Records listed at or before this are not used: a delete that has not finished was deleting them,
        or (every record) a copy that has not committed was writing them."""
        if self.copy_since is not None:
            return _EVERY_RECORD
        return max((t for t in (self.thread_since, self.ns_since) if t is not None), default=None)

    @property
    def dates(self) -> tuple[datetime | None, ...]:
        return (self.thread_since, self.ns_since, self.copy_since)


_EVERY_RECORD = datetime.max.replace(tzinfo=timezone.utc)


def _read_markers(markers: _Markers) -> Plan[_Markers]:
    """Which markers exist, with their LastModified (to the second)."""
    keys = [markers.thread_key, markers.ns_key, markers.copy_key]
    found = yield from all_of([ListKeys(key, max_keys=1) for key in keys])

    def since(key: str, page: Page) -> datetime | None:
        dates = [m for k, m in zip(page.keys, page.modified, strict=False) if k == key]
        return _to_the_second(dates[0]) if dates else None

    thread_since, ns_since, copy_since = (since(key, page) for key, page in zip(keys, found, strict=True))
    return dataclasses.replace(markers, thread_since=thread_since, ns_since=ns_since, copy_since=copy_since)


def _unfinished_delete(markers: _Markers, what: str, condemned: int) -> Plan[str]:
    """The reason to report for a namespace whose records an unfinished delete or copy condemned."""
    if markers.copy_since is not None:
        marker = yield from one(Get(markers.copy_key))
        who, again = copy_marked_by(marker.body if marker is not None else b"")
        return (
            f"{what}: {who} into this thread began at {markers.copy_since.isoformat()} and did not "
            f"commit; the {condemned} record(s) it wrote are not a committed history. Delete the thread and "
            f"{again}"
        )
    if markers.thread_since is not None and markers.thread_since == markers.condemned_up_to:
        marker = yield from one(Get(markers.thread_key))
        began = f"began at {markers.thread_since.isoformat()} and did not finish"
        kept = f"the {condemned} record(s) it was deleting are not brought back"
        if marker is not None and marker_operation(marker.body)[0] == "expire_threads":
            return (
                f"{what}: an expire_threads of this thread {began}; {kept}. If the thread is in use (another "
                "namespace has a head: expire_threads was putting heads back), put this head back from the "
                "namespace's newest record (docs/design.md, Known limits); otherwise run delete_thread to finish"
            )
        return f"{what}: a delete_thread of this thread {began}; {kept}. Run delete_thread again to finish it"
    marker = yield from one(Get(markers.ns_key))
    run = marker_operation(marker.body)[1] if marker is not None else "?"
    since = markers.ns_since.isoformat() if markers.ns_since is not None else "?"
    return (
        f"{what}: a rollback of run {run!r} (delete_for_runs), which removes this namespace's head, began at "
        f"{since} and did not finish; the {condemned} record(s) it was deleting are not brought back. Run "
        f"delete_for_runs([{run!r}]) again to finish it"
    )


def repair_plan(core: CheckpointPlans, thread_id: str, *, dry_run: bool) -> Plan[RepairReport]:
    """Check every namespace of a thread and rebuild each damaged or missing head (see the module docs)."""
    report = yield from _repair(core.layout, core.codec, thread_id, dry_run)
    for outcome in report.namespaces:
        if outcome.status in (REPAIRED, CHANGED):
            core.recall.forget_namespace(thread_id, outcome.checkpoint_ns)
    return report


def repair_needed(layout: Layout, codec: Codec, thread_id: str) -> Plan[list[tuple[str, str]]]:
    """What ``repair_thread`` would fix in a thread, as (key, problem) pairs: the same decision as its dry run
    (nothing is written), which ``verify`` reports. A head it would rebuild (missing with a committed history, or
    damaged) is named by the head's key; a thread ``name`` it would write again, by the name's key."""
    report = yield from _repair(layout, codec, thread_id, dry_run=True)
    command = f"`langgraph-s3 repair {thread_id}` (repair_thread) would"
    found = []
    if report.name_restored:
        found.append((layout.thread_name(thread_id), f"{command} write it again: it is missing or holds another id"))
    for ns, prefix in zip(report.namespaces, report.prefixes, strict=True):
        if ns.status == WOULD_REPAIR:
            reason = ns.reason.rstrip(".")
            found.append((Layout.head_in(prefix), f"{reason}; {command} make checkpoint {ns.head_id!r} the head"))
    return found


def _repair(layout: Layout, codec: Codec, thread_id: str, dry_run: bool) -> Plan[RepairReport]:
    root = layout.namespaces(thread_id)
    report = RepairReport(thread_id, dry_run)
    folders = yield from own_folders_under(root)  # a foreign folder holds nothing of ours to repair
    if folders:
        report.name_restored = yield from _restore_thread_name(layout, thread_id, dry_run)
    for ns_prefix in folders:
        segment = layout.segment_after(ns_prefix, root)
        name = yield from id_behind(segment, ns_prefix)
        if name is None:  # a digest without its name: shown as is
            name = segment
        markers = (layout.deleting(thread_id), layout.copying(thread_id))
        report.namespaces.append((yield from _repair_namespace(codec, ns_prefix, name, dry_run, markers)))
        report.prefixes.append(ns_prefix)
    return report


def _restore_thread_name(layout: Layout, thread_id: str, dry_run: bool) -> Plan[bool]:
    """Write the ``name`` object of a thread whose id is too long to be a key segment, when it is missing or
    does not hold this id (deleted by hand, overwritten by another tool): without it the thread is not listed,
    verified, expired or rolled back by run, since only the id it holds leads back to the thread. Whether it
    was (or, dry, would be) written."""
    segment = escape(thread_id)
    if not is_digest(segment):
        return False
    key = layout.thread_name(thread_id)
    obj = yield from one(Get(key))
    if named_id(segment, None if obj is None else obj.body) == thread_id:
        return False
    if not dry_run:
        yield [Put(key, thread_id.encode("utf-8", "surrogatepass"), expires=False)]
    return True


def _repair_namespace(
    codec: Codec, ns_prefix: str, name: str, dry_run: bool, thread_markers: tuple[str, str]
) -> Plan[NamespaceRepair]:
    """Diagnose one namespace's head and, if it is damaged or missing, rebuild it (see the module docs)."""
    head_key = Layout.head_in(ns_prefix)
    head = yield from one(Get(head_key))
    damage = _diagnose_head(codec, name, head_key, head)
    if isinstance(damage, NamespaceRepair):
        return damage
    thread_marker, copy_marker = thread_markers
    markers = _Markers(thread_marker, Layout.deleting_in(ns_prefix), copy_marker)
    if damage.missing:  # read after the head was found missing: a delete that removed it has marked first
        markers = yield from _read_markers(markers)
    records = yield from _candidates(ns_prefix, name, damage, markers)
    if isinstance(records, NamespaceRepair):
        return records
    try:
        survey = yield from _survey(codec, records, damage.known_id)
    except DecryptionError as exc:
        return NamespaceRepair(name, UNDECRYPTABLE, None, f"the records cannot be decrypted: {exc}")
    choice, reason = _choose_head(survey, damage)
    if choice is None:
        return NamespaceRepair(name, UNREPAIRABLE, None, reason, survey.damaged)
    record, obj = choice
    missing = yield from _missing_blobs(ns_prefix, record)
    if missing:
        why = (
            f"{damage.what}; the record to restore, {record.checkpoint['id']!r}, references large values that are "
            f"not stored ({', '.join(missing)}): as the head it would make the thread unreadable, not empty"
        )
        return NamespaceRepair(name, UNREPAIRABLE, None, why, survey.damaged)
    planned = NamespaceRepair(name, WOULD_REPAIR, str(record.checkpoint["id"]), reason, survey.damaged)
    if dry_run:
        return planned
    written = yield from _write_head(head_key, head, obj, planned)
    if written.status != REPAIRED or head is not None:
        return written
    return (yield from _take_back_if_deleted(head_key, obj, markers, ns_prefix, record, written))


def _candidates(
    ns_prefix: str, name: str, damage: _Damage, markers: _Markers
) -> Plan[list[tuple[str, str]] | NamespaceRepair]:
    """The key and id of each record the head may be rebuilt from, newest first; or the outcome, when there
    is none (nothing stored, or only what an unfinished delete condemned)."""
    stored = yield from _stored_records(Layout.records_in(ns_prefix))
    condemned_up_to = markers.condemned_up_to if damage.missing else None
    records = [(key, cid) for key, cid, modified in stored if not _condemned(modified, condemned_up_to)]
    if records:
        return records
    if stored and condemned_up_to is not None:
        why = yield from _unfinished_delete(markers, damage.what, len(stored))
        return NamespaceRepair(name, COPYING if markers.copy_since is not None else DELETING, None, why)
    if damage.missing:
        return NamespaceRepair(name, OK, None, "nothing stored")
    return NamespaceRepair(name, UNREPAIRABLE, None, f"{damage.what} and no checkpoint record is stored")


def _take_back_if_deleted(
    head_key: str, written: StoredObject, markers: _Markers, ns_prefix: str, record: Record, outcome: NamespaceRepair
) -> Plan[NamespaceRepair]:
    """After a missing head was rebuilt: if a delete of the thread began meanwhile (a marker appeared or
    changed) or removed the chosen record, delete the head just written (only if it is still this
    repair's), so that the repair does not bring back what the delete is removing."""
    now = yield from _read_markers(markers)
    still_stored = yield from exists(Layout.record_in(ns_prefix, str(record.checkpoint["id"])))
    if now.dates == markers.dates and still_stored:
        return outcome
    head = yield from one(Get(head_key))
    if head is not None and head.body == written.body:
        yield [DeleteIfMatch(head_key, head.etag)]
    why = "a delete of this thread began while repairing: the head written was taken back; run repair again later"
    return NamespaceRepair(outcome.checkpoint_ns, CHANGED, None, why, outcome.damaged)


def _missing_blobs(ns_prefix: str, record: Record) -> Plan[list[str]]:
    """The keys of the large values ``record`` references that are not stored (a copy or a delete that died
    part-way can leave records whose values it had not copied, or had already deleted)."""
    wanted = [Layout.blob_in(ns_prefix, channel, version) for channel, version in record.blobs.items()]
    found = (yield from all_of([ListKeys(key, max_keys=1) for key in wanted])) if wanted else []
    return [key for key, page in zip(wanted, found, strict=True) if key not in page.keys]


@dataclass(frozen=True)
class _Damage:
    """Why a namespace's head needs repair."""

    what: str
    """``the head is missing`` or ``the head is damaged (reason)``: the start of every reason reported."""
    known_id: str | None
    """The checkpoint id a damaged head still names, if that much of it is readable."""
    missing: bool = False
    """The head does not exist (rather than exists damaged)."""


def _diagnose_head(codec: Codec, name: str, head_key: str, head: StoredObject | None) -> NamespaceRepair | _Damage:
    """What is wrong with a head: nothing (a readable head, or an undecryptable one, which is not damage:
    the report that it stays as it is) or the damage to repair."""
    if head is None:
        return _Damage("the head is missing", None, missing=True)
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
    return _Damage(damage, known_id)


def _stored_records(records_prefix: str) -> Plan[list[tuple[str, str, datetime | None]]]:
    """The key, checkpoint id and LastModified of every record of a namespace, newest first (the listing
    order of inverted ids)."""
    listing = yield from _all_keys(records_prefix)
    dates: list[datetime | None] = list(listing.modified) if len(listing.modified) == len(listing.keys) else []
    records: list[tuple[str, str, datetime | None]] = []
    for i, key in enumerate(listing.keys):
        parsed = Layout.parse_checkpoint_key(records_prefix, key)
        if parsed is not None and parsed.is_record:
            records.append((key, parsed.checkpoint_id, dates[i] if dates else None))
    return records


def _condemned(modified: datetime | None, condemned_up_to: datetime | None) -> bool:
    """Whether a record is one an unfinished ``delete_thread`` was deleting: listed at or before its marker
    (an undated record, which no server we know of lists, counts as condemned: nothing is promoted on a
    guess)."""
    if condemned_up_to is None:
        return False
    return modified is None or _to_the_second(modified) <= condemned_up_to


@dataclass
class _Survey:
    """What a namespace's records say about each other, read newest first until one settles the choice."""

    damaged: list[str] = field(default_factory=list)
    """Keys of the damaged records met."""
    seen: list[tuple[Record, StoredObject]] = field(default_factory=list)
    """The intact records read before the one that settled it, newest first."""
    named: dict[str, list[str]] = field(default_factory=dict)
    """Checkpoint ids named as ``previous_head``, with the records that name them."""
    known: tuple[Record, StoredObject] | None = None
    """The record the damaged head still names (rule 1)."""
    anchor: tuple[Record, StoredObject] | None = None
    """X, the newest record that a newer record names as its ``previous_head`` (rule 2)."""

    def take(self, codec: Codec, key: str, checkpoint_id: str, obj: StoredObject, known_id: str | None) -> bool:
        """Take one record; True once it settles the choice (it is the head's, or X)."""
        try:
            record = codec.decode_record(key, obj.body)
        except DecryptionError:
            raise  # not damage: the caller reports the namespace as undecryptable
        except CorruptObjectError:
            self.damaged.append(key)
            return False
        if known_id is not None and checkpoint_id == known_id:
            self.known = (record, obj)
            return True
        if checkpoint_id in self.named:
            self.anchor = (record, obj)
            return True
        self.seen.append((record, obj))
        if record.previous_head and not record.detached:
            self.named.setdefault(record.previous_head, []).append(checkpoint_id)
        return False


def _survey(codec: Codec, records: list[tuple[str, str]], known_id: str | None) -> Plan[_Survey]:
    """Read the records newest first, ``READ_BATCH`` at a time, until one settles the choice."""
    survey = _Survey()
    for chunk in chunks(records, READ_BATCH):
        objs = yield from all_of([Get(key) for key, _ in chunk])
        for (key, checkpoint_id), obj in zip(chunk, objs, strict=True):
            if obj is not None and survey.take(codec, key, checkpoint_id, obj, known_id):
                return survey
    return survey


def _choose_head(survey: _Survey, damage: _Damage) -> tuple[tuple[Record, StoredObject] | None, str]:
    """The record to make the head (``None``: none may be) and why, by the rules of the module docs."""
    if survey.known is not None:
        why = f"{damage.what}, but it still names checkpoint {damage.known_id!r}, whose record is intact"
        return survey.known, why
    if survey.anchor is not None:
        return _choose_from_anchor(survey.anchor, survey.seen, damage.what)
    candidates = [(r, o) for r, o in survey.seen if not r.detached]
    if not candidates:
        return None, f"{damage.what} and no intact checkpoint record is stored"
    newest = candidates[0][0]
    if damage.missing and newest.previous_head is None:
        why = (
            f"{damage.what} and no stored record is known to have committed: the newest, "
            f"{newest.checkpoint['id']!r}, continues no earlier checkpoint, which is what the first put of a "
            "thread leaves when it dies before its head (or loses the race for a new thread's head), so it "
            "is not made the head. If you deleted this head by hand, copy that record's object to the head key"
        )
        return None, why
    reason = (
        f"{damage.what}; no stored record names another as its predecessor (a new or pruned thread): "
        f"{newest.checkpoint['id']!r} is the newest intact record"
    )
    return candidates[0], reason


def _choose_from_anchor(
    anchor: tuple[Record, StoredObject], seen: list[tuple[Record, StoredObject]], damage: str
) -> tuple[tuple[Record, StoredObject], str]:
    """Rule 2: X (``anchor``) was a head once; the one record that continues it, or else X itself."""
    x_id = anchor[0].checkpoint["id"]
    continuing = [(r, o) for r, o in seen if r.previous_head == x_id and not r.detached]
    if len(continuing) == 1:
        reason = (
            f"{damage}; checkpoint {continuing[0][0].checkpoint['id']!r} is the newest record whose chain is "
            f"consistent: it replaced {x_id!r}, which a later record names as its predecessor (so it was "
            "committed). If its writer died between the record and the head, it was not committed before."
        )
        return continuing[0], reason
    if not continuing:
        return anchor, f"{damage}; {x_id!r} is the newest record another record names as its predecessor"
    others = ", ".join(repr(r.checkpoint["id"]) for r, _ in continuing)
    reason = (
        f"{damage}; several records ({others}) continue {x_id!r} (writers raced), and which one "
        f"committed cannot be told: back to {x_id!r}, the newest record certainly committed"
    )
    return anchor, reason


def _write_head(
    head_key: str, head: StoredObject | None, chosen: StoredObject, planned: NamespaceRepair
) -> Plan[NamespaceRepair]:
    """The fix: write the chosen record as the head, conditionally (``If-Match`` on the damaged head,
    ``If-None-Match: *`` when it is missing), so that a writer committing meanwhile wins."""
    put = (
        Put(head_key, chosen.body, mode=Update(head.etag))
        if head is not None
        else Put(head_key, chosen.body, mode=CREATE)
    )
    reply = yield from one(put)
    [applied] = yield from landed([put], [reply])  # a refused retry of a write that landed is still ours
    if not applied:
        why = "the head changed while repairing (a writer committed): nothing written; run repair again"
        return NamespaceRepair(planned.checkpoint_ns, CHANGED, None, why, planned.damaged)
    return dataclasses.replace(planned, status=REPAIRED)


__all__ = ["NamespaceRepair", "RepairReport", "SkippingCodec", "repair_needed", "repair_plan"]
