"""Which records of a namespace are committed: the one rule that every reader, ``gc`` and
``delete_for_runs`` apply (``prune`` keeps only the head and what it needs, so it only uses the
PENDING/ORPHAN split by id that :meth:`Chain.decided` makes).

Why a rule is needed at all: a ``put`` sends its record and the head together, and S3 gives no
transaction, so the bucket holds records whose head never landed (a crash, a writer that lost the race
for the head). A record is committed when the head pointed at it, and nothing in the record itself can
say so — it was written before anyone knew. What *is* known is the chain: every record names the head
it replaced (``previous_head``), and the head only ever moves to a newer id, so the committed records
of a namespace are the head and the records reached from it by ``previous_head`` links, newest first.

Standing of one record, met in newest-first order (a listing of ``c/`` returns exactly that order):

=====================================  ==========  ================================================
record                                 standing    why
=====================================  ==========  ================================================
no head in the namespace               PENDING     nothing is committed yet; a first put may land
id newer than the head                 PENDING     a put in flight (or one that died: gc, by age)
id equal to the head's                 COMMITTED   the head is a copy of it
``detached``                           COMMITTED   an older id committed by its record alone
id equal to the next link              COMMITTED   on the chain; the link moves to its previous_head
id between two links                   ORPHAN      its head never landed and never can
id below a link that is missing        COMMITTED   the link was deleted (``delete_for_runs`` of an
                                                   older run, ``prune``): the chain resumes here
no link left (the chain's first)       ORPHAN      older than the thread's first commit
=====================================  ==========  ================================================

An ORPHAN can never become committed: its head PUT was conditioned on a head that the thread has left
(the head only moves forward), so it is garbage at once. A PENDING record may still commit, so only
its age (by the server's clock) makes it garbage. The "missing link" row is safe because whoever deletes
committed records (``delete_for_runs``, ``prune``) first deletes the orphans in the range it opens up,
so the first record below a gap is the next committed one; ``prune`` deletes records oldest first, so
an interrupted prune leaves the chain contiguous from the head down to where it stopped.

The first row is why ``repair_thread`` (:mod:`langgraph_s3_checkpoint._protocol.repair`), the one tool that writes a
head from records, never rebuilds a missing head from what the protocol itself leaves headless: a first
put that died before its head, or a delete that died after the heads (it marks the thread first).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Standing(Enum):
    COMMITTED = "committed"
    PENDING = "pending"
    """May still commit (newer than the head, or no head yet); garbage only once old."""
    ORPHAN = "orphan"
    """Can never commit: garbage now."""


@dataclass
class Chain:
    """Walks one namespace's commit chain while its records are met newest first."""

    head_id: str | None
    link: str | None
    """The next older committed id expected on the chain (``None``: the chain has ended)."""

    @classmethod
    def from_head(cls, head_id: str | None, head_previous: str | None) -> Chain:
        return cls(head_id, head_previous)

    @classmethod
    def below(cls, head_id: str | None, record_previous: str | None) -> Chain:
        """The chain as it continues below a committed record (a ``before=`` bound)."""
        return cls(head_id, record_previous)

    def standing(self, checkpoint_id: str, previous_head: str | None, detached: bool) -> Standing:
        """The standing of the next record (strictly older than every record met before)."""
        if self.head_id is None or checkpoint_id > self.head_id:
            return Standing.PENDING
        if checkpoint_id == self.head_id or detached:
            return Standing.COMMITTED
        if self.link is None or checkpoint_id > self.link:
            return Standing.ORPHAN
        # checkpoint_id == link, or the link was deleted and this is the next committed record.
        self.link = previous_head
        return Standing.COMMITTED

    def decided(self, checkpoint_id: str) -> Standing | None:
        """Whether ``checkpoint_id`` (not met yet) is already known to be off the chain or on it."""
        if self.head_id is None or checkpoint_id > self.head_id:
            return Standing.PENDING
        if checkpoint_id == self.head_id or checkpoint_id == self.link:
            return Standing.COMMITTED
        if self.link is None or checkpoint_id > self.link:
            return Standing.ORPHAN
        return None
