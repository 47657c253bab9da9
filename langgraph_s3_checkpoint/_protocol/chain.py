"""Which records of a namespace are committed: every visibility rule, in one place, that every reader, ``gc``,
``prune`` and ``delete_for_runs`` ask (``tests/test_chain.py`` walks every row).

Why a rule is needed at all: a ``put`` sends its record and the head together, and S3 gives no
transaction, so the bucket holds records whose head never landed (a crash, a writer that lost the race
for the head). A record is committed when the head pointed at it, and nothing in the record itself can
say so — it was written before anyone knew. What *is* known is the chain: every record names the head
it replaced (``previous_head``), and the head only ever moves to a newer id, so the committed records
of a namespace are the head and the records reached from it by ``previous_head`` links, newest first.

Standing of one record, met in newest-first order (a listing of ``c/`` returns exactly that order), by
:meth:`Chain.standing`:

=====================================  ===========  ================================================
record                                 standing     why
=====================================  ===========  ================================================
no head in the namespace               PENDING      nothing is committed yet; a first put may land
id newer than the head                 PENDING      a put in flight (or one that died: gc, by age)
the head cannot be decoded             COMMITTED    a record read by id is trusted rather than the
                                                    whole history hidden (the latest read fails, naming
                                                    the head; ``repair_thread`` rebuilds it; a listing
                                                    fails, and gc leaves the namespace alone)
its body cannot be decoded             UNDECODABLE  never shown (``list(skip_damaged=True)``), and the
                                                    link stays: the records below are judged as below
                                                    a missing link
id equal to the head's                 COMMITTED    the head is a copy of it
id the head names as deleted           ORPHAN       a committed record a rollback or ``prune``
                                                    deleted: a copy of it landing later (a request
                                                    held in the network) never comes back
``detached``                           COMMITTED    an older id committed by its record alone
id equal to the next link              COMMITTED    on the chain; the link moves to its previous_head
                                                    (or, when the head names that link as deleted,
                                                    where the deleter said the chain goes on)
id between two links                   ORPHAN       its head never landed and never can
id below a link that is missing and    COMMITTED    a gap no deleter recorded (one that an earlier
the head does not name as deleted                   release's rollback or prune left): the chain
                                                    resumes here; *resumed*, not linked
no link left (the chain's first)       ORPHAN       older than the thread's first commit
=====================================  ===========  ================================================

What can be said before a record's body is read (:meth:`Chain.decided`, :meth:`Chain.pending`): an id newer than
the head (or any id, without a head) is PENDING, so a listing never reads it and never shows it; the head's id and
the next link's are COMMITTED; an id between the links is ORPHAN. Writes met without their record
(:meth:`Chain.writes_without_record`) are PENDING above the head, COMMITTED for the head's own checkpoint (a
head-only commit: its record PUT was lost, the head is a copy of it) and ORPHAN otherwise. What ``prune`` does not
keep (:meth:`Chain.unkept`) is PRUNABLE at or below the head, PENDING above it.

An ORPHAN can never become committed: its head PUT was conditioned on a head that the thread has left
(the head only moves forward), so it is garbage at once. A PENDING record may still commit, so only
its age (by the server's clock) makes it garbage. A PRUNABLE record is committed history that ``prune`` chose not
to keep (it keeps the head and what the head needs): it goes whatever its age.

**Deleted links.** Whoever deletes committed records that a later one links to (``delete_for_runs`` of a run below
another run's checkpoints, ``prune``) first rewrites the head (``If-Match``) naming them in its ``deleted`` field:
each deleted link with the link the chain goes on at (``None``: nothing below is committed). Every commit carries
the head's field into its record, so the head always has it. Why not rely on the gap alone, as the last row does:
a record that lands *in* a gap after the deletion (a put whose record PUT was held in the network while others
committed and rolled back; a late copy of the deleted record itself) would be the first record below the gap and be
judged committed, showing a checkpoint that was never a head, or one that was rolled back. Named, the gap is
bridged: such a record is between two links (or is the deleted one), so an ORPHAN. The head is the one object
whose write is conditional, so no late request can undo the naming; the records are not. A verdict reached through
an unnamed gap is :attr:`Chain.resumed`: readers show it (history an earlier release left), but a put whose head PUT
was refused never takes it for its own commit (``committing._settle``).

The first row is why ``repair_thread`` (:mod:`langgraph_s3_checkpoint._protocol.repair`), the one tool that writes a
head from records, never rebuilds a missing head from what the protocol itself leaves headless: a first
put that died before its head, or a delete that died after the heads (it marks the thread first).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum


class Standing(Enum):
    COMMITTED = "committed"
    PENDING = "pending"
    """May still commit (newer than the head, or no head yet); garbage only once old."""
    ORPHAN = "orphan"
    """Can never commit: garbage now."""
    PRUNABLE = "prunable"
    """At or below the head, and not kept by ``prune``: it goes whatever its age."""
    UNDECODABLE = "undecodable"
    """Its body cannot be decoded: never shown, and the chain's link does not move past it."""


DELETED_NAMED = 256
"""How many deleted links a head names at most (:attr:`Chain.deleted`): the newest are kept. A gap whose naming was
dropped is judged as an unnamed one, which matters only while a request held in the network can still land in it."""


@dataclass
class Chain:
    """Walks one namespace's commit chain while its records are met newest first."""

    head_id: str | None
    link: str | None
    """The next older committed id expected on the chain (``None``: the chain has ended)."""
    head_damaged: bool = False
    """The head could not be decoded: ``head_id`` and ``link`` are unknown."""
    deleted: Mapping[str, str | None] = field(default_factory=dict)
    """Committed records deleted from the chain, as the head names them: each with the link the chain goes on at."""
    resumed: bool = False
    """The walk passed a gap the head does not name (the last row of the table): what it judged committed below it
    is committed by that rule, not by links written as links."""

    @classmethod
    def from_head(
        cls, head_id: str | None, head_previous: str | None, deleted: Mapping[str, str | None] | None = None
    ) -> Chain:
        return cls(head_id, head_previous, deleted=dict(deleted or {}))

    @classmethod
    def without_head(cls) -> Chain:
        """A namespace with no head: nothing in it is committed."""
        return cls(None, None)

    @classmethod
    def of_damaged_head(cls) -> Chain:
        """A namespace whose head cannot be decoded (see the table)."""
        return cls(None, None, head_damaged=True)

    def below(self, record_previous: str | None) -> Chain:
        """The chain as it continues below a committed record of it (a ``before=`` bound)."""
        return Chain(self.head_id, record_previous, deleted=self.deleted, resumed=self.resumed)

    def _bridge(self, checkpoint_id: str) -> None:
        """Move the link past deleted links at or above ``checkpoint_id`` (a record met next, or the one a walk
        starts below), to where their deleter said the chain goes on."""
        while self.link is not None and self.link in self.deleted and checkpoint_id <= self.link:
            self.link = self.deleted[self.link]

    def pending(self, checkpoint_id: str) -> bool:
        """Whether ``checkpoint_id`` is newer than the head, or there is no head: a put in flight (or one that died),
        never shown and never read to judge it."""
        return not self.head_damaged and (self.head_id is None or checkpoint_id > self.head_id)

    def standing(
        self, checkpoint_id: str, previous_head: str | None, detached: bool, *, undecodable: bool = False
    ) -> Standing:
        """The standing of the next record (strictly older than every record met before); ``undecodable``: its body
        could not be decoded, so ``previous_head`` and ``detached`` are unknown."""
        settled = self._settled(checkpoint_id, undecodable=undecodable)
        if settled is not None:
            return settled
        if detached:
            return Standing.COMMITTED
        if self.link is None or checkpoint_id > self.link:
            return Standing.ORPHAN
        if checkpoint_id < self.link:
            self.resumed = True  # the link was deleted and no deleter named it: the chain resumes here
        self.link = previous_head
        return Standing.COMMITTED

    def decided(self, checkpoint_id: str) -> Standing | None:
        """Whether ``checkpoint_id`` (not met yet) is already known to be off the chain or on it."""
        settled = self._settled(checkpoint_id)
        if settled is not None:
            return settled
        if checkpoint_id == self.link:
            return Standing.COMMITTED
        if self.link is None or checkpoint_id > self.link:
            return Standing.ORPHAN
        return None

    def _settled(self, checkpoint_id: str, *, undecodable: bool = False) -> Standing | None:
        """The standing of a record that its link does not decide: every record under a damaged head, one newer
        than the head, one that cannot be decoded, the head's own, one whose link was deleted (after moving the
        link past the deleted links above it); ``None`` for the others."""
        if self.head_damaged:
            return Standing.COMMITTED
        if self.pending(checkpoint_id):
            return Standing.PENDING
        if undecodable:
            return Standing.UNDECODABLE
        if checkpoint_id == self.head_id:
            return Standing.COMMITTED
        self._bridge(checkpoint_id)
        if checkpoint_id in self.deleted:
            return Standing.ORPHAN
        return None

    def writes_without_record(self, checkpoint_id: str) -> Standing:
        """The standing of writes whose record was not listed before them (deleted, or never written)."""
        if self.pending(checkpoint_id):
            return Standing.PENDING
        if checkpoint_id == self.head_id:
            return Standing.COMMITTED  # a head-only commit: the head is the record (restored by a latest read)
        return Standing.ORPHAN

    def unkept(self, checkpoint_id: str) -> Standing:
        """The standing of a record (or its writes) that ``prune`` does not keep."""
        return Standing.PENDING if self.pending(checkpoint_id) else Standing.PRUNABLE
